"""Storage: disks and the volumes behind them (pure; files are made by `ch_launcher.prepare`).

Every volume becomes one virtio-blk `DiskConfig` (Cloud Hypervisor has no other disk bus) with
`id` = the disk name, an explicit `image_type`, and the on-pod path KubeVirt uses for it, so that
virt-handler's mounts and the files it prepares are where the launcher looks
(kubevirt `@d923fdb815cd`; `<...>` are the launcher's flags):

| volume | image | source |
|---|---|---|
| containerDisk (volume index i) | qcow2 overlay `<ephemeral-disk-dir>/disk-data/<vol>/disk.qcow2` over `<container-disk-dir>/disk_<i>.img` | pkg/container-disk/container-disk.go, pkg/ephemeral-disk/ephemeral-disk.go |
| persistentVolumeClaim, dataVolume (filesystem) | raw `<private-dir>/vmi-disks/<vol>/disk.img`, created sparse when missing | pkg/host-disk/host-disk.go |
| persistentVolumeClaim, dataVolume (block) | the device `/dev/<vol>` | pkg/storage/utils volumepath, converter/storage/volume.go |
| ephemeral | qcow2 overlay `<ephemeral-disk-dir>/disk-data/<vol>/disk.qcow2` over the PVC's image or device | pkg/ephemeral-disk/ephemeral-disk.go |
| hostDisk | raw `<private-dir>/vmi-disks/<vol>/<basename of path>` (Disk: must exist; DiskOrCreate: sparse) | pkg/host-disk/host-disk.go |
| emptyDisk | raw sparse `<ephemeral-disk-dir>/empty-disks/<vol>.img` | pkg/emptydisk/emptydisk.go (see below) |
| cloudInitNoCloud / cloudInitConfigDrive | ISO `<ephemeral-disk-dir>/cloud-init-data/<ns>/<name>/noCloud.iso` / `configdrive.iso` | pkg/cloud-init/cloud-init.go |
| configMap / secret / downwardAPI | ISO `<private-dir>/{config-map,secret,downwardapi}-disks/<vol>.iso` of `<private-dir>/{config-map,secret,downwardapi}/<vol>/` | pkg/config/ |
| serviceAccount | ISO `<private-dir>/service-account-disk/service-account.iso` of `/var/run/secrets/kubernetes.io/serviceaccount` | pkg/config/service-account.go |

What goes into a cloud-init ISO is decided in `cloudinit`.

Deviations, each for a reason: KubeVirt keeps emptyDisks as qcow2 in libvirt's runtime dir
(`/var/run/libvirt/empty-disks/`); there is no libvirt here, so they live in the ephemeral-disks
emptyDir (same pod lifetime) as sparse raw files, which Cloud Hypervisor serves without a
qcow2 layer. The service-account directory is derived from `--kubevirt-share-dir`'s parent
(`/var/run`) so that every path follows the launcher's flags. ISO-backed disks are read-only.

Filesystem PVCs: virt-handler replaces them by `hostDisk` volumes before it calls the launcher
(`hostdisk.ReplacePVCByHostDisk`, pkg/virt-handler/vm.go) and creates `disk.img` itself; a PVC
that still arrives is treated the same way, sized by KubeVirt's rule from
`status.volumeStatus[].persistentVolumeClaimInfo`: the request when smaller than the capacity,
else the capacity, rounded down to 1 MiB; when the volume has less free space, what is free if
within 10 % (KubeVirt's default `pvc-tolerate-less-space-up-to-percent`).

Boot order: Cloud Hypervisor has no boot-order setting; its firmware boots from the first disk
it finds, and it creates devices, and so PCI slots, in `disks[]` order. So disks with a
`bootOrder` come first, lowest first, then the others in VMI order; the guest names them
vda, vdb, ... in that order, as the Domain view says.
"""

from __future__ import annotations

import dataclasses
import posixpath
from dataclasses import dataclass, field
from typing import Any

