"""PVC expansion reaching the guest: which disks follow their claim's size, and to what size (pure).

KubeVirt (`ExpandDisks`, GA at d923fdb815cd, so virt-launcher no longer reads
`clusterConfig.ExpandDisksEnabled`) grows the disk of a PVC-backed volume when the claim grows:

- before the domain starts, a filesystem volume's `disk.img` smaller than the size the claim
  allows is grown (`expandDiskImagesOffline`, pkg/virt-launcher/virtwrap/manager.go);
- while it runs, every Sync compares each PVC-backed disk's size with the one it last saw and,
  when it changed, resizes the disk live (`expandDisksOnline`, disk_expansion.go: libvirt's
  BlockResize; here `vm.resize-disk`).

The size a filesystem volume allows (`possibleGuestSize`): the claim's size (the smaller of its
request and its capacity in `status.volumeStatus[].persistentVolumeClaimInfo`,
pkg/storage/types/pvc.go `GetDiskCapacity`), or what the volume can hold if less (the image's
allocated bytes plus the free space), less CDI's `filesystemOverhead` fraction, rounded down to
1 MiB. A block volume (no overlay) is as large as its device: the claim's size is only the
trigger, and the device's own size is what the guest is given.

Left out, as Cloud Hypervisor cannot resize them: disks behind a qcow2 overlay (`ephemeral`
volumes: "resize not supported with backing files", block/src/formats/qcow/mod.rs@v53.0).
"""

from __future__ import annotations

from dataclasses import dataclass

from ch_launcher.kubevirt.quantity import MiB, quantity_bytes
from ch_launcher.kubevirt.vmi import PVCInfo

# Volume kinds whose disk is the claim itself (a filesystem PVC also arrives as the hostDisk
# virt-handler replaced it with, hostdisk.ReplacePVCByHostDisk).
PVC_KINDS = ("persistentVolumeClaim", "dataVolume", "hostDisk")


@dataclass(frozen=True)
class DiskSizing:
    """What a PVC-backed disk's size follows. `capacity`: the claim's size (None when its
    request or capacity is unknown: then the disk is never resized, as upstream);
    `filesystem_overhead`: CDI's fraction as given ("0.055"), needed for filesystem volumes."""

    disk: str  # the disk name, Cloud Hypervisor's device id
    path: str  # the image file or the block device
    block: bool
    capacity: int | None
    filesystem_overhead: str | None


def claim_size(info: PVCInfo) -> int | None:
    """`GetDiskCapacity`: min(request, capacity) of the claim; None if either is missing or bad."""
    try:
        capacity = quantity_bytes(info.capacity["storage"]) if "storage" in info.capacity else None
        request = quantity_bytes(info.requests["storage"]) if "storage" in info.requests else None
    except ValueError:
        return None
    if capacity is None or request is None:
        return None
    return min(capacity, request)


def disk_sizing(disk: str, path: str, block: bool, info: PVCInfo) -> DiskSizing:
    return DiskSizing(disk=disk, path=path, block=block, capacity=claim_size(info),
                      filesystem_overhead=info.filesystemOverhead)


def guest_size(sizing: DiskSizing, usable: int) -> int | None:
    """The size a filesystem volume's image may have (`possibleGuestSize`), `usable` being the
    image's allocated bytes plus the volume's free space; None when it cannot be said (no claim
    size, no or a bad overhead, or less than 1 MiB). Computed in binary floating point as
    upstream does, so both agree to the byte."""
    if sizing.capacity is None or sizing.filesystem_overhead is None:
        return None
    try:
        overhead = float(sizing.filesystem_overhead)
    except ValueError:
        return None
    if not 0 <= overhead <= 1:
        return None
    size = int((1 - overhead) * float(min(usable, sizing.capacity)))
    size -= size % MiB
    return size or None
