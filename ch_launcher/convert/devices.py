"""`spec.domain.devices` other than disks and NICs -> rng, vsock, fs, VFIO, watchdog, pvpanic.

Decided on what Cloud Hypervisor v53 really has (cloud-hypervisor.md §8; the full table with
reasons is docs/features.md):

- `rng` -> virtio-rng from `/dev/urandom` (CH adds one anyway; set explicitly when asked).
- `autoattachVSOCK` -> a virtio-vsock device with the CID virt-controller put in
  `status.VSOCKCID`. CH's vsock is *hybrid* (Firecracker style): the host end is a unix socket in
  the VMI directory, not the kernel's AF_VSOCK, so node-side users of the CID cannot reach the
  guest: degraded, with a warning.
- `filesystems[].virtiofs` -> `fs` on the socket of the virtiofsd container KubeVirt adds to the
  pod (`<share-dir>/virtiofs-containers/<name>.sock`, `pkg/virtiofs/virtiofs.go@d923fdb815cd`),
  tag = name (at most 36 characters, what a virtio-fs tag holds), one queue of 1024 as upstream;
  needs shared memory; a bounded wait for the socket.
- `hostDevices`, `gpus` -> VFIO devices (`devices`, by sysfs path) from the device plugins'
  `PCI_RESOURCE_*` (or `MDEV_PCI_RESOURCE_*`) variables (`vfio`), each checked before boot
  (`RequireVfioDevice`); the VMM must be able to lock guest memory (`convert/runtime.py`). USB
  host devices are unsupported (no USB). At admission there is no pod: a resource the KubeVirt CR
  permits as USB only (`PermittedHostDevices`) is refused at its `deviceName`; one it permits as
  PCI or mediated only passes; any other `hostDevices` entry gets a warning that a USB one fails
  the start. `DeviceConfig.iommu` stays off: the host's IOMMU
  isolates the device (CH maps guest RAM for it, docs/process-model.md); `iommu: true` would put
  it behind a virtio-iommu the guest programs, which KubeVirt at d923fdb815cd has no VMI field
  for (no `devices.iommu`; virt-launcher gives QEMU none for host devices either). Devices are passed at
  boot only (`HotplugHostDevices` is refused, so `vm.add-device` is never used).
- `watchdog.i6300esb` -> CH's virtio-watchdog (it resets the guest), degraded: the guest needs a
  virtio watchdog driver; `diag288` (s390x) is unsupported.
- `panicDevices`: `pvpanic` -> CH's PCI pvpanic; `isa` -> the same, degraded; `hyperv` unsupported.
- no display, input, sound or USB in CH: `autoattachGraphicsDevice` (nil means true), `video`,
  `inputs`, `autoattachInputDevice`, `sound` are dropped with a warning (the serial console
  stays); `clientPassthrough` (USB redirection) and `downwardMetrics` (a virtio-serial port) are
  unsupported (`tpm`: see `tpm`);
  `useVirtioTransitional` is unsupported (CH has modern virtio-pci only).
"""

from __future__ import annotations

from ch_launcher.ch.vmconfig import FsConfig, RngConfig, VsockConfig
from ch_launcher.convert.context import Translation
from ch_launcher.convert.plan import RequireVfioDevice, WaitForSocket
from ch_launcher.convert.vfio import DevicePluginPools, VfioError, domain_host_device
from ch_launcher.kubevirt.vmi import DNS1123_LABEL_RULE, is_dns1123_label

VIRTIOFS_DIR = "virtiofs-containers"  # virtiofs.VirtioFSContainers, under the share dir
VIRTIOFS_QUEUE_SIZE = 1024  # converter/storage/virtiofs.go: Queue "1024"
# The virtio-fs tag field; Cloud Hypervisor cuts a longer tag short without a word
# (VIRTIO_FS_TAG_LEN, virtio-devices/src/vhost_user/fs.rs@v53.0), and QEMU refuses one.
VIRTIOFS_TAG_MAX = 36
VSOCK_SOCKET = "vsock"  # the hybrid-vsock unix socket, in the VMI directory
MIN_VSOCK_CID = 3  # CH refuses 0, 1, 2
GPU_ALIAS_PREFIX = "gpu-"  # hostdevice/gpu/hostdev.go
HOSTDEVICE_ALIAS_PREFIX = "hostdevice-"  # hostdevice/generic/hostdev.go
DEVICES = "spec.domain.devices"