from ch_launcher.ch.vmconfig import DiskConfig, ImageType
from ch_launcher.convert import expansion
from ch_launcher.convert.cloudinit import CLOUD_INIT_KINDS, access_credentials, cloud_init_step, first_cloud_init_volume
from ch_launcher.convert.context import Translation
from ch_launcher.convert.hotplug_volumes import hotplug_path, hotplug_ready, is_hotplugged, volume_status
from ch_launcher.convert.plan import BuildIso, CreateOverlay, CreateSparseImage, ExpandImage, RequireFile, Step
from ch_launcher.kubevirt.domain_view import DomainDisk
from ch_launcher.kubevirt.quantity import MiB, quantity_bytes
from ch_launcher.kubevirt.vmi import DNS1123_LABEL_RULE, Disk, Volume, VolumeStatus, is_dns1123_label

MAX_IMAGE_BYTES = 2**63 - 2**20  # the largest file size (off_t), in whole MiB
MAX_SERIAL_BYTES = 20  # VIRTIO_BLK_ID_BYTES; Cloud Hypervisor refuses longer (vmm/src/config.rs@v53.0)
# KubeVirt's defaults for PVC images (pkg/virt-config/virt-config.go@d923fdb815cd).
LESS_PVC_SPACE_TOLERATION = 10
MINIMUM_PVC_RESERVE_BYTES = 131072
BLOCK_DEVICE_DIR = "/dev"  # where kubelet puts a pod's volumeDevices (KubeVirt renders /dev/<vol>)
CONFIG_ISO_DEFAULT_LABEL = "cfgdata"  # pkg/config/config.go defaultCreateIsoImage
ISO_MAX_LABEL = 32  # the ISO 9660 volume identifier field (ECMA-119 8.4.6)


@dataclass
class _Image:
    """What one volume becomes: where the disk image is and what it is."""

    path: str
    image_type: ImageType
    block: bool = False
    readonly: bool = False
    backing_files: bool | None = None
    steps: list[Step] = field(default_factory=list)


def device_name(index: int) -> str:
    """vda, vdb, ..., vdz, vdaa, ...: the guest's name for the index-th virtio disk."""
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(ord("a") + rest) + letters
    return "vd" + letters


def _align_down_mib(n: int) -> int:
    return n - n % MiB


def configure_storage(t: Translation) -> None:
    """Fill `disks` and `Translation.disks`, and append the steps that make their files."""
    spec = t.vmi.spec
    volumes: dict[str, tuple[int, Volume]] = {}
    for i, volume in enumerate(spec.volumes):
        if volume.name in volumes:
            t.unsupported(f"spec.volumes[{i}].name", f"spec.volumes[{i}].name '{volume.name}' is a duplicate",
                          "FieldValueInvalid")
            continue
        volumes[volume.name] = (i, volume)
    cloud_init = first_cloud_init_volume(t)
    ssh_key_dirs = access_credentials(t, cloud_init)

    entries = _disk_entries(t, volumes)
    translated: list[tuple[int | None, int, DiskConfig, DomainDisk]] = []
    boot_orders: dict[int, str] = {}
    for position, (path, disk) in enumerate(entries):
        found = volumes.get(disk.name)
        if found is None:
            t.unsupported(f"{path}.name", f"{path}.Name '{disk.name}' not found.", "FieldValueInvalid")
            continue
        vi, volume = found
        status = volume_status(t.vmi.status.volumeStatus, volume.name)
        hotplugged = is_hotplugged(volume, status)
        if disk.bootOrder is not None:
            if disk.bootOrder < 1:
                t.unsupported(f"{path}.bootOrder", f"{path}.bootOrder must have a value greater than 0",
                              "FieldValueInvalid")
            elif disk.bootOrder in boot_orders:
                t.unsupported(f"{path}.bootOrder", f"{path}.bootOrder {disk.bootOrder} is already used by "
                              f"{boot_orders[disk.bootOrder]}", "FieldValueInvalid")
            else:
                boot_orders[disk.bootOrder] = path
        result = _disk(t, path, disk, vi, volume, cloud_init, ssh_key_dirs, hotplugged=hotplugged)
        if result is not None and hotplugged:
            if not hotplug_ready(status):
                continue  # checked, but not in the pod yet: a later Sync attaches it
            t.hotplug_disks.add(disk.name)
        if result is not None:
            translated.append((disk.bootOrder, position, *result))

    # bootOrder first (lowest first), then VMI order: the firmware boots the first disk.
    translated.sort(key=lambda e: (e[0] is None or e[0] < 1, e[0] or 0, e[1]))
    configs: list[DiskConfig] = []
    for n, (boot_order, _, config, domain) in enumerate(translated):
        configs.append(config)
        t.disks.append(dataclasses.replace(domain, target_dev=device_name(n), boot_order=boot_order))
    t.config.disks = configs or None


