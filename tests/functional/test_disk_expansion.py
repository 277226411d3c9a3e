"""PVC expansion reaching the guest, in a launcher pod, on the simulated and on the real VMM.

The user grows a claim; once the storage has grown the volume, virt-controller puts the new size
in the VMI's `status.volumeStatus[].persistentVolumeClaimInfo` and virt-handler Syncs. The
launcher then resizes the disk live (`vm.resize-disk`): a filesystem volume's `disk.img` to what
the claim allows less CDI's overhead, a block volume to the size its device now has. A claim that
grew while the VM was stopped has its image grown before boot. (kubevirt
pkg/virt-launcher/virtwrap/disk_expansion.go and manager.go@d923fdb815cd; `convert.expansion`.)

First the VMM itself, given the same calls on both: what `vm.resize-disk` does to a raw image
and to a block device (cloud-hypervisor block/src/formats/raw/mod.rs@v53.0).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.builders import with_disk, with_pvc, with_status
from tests.framework import FAKE_CH
from tests.functional.harness import Harness, make_vmi
from tests.functional.pod_fixtures import PodVmm, real_binary, vm_config, vmm_info
from tests.functional.pod_sandbox import PodSandbox

pytestmark = [pytest.mark.root, pytest.mark.timeout(90)]

MiB = 1 << 20
RESIZE_FAILED = ["Error from API", "The disk could not be resized", "Error from device manager", "Disk resize error"]


def image(pod: PodSandbox, name: str, size: int) -> Path:
    path = pod.root / name
    with open(path, "wb") as f:
        f.truncate(size)
    pod.own(path)
    return path


def grow_block_device(loop: str, backing: Path, size: int) -> None:
    """What the storage does when a block claim grows: the device gets larger."""
    with open(backing, "r+b") as f:
        f.truncate(size)
    subprocess.run(["losetup", "--set-capacity", loop], check=True)


def boot_with(vmm, *disks: dict) -> None:
    assert vmm.call("PUT", "vm.create", vm_config(disks=list(disks)))[0] == 204
    assert vmm.call("PUT", "vm.boot") == (204, None)


def resize(vmm, disk: str, size: int):
    return vmm.call("PUT", "vm.resize-disk", {"id": disk, "desired_size": size})


def test_resize_disk_sets_a_raw_image_to_the_size_asked(pod, vmm):
    path = image(pod, "raw.img", MiB)
    boot_with(vmm, {"id": "data", "path": str(path), "image_type": "Raw"})

    assert resize(vmm, "data", 4 * MiB) == (204, None)
    assert path.stat().st_size == 4 * MiB
    assert resize(vmm, "data", 4 * MiB + 100) == (500, [*RESIZE_FAILED, "Disk image size is not a multiple of 512"])
    assert resize(vmm, "data", 2 * MiB) == (204, None)  # it shrinks too: the launcher never asks that
    assert path.stat().st_size == 2 * MiB
    assert resize(vmm, "nope", 4 * MiB) == (500, ["Error from API", "The disk could not be resized",
                                                  "Error from device manager",
                                                  "Failed to find device corresponding to the given identifier: nope"])


def test_resize_disk_of_a_block_device_needs_the_device_to_have_grown_first(pod, vmm_kind):
    backing = pod.root / "block.img"
    with open(backing, "wb") as f:
        f.truncate(4 * MiB)
    loop = pod.block_device("blk", backing)  # in the /dev of the VMM started next
    vmm = PodVmm(pod, real_binary() if vmm_kind == "real" else str(FAKE_CH))  # type: ignore[arg-type]
    try:
        boot_with(vmm, {"id": "blk", "path": "/dev/blk", "image_type": "Raw"})

        assert resize(vmm, "blk", 8 * MiB) == (500, [
            *RESIZE_FAILED, "Disk resize failed", "I/O error", "Resize failed",
            f"Block device size {4 * MiB} does not match requested size {8 * MiB}"])
        grow_block_device(loop, backing, 8 * MiB)
        assert resize(vmm, "blk", 8 * MiB) == (204, None)
    finally:
        vmm.close()


# --- the launcher ------------------------------------------------------------------------------

OVERHEAD = "0.055"


def claim(size: str, mode: str = "Filesystem", overhead: str | None = OVERHEAD) -> dict:
    info = {"volumeMode": mode, "capacity": {"storage": size}, "requests": {"storage": size},
            "accessModes": ["ReadWriteOnce"]}
    if overhead is not None:
        info["filesystemOverhead"] = overhead
    return info


def claims_vmi() -> dict:
    """A filesystem claim as virt-handler hands it over (a hostDisk, hostdisk.ReplacePVCByHostDisk)
    and a block claim."""
    return make_vmi(
        with_disk("fsdata", {"hostDisk": {"path": "/var/run/kubevirt-private/vmi-disks/fsdata/disk.img",
                                          "type": "DiskOrCreate", "capacity": "32Mi", "shared": False}}),
        with_pvc("blkdata", "blk-claim"),
        with_status(volumeStatus=[{"name": "fsdata", "persistentVolumeClaimInfo": claim("64Mi")},
                                  {"name": "blkdata", "persistentVolumeClaimInfo": claim("4Mi", "Block", None)}]))


def grown_claim(vmi: dict, name: str, size: str) -> None:
    for status in vmi["status"]["volumeStatus"]:
        if status["name"] == name:
            info = status["persistentVolumeClaimInfo"]
            info["capacity"]["storage"] = info["requests"]["storage"] = size


def resizes_done(vh: Harness) -> int:
    """Disks the launcher resized: it says so once Cloud Hypervisor has answered (v53 logs no
    VmResizeDisk request of its own)."""
    return vh.log_text().count("expanded disk ")


def test_a_claim_grown_while_stopped_is_grown_before_boot_and_one_grown_while_running_reaches_the_guest(pod, launch):
    fs_image: Path | None = None
    block: dict = {}

    def provide(h: Harness) -> None:  # the claims' mounts: disk.img made when the claim had 32Mi
        nonlocal fs_image
        claim_dir = h.layout.private_dir / "vmi-disks" / "fsdata"
        claim_dir.mkdir(parents=True)
        fs_image = claim_dir / "disk.img"
        with open(fs_image, "wb") as f:
            f.truncate(32 * MiB)
        pod.own(h.layout.private_dir / "vmi-disks")
        block["backing"] = pod.root / "blk-claim.img"
        with open(block["backing"], "wb") as f:
            f.truncate(4 * MiB)
        block["loop"] = pod.block_device("blkdata", block["backing"])

    vh = launch(claims_vmi(), before_boot=provide)
    assert fs_image is not None
    # the claim has 64Mi: the image was grown to (1 - 0.055) * 64 MiB, rounded down to 60 MiB, before boot
    assert fs_image.stat().st_size == 60 * MiB
    assert vmm_info(vh)["state"] == "Running" and resizes_done(vh) == 0

    # the filesystem claim grows to 128Mi: the disk follows, live
    vmi = vh.vmi_copy()
    grown_claim(vmi, "fsdata", "128Mi")
    vh.run(vh.client.sync(vmi))
    assert fs_image.stat().st_size == 120 * MiB  # (1 - 0.055) * 128 MiB = 120.96 MiB
    assert resizes_done(vh) == 1

    # the block claim grows: its device is larger now, and so is the disk
    grow_block_device(block["loop"], block["backing"], 16 * MiB)
    grown_claim(vmi, "blkdata", "16Mi")
    vh.run(vh.client.sync(vmi))
    assert resizes_done(vh) == 2
    if vh.ch_binary == str(FAKE_CH):
        assert [r["body"] for r in vh.requests("vm.resize-disk")] == [
            {"id": "fsdata", "desired_size": 120 * MiB}, {"id": "blkdata", "desired_size": 16 * MiB}]

    vh.run(vh.client.sync(vmi))  # virt-handler's next loop: nothing more to do
    assert resizes_done(vh) == 2
    assert vmm_info(vh)["state"] == "Running"
    assert (vh.run(vh.client.get_domain()))["Status"]["Status"] == "Running"


def test_a_claim_without_filesystem_overhead_is_not_resized(pod, launch):
    vmi = claims_vmi()
    vmi["status"]["volumeStatus"][0]["persistentVolumeClaimInfo"] = claim("64Mi", overhead=None)

    def provide(h: Harness) -> None:
        claim_dir = h.layout.private_dir / "vmi-disks" / "fsdata"
        claim_dir.mkdir(parents=True)
        pod.own(h.layout.private_dir / "vmi-disks")
        backing = pod.root / "blk-claim.img"
        with open(backing, "wb") as f:
            f.truncate(4 * MiB)
        pod.block_device("blkdata", backing)

    vh = launch(vmi, before_boot=provide)
    fs_image = vh.layout.private_dir / "vmi-disks" / "fsdata" / "disk.img"
    assert fs_image.stat().st_size == 32 * MiB  # made at the hostDisk's capacity, never grown
    grown = vh.vmi_copy()
    grown_claim(grown, "fsdata", "128Mi")
    vh.run(vh.client.sync(grown))
    assert fs_image.stat().st_size == 32 * MiB and resizes_done(vh) == 0
    assert "skipping resize of disk fsdata: unable to determine guest size" in vh.log_text()
