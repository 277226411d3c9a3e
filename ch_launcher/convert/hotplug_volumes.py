"""Hotplugged volumes: which volumes are hotplugged, where virt-handler puts them, and when they
are ready to attach (pure; `storage` calls these).

KubeVirt (`@d923fdb815cd`) hot-plugs a PVC or DataVolume marked `hotpluggable: true` (what
`virtctl addvolume` adds) through an attachment pod: virt-controller adds a
`status.volumeStatus[]` entry with `hotplugVolume` set, virt-handler mounts the volume into the
launcher pod's `--hotplug-disk-dir` and moves the phase to `MountedToPod`, and virt-launcher
attaches the disk on its next Sync (`pkg/virt-launcher/virtwrap/converter/storage/configurator.go`:
a hotplug disk joins the domain only in phase `MountedToPod` or `Ready`). Once the Domain shows
the disk with a target, virt-handler marks the volume `Ready` (`pkg/virt-handler/vm.go`
`updateHotplugVolumeStatus`). Removal is the reverse: the volume leaves the spec, the launcher
detaches the disk, and once the Domain no longer shows it virt-handler unmounts it.

Paths (`pkg/storage/volumepath/volumepath.go`): a filesystem volume is the image file
`<hotplug-disk-dir>/<volume>.img`, a block volume the device node `<hotplug-disk-dir>/<volume>`.
virt-launcher tells them apart by `stat`ing the device node; the translator is pure, so it reads
the claim's `volumeMode` from `status.volumeStatus[].persistentVolumeClaimInfo` (virt-controller
fills it for hotplugged claims too).

Two defaults of `virtctl addvolume` do not fit Cloud Hypervisor and would make every plain
`virtctl addvolume` fail if refused, so they are degradations on hotplugged disks only: bus `scsi`
(virtctl's default; Cloud Hypervisor has virtio-blk only, the guest sees `/dev/vdX`) and a serial
longer than the 20 bytes a virtio-blk serial holds (virtctl uses the volume name, up to 63
characters; it is truncated, as QEMU truncates it for virtio-blk).
"""

from __future__ import annotations

from ch_launcher.kubevirt.vmi import HOTPLUG_READY_PHASES, Volume, VolumeStatus


def volume_status(statuses: list[VolumeStatus], name: str) -> VolumeStatus | None:
    for status in statuses:
        if status.name == name:
            return status
    return None


def is_hotplugged(volume: Volume, status: VolumeStatus | None) -> bool:
    """A volume added by hotplug: marked `hotpluggable`, or virt-controller reports it as one."""
    for kind in ("persistentVolumeClaim", "dataVolume"):
        source = getattr(volume, kind)
        if source is not None and source.hotpluggable:
            return True
    return status is not None and status.hotplugVolume is not None


def hotplug_ready(status: VolumeStatus | None) -> bool:
    """Whether virt-handler has mounted the volume into the pod (the disk may be attached)."""
    return status is not None and status.phase in HOTPLUG_READY_PHASES


def hotplug_path(hotplug_disk_dir: str, name: str, block: bool) -> str:
    """Where virt-handler puts the volume in the pod (volumepath.HotplugBlockDevice/Filesystem)."""
    base = hotplug_disk_dir.rstrip("/")
    return f"{base}/{name}" if block else f"{base}/{name}.img"