def _disk_entries(t: Translation, volumes: dict[str, tuple[int, Volume]]) -> list[tuple[str, Disk]]:
    """The VMI's disks with their field paths, plus the disk KubeVirt's defaulting adds for each
    volume that has none (util.SetDefaultVolumeDisk, pkg/util/util.go@d923fdb815cd); such a
    disk is reported at its volume's path."""
    spec = t.vmi.spec
    entries: list[tuple[str, Disk]] = []
    seen: set[str] = set()
    for i, disk in enumerate(spec.domain.devices.disks):
        path = f"spec.domain.devices.disks[{i}]"
        if disk.name in seen:
            t.unsupported(f"{path}.name", f"{path}.name '{disk.name}' is a duplicate", "FieldValueInvalid")
            continue
        seen.add(disk.name)
        entries.append((path, disk))
    claimed = seen | {fs.name for fs in spec.domain.devices.filesystems}
    firmware = spec.domain.firmware
    if firmware is not None and firmware.acpi is not None:
        claimed |= {firmware.acpi.slicNameRef, firmware.acpi.msdmNameRef}
    for name, (vi, _) in volumes.items():
        if name not in claimed:
            entries.append((f"spec.volumes[{vi}]", Disk(name=name)))
    return entries


def _disk(t: Translation, path: str, disk: Disk, vi: int, volume: Volume, cloud_init: str | None,
          ssh_key_dirs: tuple[str, ...], *, hotplugged: bool = False) -> tuple[DiskConfig, DomainDisk] | None:
    ok = _check_disk_device(t, path, disk, hotplugged)
    image = _volume(t, vi, volume, cloud_init, ssh_key_dirs)
    if image is None or not ok:
        return None
    if not is_dns1123_label(disk.name):
        # KubeVirt's own rule; the name also becomes file paths and the device id (Cloud
        # Hypervisor reserves ids starting with '_').
        t.unsupported(f"{path}.name", f"{path}.name '{disk.name}' must be {DNS1123_LABEL_RULE}",
                      "FieldValueInvalid")
        return None
    # Fields are gathered first and the model built once: assignments to a VmConfig model are
    # validated one by one, which shows in the webhook's throughput on VMIs with many disks.
    config: dict[str, Any] = {"id": disk.name, "path": image.path, "image_type": image.image_type}
    if image.backing_files is not None:
        config["backing_files"] = image.backing_files
    readonly = image.readonly or bool(disk.disk and disk.disk.readonly)
    if readonly:
        config["readonly"] = True
    if not _disk_options(t, path, disk, config, hotplugged):
        return None
    devices = t.vmi.spec.domain.devices
    boot_vcpus = t.config.cpus.boot_vcpus if t.config.cpus else 1
    if devices.blockMultiQueue and boot_vcpus > 1:
        # KubeVirt gives each virtio disk one queue per vCPU; Cloud Hypervisor allows at most
        # the boot vCPUs (`Queue count ... must not exceed boot vCPUs`).
        config["num_queues"] = boot_vcpus
    t.steps.extend(image.steps)
    _follow_claim_size(t, disk.name, vi, volume, image, hotplugged)
    domain = DomainDisk(alias=disk.name, target_dev="", readonly=readonly, serial=disk.serial,
                        source_file="" if image.block else image.path, source_dev=image.path if image.block else "",
                        image_type="qcow2" if image.image_type == "Qcow2" else "raw")
    return DiskConfig(**config), domain