def configure_devices(t: Translation) -> None:
    """Each device concern on its own; every problem is reported with its field path."""
    devices = t.vmi.spec.domain.devices
    if devices.rng is not None:
        t.config.rng = RngConfig(src="/dev/urandom")
    _vsock(t)
    _filesystems(t)
    _host_devices(t)
    _watchdog(t)
    _panic_devices(t)
    _display_and_peripherals(t)
    if devices.clientPassthrough is not None:
        t.unsupported(f"{DEVICES}.clientPassthrough", f"{DEVICES}.clientPassthrough is not supported: "
                      f"Cloud Hypervisor has no USB controller for redirection")
    if devices.downwardMetrics is not None:
        t.unsupported(f"{DEVICES}.downwardMetrics", f"{DEVICES}.downwardMetrics is not supported: it "
                      f"needs a virtio-serial port, which Cloud Hypervisor does not have")
    if devices.useVirtioTransitional:
        t.unsupported(f"{DEVICES}.useVirtioTransitional", f"{DEVICES}.useVirtioTransitional is not "
                      f"supported: Cloud Hypervisor offers modern (virtio 1.0) devices only")


def _vsock(t: Translation) -> None:
    if not t.vmi.spec.domain.devices.autoattachVSOCK:
        return
    path = f"{DEVICES}.autoattachVSOCK"
    t.warn(path, f"{path}: guest vsock works, but its host end is a unix socket in the pod, not AF_VSOCK")
    cid = t.vmi.status.VSOCKCID
    if cid is None:
        return  # assigned by virt-controller after admission; upstream attaches nothing without it
    if cid < MIN_VSOCK_CID or cid >= 2**32 - 1:
        t.unsupported("status.VSOCKCID", f"status.VSOCKCID {cid} is not a guest CID Cloud Hypervisor "
                      f"accepts (3 to 4294967294)", "FieldValueInvalid")
        return
    t.config.vsock = VsockConfig(cid=cid, socket=f"{t.vmi_dir}/{VSOCK_SOCKET}")


def _filesystems(t: Translation) -> None:
    volumes = {v.name for v in t.vmi.spec.volumes}
    used_ids = t.device_ids()
    for i, fs in enumerate(t.vmi.spec.domain.devices.filesystems):
        path = f"{DEVICES}.filesystems[{i}]"
        if fs.virtiofs is None:
            t.unsupported(path, f"{path}: only virtiofs filesystems are supported", "FieldValueRequired")
            continue
        if fs.name not in volumes:
            t.unsupported(f"{path}.name", f"{path}.name '{fs.name}' not found in spec.volumes",
                          "FieldValueNotFound")
            continue
        if not is_dns1123_label(fs.name):  # it names the virtiofsd socket file
            t.unsupported(f"{path}.name", f"{path}.name '{fs.name}' must be {DNS1123_LABEL_RULE}",
                          "FieldValueInvalid")
            continue
        if len(fs.name) > VIRTIOFS_TAG_MAX:
            t.unsupported(f"{path}.name", f"{path}.name '{fs.name}' is the guest's mount tag, which holds at most "
                          f"{VIRTIOFS_TAG_MAX} characters", "FieldValueInvalid")
            continue
        if fs.name in used_ids:
            t.unsupported(f"{path}.name", f"{path}.name '{fs.name}' is also the name of another device; "
                          f"Cloud Hypervisor needs unique device ids", "FieldValueInvalid")
            continue
        used_ids.add(fs.name)
        socket = f"{t.env.share_dir}/{VIRTIOFS_DIR}/{fs.name}.sock"
        t.config.fs = [*(t.config.fs or []), FsConfig(tag=fs.name, socket=socket, num_queues=1,
                                                      queue_size=VIRTIOFS_QUEUE_SIZE, id=fs.name)]
        t.need_shared_memory(f"{path}: virtiofs filesystem '{fs.name}'")
        t.steps.append(WaitForSocket(field=path, path=socket,
                                     what=f"virtiofsd socket of filesystem '{fs.name}' (container virtiofs-{fs.name})"))