def _follow_claim_size(t: Translation, name: str, vi: int, volume: Volume, image: _Image,
                       hotplugged: bool) -> None:
    """A disk that is its PVC (not an overlay over it) follows the claim's size: grown before
    boot when the claim grew meanwhile (a file), and live as it grows (`convert.expansion`)."""
    status = volume_status(t.vmi.status.volumeStatus, volume.name)
    info = status.persistentVolumeClaimInfo if status else None
    if info is None or volume.source_kind not in expansion.PVC_KINDS or image.image_type != "Raw":
        return
    sizing = expansion.disk_sizing(name, image.path, image.block, info)
    t.disk_sizing[name] = sizing
    if not image.block and not hotplugged:
        t.steps.append(ExpandImage(field=f"spec.volumes[{vi}]", sizing=sizing))


def _check_disk_device(t: Translation, path: str, disk: Disk, hotplugged: bool = False) -> bool:
    """The disk's device type and bus. Returns whether it is a virtio disk."""
    ok = True
    for kind, why in (("lun", "it emulates no SCSI; attach the volume as a virtio disk instead"),
                      ("cdrom", "it emulates no CD-ROM; attach the image as a virtio disk instead"),
                      ("floppy", "it emulates no floppy drive; attach the image as a virtio disk instead")):
        if getattr(disk, kind) is not None:
            t.unsupported(f"{path}.{kind}", f"{path}.{kind} is not supported by Cloud Hypervisor: {why}")
            ok = False
    target = disk.disk
    if target is not None:
        if target.bus == "sata":
            # KubeVirt's own mutating webhook turns an empty disk bus into `sata` on amd64
            # (kubevirt pkg/defaults/amd64.go@d923fdb815cd, setDefaultAmd64DisksBus), and our
            # validating webhook only ever sees the defaulted VMI. Refusing sata would refuse
            # every `disk: {}`, so it is a degradation: the disk is attached as virtio-blk.
            # The message says where the value comes from: most users who see it never wrote it.
            t.warn(f"{path}.disk.bus", f"{path}.disk.bus 'sata' (KubeVirt's default for a disk without a bus) "
                   "is attached as virtio-blk (no SATA in Cloud Hypervisor): the guest sees /dev/vdX")
        elif target.bus == "scsi" and hotplugged:
            # `virtctl addvolume`'s default bus (kubevirt pkg/virtctl/vm/add_volume.go@d923fdb815cd).
            t.warn(f"{path}.disk.bus", f"{path}.disk.bus 'scsi' of a hotplugged disk is attached as virtio-blk "
                   "(no SCSI in Cloud Hypervisor): the guest sees /dev/vdX")
        elif target.bus not in ("", "virtio"):
            t.unsupported(f"{path}.disk.bus", f"{path}.disk.bus '{target.bus}' is not supported by Cloud "
                          "Hypervisor: its disks are virtio only; set bus: virtio")
            ok = False
        if target.pciAddress:
            t.unsupported(f"{path}.disk.pciAddress", f"{path}.disk.pciAddress is not supported by the Cloud "
                          "Hypervisor backend: devices take PCI slots in order")
            ok = False
    return ok


def _disk_options(t: Translation, path: str, disk: Disk, config: dict[str, Any], hotplugged: bool = False) -> bool:
    ok = True
    if disk.serial:
        if len(disk.serial.encode()) > MAX_SERIAL_BYTES and hotplugged:
            # virtctl addvolume sets the volume name (up to 63 characters) as the serial.
            serial = disk.serial.encode()[:MAX_SERIAL_BYTES].decode(errors="ignore")
            t.warn(f"{path}.serial", f"{path}.serial '{disk.serial}' is truncated to '{serial}', the "
                   f"{MAX_SERIAL_BYTES} bytes a virtio disk serial holds")
            config["serial"] = serial
        elif len(disk.serial.encode()) > MAX_SERIAL_BYTES:
            t.unsupported(f"{path}.serial", f"{path}.serial '{disk.serial}' is longer than {MAX_SERIAL_BYTES} "
                          "bytes, the most a virtio disk serial holds", "FieldValueInvalid")
            ok = False
        else:
            config["serial"] = disk.serial
    cache = disk.cache
    if disk.shareable:
        if cache not in ("", "none"):
            t.unsupported(f"{path}.cache", f"{path}.cache: a shareable disk requires cache 'none', got "
                          f"'{cache}'", "FieldValueInvalid")
            ok = False
        cache = "none"
        t.warn(f"{path}.shareable", "Cloud Hypervisor locks writable images: a second VM on a shared "
               "file fails to boot (block volumes are fine)")
    if cache == "none":
        config["direct"] = True
    elif cache == "writethrough":
        t.warn(f"{path}.cache", "Cloud Hypervisor has no writethrough mode: writes are cached until "
               "the guest flushes")
    elif cache not in ("", "writeback"):
        t.unsupported(f"{path}.cache", f"{path}.cache '{cache}' is not a known cache mode", "FieldValueInvalid")
        ok = False
    if disk.errorPolicy not in ("", "report"):
        t.warn(f"{path}.errorPolicy", "Cloud Hypervisor reports I/O errors to the guest; it does not "
               f"{disk.errorPolicy} the VM")
    if disk.blockSize:
        if disk.blockSize.get("custom") is not None:
            t.unsupported(f"{path}.blockSize.custom", f"{path}.blockSize.custom is not supported by Cloud "
                          "Hypervisor: its disks have a fixed logical block size of 512 bytes")
            ok = False
        elif disk.blockSize.get("matchVolume") is not None:
            t.warn(f"{path}.blockSize.matchVolume", "block sizes are not matched to the volume on Cloud Hypervisor")
    if disk.tag:
        t.warn(f"{path}.tag", "device role tags are not passed to the guest's metadata")
    return ok


# --- volumes ---------------------------------------------------------------------------------


def _volume(t: Translation, vi: int, volume: Volume, cloud_init: str | None,
            ssh_key_dirs: tuple[str, ...]) -> _Image | None:
    kind = volume.source_kind
    vpath = f"spec.volumes[{vi}]"
    if len(volume.source_kinds) > 1:
        # KubeVirt's wording and cause type (vmi-create-admitter.go@d923fdb815cd validateVolumes)
        t.unsupported(vpath, f"{vpath} must have exactly one source type set", "FieldValueInvalid")
        return None
    env = t.env
    name = volume.name
    if kind == "containerDisk":
        overlay = f"{env.ephemeral_disk_dir}/disk-data/{name}/disk.qcow2"
        backing = f"{env.container_disk_dir}/disk_{vi}.img"
        return _Image(overlay, "Qcow2", backing_files=True, steps=[
            CreateOverlay(field=f"{vpath}.containerDisk", path=overlay, backing=backing, backing_format="")])
    if kind in ("persistentVolumeClaim", "dataVolume"):
        status = volume_status(t.vmi.status.volumeStatus, name)
        image: _Image | None
        if is_hotplugged(volume, status):
            block = _is_block(t, name)
            image = _Image(hotplug_path(env.hotplug_disk_dir, name, block), "Raw", block=block)
        else:
            image = _pvc_image(t, f"{vpath}.{kind}", name)
        claim = volume.persistentVolumeClaim  # None for a dataVolume
        if image is not None and claim is not None and claim.readOnly:
            image.readonly = True
        return image
    if kind == "ephemeral":
        assert volume.ephemeral is not None
        block = _is_block(t, name)
        backing = _block_path(name) if block else _pvc_file(t, name)
        overlay = f"{env.ephemeral_disk_dir}/disk-data/{name}/disk.qcow2"
        return _Image(overlay, "Qcow2", backing_files=True, steps=[
            CreateOverlay(field=f"{vpath}.ephemeral", path=overlay, backing=backing, backing_format="raw")])
    if kind == "hostDisk":
        return _host_disk(t, vpath, volume)
    if kind == "emptyDisk":
        assert volume.emptyDisk is not None
        size = _size(t, f"{vpath}.emptyDisk.capacity", volume.emptyDisk.capacity, name)
        if size is None:
            return None
        path = f"{env.ephemeral_disk_dir}/empty-disks/{name}.img"
        return _Image(path, "Raw", steps=[CreateSparseImage(field=f"{vpath}.emptyDisk", path=path, size=size)])
    if kind in CLOUD_INIT_KINDS:
        if cloud_init != name:
            t.unsupported(f"{vpath}.{kind}", f"{vpath}.{kind}: only one cloud-init volume is supported; KubeVirt "
                          "reads the first one only", "FieldValueInvalid")
            return None
        step = cloud_init_step(t, vi, volume, kind, ssh_key_dirs)
        return None if step is None else _Image(step.path, "Raw", readonly=True, steps=[step])
    if kind in ("configMap", "secret", "downwardAPI", "serviceAccount"):
        return _config_iso(t, vpath, volume, kind)
    if kind in ("downwardMetrics", "memoryDump", "sysprep"):
        why = {
            "downwardMetrics": "the metrics disk is refreshed by libvirt-based tooling this backend does not run",
            "memoryDump": "memory dumps are taken through libvirt, which this backend does not run",
            "sysprep": "sysprep media is attached as a CD-ROM, which Cloud Hypervisor does not emulate",
        }[kind]
        t.unsupported(f"{vpath}.{kind}", f"{vpath}.{kind} is not supported by the Cloud Hypervisor backend: {why}")
        return None
    t.unsupported(vpath, f"{vpath} '{name}' has no volume source the Cloud Hypervisor backend knows",
                  "FieldValueRequired")
    return None