def _host_devices(t: Translation) -> None:
    devices = t.vmi.spec.domain.devices
    entries = [(f"{DEVICES}.gpus[{i}]", g.name, g.deviceName, GPU_ALIAS_PREFIX, g.claimName)
               for i, g in enumerate(devices.gpus)]
    entries += [(f"{DEVICES}.hostDevices[{i}]", h.name, h.deviceName, HOSTDEVICE_ALIAS_PREFIX, h.claimName)
                for i, h in enumerate(devices.hostDevices)]
    for i, gpu in enumerate(devices.gpus):
        display = (gpu.virtualGPUOptions or {}).get("display") or {}
        if isinstance(display, dict) and display.get("enabled") is not False and display:
            path = f"{DEVICES}.gpus[{i}].virtualGPUOptions.display"
            t.warn(path, f"{path} is ignored: Cloud Hypervisor has no display")
    pod = t.env.pod
    pools = DevicePluginPools(pod.environ, [e[2] for e in entries if e[2]]) if pod is not None and entries else None
    for path, name, resource, prefix, claim in entries:
        if claim:
            t.unsupported(f"{path}.claimName", f"{path}.claimName: devices from DRA resource claims are "
                          f"not supported")
            continue
        if not resource:
            t.unsupported(f"{path}.deviceName", f"{path}.deviceName is required", "FieldValueRequired")
            continue
        if pools is None:  # admission: the device plugin allocates with the pod
            _kind_before_the_pod(t, path, resource, host_device=prefix == HOSTDEVICE_ALIAS_PREFIX)
            continue
        try:
            device = pools.device_for(resource, prefix + name)
        except VfioError as e:
            t.unsupported(f"{path}.deviceName", f"{path}.deviceName: {e}", "FieldValueNotFound")
            continue
        t.config.devices = [*(t.config.devices or []), device]
        t.host_devices.append(domain_host_device(device))
        kind = "GPU" if prefix == GPU_ALIAS_PREFIX else "host device"
        t.steps.append(RequireVfioDevice(field=path, sysfs_path=device.path, what=f"{kind} {name} ({resource})",
                                         root=pod.host_root if pod is not None else ""))


def _kind_before_the_pod(t: Translation, path: str, resource: str, host_device: bool) -> None:
    """A resource the KubeVirt CR permits as USB only is refused, as the launcher would refuse it
    at the start; a `hostDevices` entry the CR does not permit as PCI or mediated only is warned
    about (GPUs are PCI or mediated devices in KubeVirt)."""
    permitted = t.env.permitted_host_devices
    if permitted.is_usb(resource):
        t.unsupported(f"{path}.deviceName", f"{path}.deviceName '{resource}' is not supported: it is a USB device "
                      f"(permittedHostDevices.usb of the KubeVirt CR) and Cloud Hypervisor has no USB controller")
    elif host_device and not permitted.is_vfio(resource):
        t.warn(path, f"{resource} must be a PCI or mediated device: a USB one fails the start (Cloud "
               "Hypervisor has no USB)")


def _watchdog(t: Translation) -> None:
    watchdog = t.vmi.spec.domain.devices.watchdog
    if watchdog is None:
        return
    path = f"{DEVICES}.watchdog"
    if watchdog.diag288 is not None:
        t.unsupported(f"{path}.diag288", f"{path}.diag288 is not supported: it is an s390x watchdog")
        return
    if watchdog.i6300esb is None:
        t.unsupported(path, f"{path}: a watchdog model (i6300esb) is required", "FieldValueRequired")
        return
    t.config.watchdog = True
    t.warn(path, f"{path}: i6300esb becomes virtio-watchdog, which needs a guest driver and resets the guest")
    action = (watchdog.i6300esb or {}).get("action") or "reset"
    if action != "reset":
        t.warn(f"{path}.i6300esb.action", f"{path}.i6300esb.action '{action}' is not honoured: the guest is reset")


def _panic_devices(t: Translation) -> None:
    for i, panic in enumerate(t.vmi.spec.domain.devices.panicDevices):
        path = f"{DEVICES}.panicDevices[{i}].model"
        model = panic.model or "isa"
        if model == "pvpanic":
            t.config.pvpanic = True
        elif model == "isa":
            t.config.pvpanic = True
            t.warn(path, f"{path}: the ISA panic device is offered as a PCI pvpanic device")
        else:
            t.unsupported(path, f"{path} '{model}' is not supported: Cloud Hypervisor offers pvpanic only")


def _display_and_peripherals(t: Translation) -> None:
    devices = t.vmi.spec.domain.devices
    if devices.autoattachGraphicsDevice is not False:  # nil means true in KubeVirt
        path = f"{DEVICES}.autoattachGraphicsDevice"
        t.warn(path, f"{path}: no display (VNC) on Cloud Hypervisor; use the serial console")
    if devices.video is not None:
        t.warn(f"{DEVICES}.video", f"{DEVICES}.video is ignored: Cloud Hypervisor has no video device")
    if devices.inputs:
        t.warn(f"{DEVICES}.inputs", f"{DEVICES}.inputs are ignored: Cloud Hypervisor has no input devices")
    if devices.autoattachInputDevice:
        path = f"{DEVICES}.autoattachInputDevice"
        t.warn(path, f"{path} is ignored: Cloud Hypervisor has no input devices")
    if devices.sound is not None:
        t.warn(f"{DEVICES}.sound", f"{DEVICES}.sound is ignored: Cloud Hypervisor has no sound device")