def _status(t: Translation, name: str) -> VolumeStatus | None:
    for status in t.vmi.status.volumeStatus:
        if status.name == name:
            return status
    return None


def _is_block(t: Translation, name: str) -> bool:
    status = _status(t, name)
    info = status.persistentVolumeClaimInfo if status else None
    return info is not None and info.volumeMode == "Block"


def _block_path(name: str) -> str:
    return f"{BLOCK_DEVICE_DIR}/{name}"


def _pvc_file(t: Translation, name: str, base: str = "disk.img") -> str:
    return f"{t.env.private_dir}/vmi-disks/{name}/{base}"


def _pvc_image(t: Translation, path: str, name: str) -> _Image | None:
    if _is_block(t, name):
        device = _block_path(name)
        return _Image(device, "Raw", block=True, steps=[
            RequireFile(field=path, path=device, what=f"block device of volume {name}", block_device=True)])
    file = _pvc_file(t, name)
    size = _pvc_size(t, path, name)
    if size is None:
        # Without the claim's size the image cannot be made: it must exist (virt-handler makes it).
        return _Image(file, "Raw", steps=[RequireFile(field=path, path=file, what=f"disk image of volume {name}")])
    return _Image(file, "Raw", steps=[CreateSparseImage(
        field=path, path=file, size=size, create_parent=False,
        tolerate_less_space_percent=LESS_PVC_SPACE_TOLERATION, reserve_bytes=MINIMUM_PVC_RESERVE_BYTES)])


def _pvc_size(t: Translation, path: str, name: str) -> int | None:
    """KubeVirt's size for a PVC's disk.img (hostdisk.replaceForHostDisk): the request if smaller
    than the capacity (or no capacity), else the capacity; rounded down to 1 MiB."""
    status = _status(t, name)
    info = status.persistentVolumeClaimInfo if status else None
    if info is None:
        return None
    try:
        capacity = quantity_bytes(info.capacity["storage"]) if "storage" in info.capacity else None
        requested = quantity_bytes(info.requests["storage"]) if "storage" in info.requests else None
    except ValueError as e:
        t.unsupported(path, f"{path}: the claim's size in status.volumeStatus is not a quantity: {e}",
                      "FieldValueInvalid")
        return None
    if capacity is None and requested is None:
        return None
    if requested is not None and (capacity is None or capacity > requested):
        size = requested
    else:
        assert capacity is not None
        size = capacity
    size = min(_align_down_mib(size), MAX_IMAGE_BYTES)
    if size <= 0:
        t.unsupported(path, f"{path}: the size for volume {name} is too low, must be at least 1MiB",
                      "FieldValueInvalid")
        return None
    return size


def _size(t: Translation, path: str, value: object, name: str) -> int | None:
    """A capacity rounded down to 1 MiB (util.AlignImageSizeTo1MiB), at least 1 MiB."""
    try:
        size = quantity_bytes(value)
    except ValueError as e:
        t.unsupported(path, f"{path} '{value}' is not a valid quantity: {e}", "FieldValueInvalid")
        return None
    size = _align_down_mib(size)
    if size > MAX_IMAGE_BYTES:
        t.unsupported(path, f"{path} '{value}': the size for volume {name} is too large", "FieldValueInvalid")
        return None
    if size <= 0:
        t.unsupported(path, f"{path} '{value}': the size for volume {name} is too low, must be at least 1MiB",
                      "FieldValueInvalid")
        return None
    return size


def _host_disk(t: Translation, vpath: str, volume: Volume) -> _Image | None:
    hd = volume.hostDisk
    assert hd is not None
    base = f"{vpath}.hostDisk"
    filename = posixpath.basename(hd.path.rstrip("/"))
    if filename in ("", ".", ".."):
        t.unsupported(f"{base}.path", f"{base}.path '{hd.path}' must name a file", "FieldValueInvalid")
        return None
    # virt-controller mounts the host directory at vmi-disks/<vol>/ (host-disk.go GetMountedHostDiskPath).
    path = _pvc_file(t, volume.name, filename)
    if hd.type == "Disk":
        return _Image(path, "Raw", steps=[RequireFile(field=f"{base}.path", path=path,
                                                      what=f"host disk {hd.path} of volume {volume.name}")])
    if hd.type == "DiskOrCreate":
        if hd.capacity is None:
            t.unsupported(f"{base}.capacity", f"{base}.capacity is required for type DiskOrCreate",
                          "FieldValueRequired")
            return None
        size = _size(t, f"{base}.capacity", hd.capacity, volume.name)
        if size is None:
            return None
        return _Image(path, "Raw", steps=[CreateSparseImage(
            field=base, path=path, size=size, create_parent=False,
            tolerate_less_space_percent=LESS_PVC_SPACE_TOLERATION, reserve_bytes=MINIMUM_PVC_RESERVE_BYTES)])
    t.unsupported(f"{base}.type", f"{base}.type '{hd.type}' must be Disk or DiskOrCreate", "FieldValueInvalid")
    return None


def _config_iso(t: Translation, vpath: str, volume: Volume, kind: str) -> _Image | None:
    private = t.env.private_dir
    name = volume.name
    if kind == "serviceAccount":
        # The token mount (/var/run/secrets/...), found beside the share dir (/var/run/kubevirt).
        source = f"{posixpath.dirname(t.env.share_dir.rstrip('/'))}/secrets/kubernetes.io/serviceaccount"
        iso = f"{private}/service-account-disk/service-account.iso"
        label = ""
    else:
        dirs = {"configMap": "config-map", "secret": "secret", "downwardAPI": "downwardapi"}[kind]
        source = f"{private}/{dirs}/{name}"
        iso = f"{private}/{dirs}-disks/{name}.iso"
        label = getattr(volume, kind).volumeLabel
        if len(label) > ISO_MAX_LABEL or not (label.isascii() and label.isprintable()):
            path = f"{vpath}.{kind}.volumeLabel"
            t.unsupported(path, f"{path} '{label}' must be at most {ISO_MAX_LABEL} printable ASCII characters, "
                          "what an ISO 9660 volume label holds", "FieldValueInvalid")
            return None
    step = BuildIso(field=f"{vpath}.{kind}", path=iso, volume_label=label or CONFIG_ISO_DEFAULT_LABEL,
                    files=(), source_dir=source)
    return _Image(iso, "Raw", readonly=True, steps=[step])
