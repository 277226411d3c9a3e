"""PVC expansion: which disks follow their claim's size, and the size a filesystem volume allows
(kubevirt pkg/virt-launcher/virtwrap/manager.go@d923fdb815cd `possibleGuestSize`)."""

from __future__ import annotations

from typing import Any

import pytest

from ch_launcher.convert.expansion import DiskSizing, claim_size, guest_size
from ch_launcher.convert.plan import ExpandImage
from ch_launcher.jsonmodel import decode
from ch_launcher.kubevirt.vmi import PVCInfo
from tests.unit.convert.vmibuild import pvc_status, run, virtio, vmi, with_status

MiB = 2**20
GiB = 2**30
DIRS = {"private_dir": "/p", "share_dir": "/var/run/kubevirt", "ephemeral_disk_dir": "/e", "container_disk_dir": "/c",
            "firmware_dir": "/fw", "hotplug_disk_dir": "/hp"}


def sizing_of(volumes: list[dict[str, Any]], *statuses: dict[str, Any]) -> tuple[dict[str, DiskSizing], list[Any]]:
    from tests.unit.convert.vmibuild import launcher_env

    body = with_status(vmi(disks=[virtio(v["name"]) for v in volumes], volumes=volumes), *statuses)
    verdict = run(body, launcher_env(**DIRS))
    assert verdict.plan is not None, verdict.problems
    return verdict.plan.disk_sizing, [s for s in verdict.plan.steps if isinstance(s, ExpandImage)]


def with_overhead(status: dict[str, Any], overhead: str) -> dict[str, Any]:
    status["persistentVolumeClaimInfo"]["filesystemOverhead"] = overhead
    return status


def test_a_filesystem_claim_its_hostdisk_and_a_block_claim_follow_their_claims_size():
    volumes = [{"name": "fs", "persistentVolumeClaim": {"claimName": "fs-claim"}},
               # a filesystem PVC as virt-handler hands it over (hostdisk.ReplacePVCByHostDisk)
               {"name": "hd", "hostDisk": {"path": "/var/run/kubevirt-private/vmi-disks/hd/disk.img",
                                           "type": "DiskOrCreate", "capacity": "1Gi"}},
               {"name": "blk", "persistentVolumeClaim": {"claimName": "blk-claim"}}]
    sizing, steps = sizing_of(volumes, with_overhead(pvc_status("fs", "2Gi", "1Gi"), "0.055"),
                              with_overhead(pvc_status("hd", "1Gi", "1Gi"), "0.055"),
                              pvc_status("blk", "8Gi", "8Gi", mode="Block"))
    assert sizing == {
        "fs": DiskSizing("fs", "/p/vmi-disks/fs/disk.img", False, GiB, "0.055"),  # min(request, capacity)
        "hd": DiskSizing("hd", "/p/vmi-disks/hd/disk.img", False, GiB, "0.055"),
        "blk": DiskSizing("blk", "/dev/blk", True, 8 * GiB, None),
    }
    # files are also grown before boot; a block device is as large as it is
    assert [(s.field, s.sizing.disk) for s in steps] == [("spec.volumes[0]", "fs"), ("spec.volumes[1]", "hd")]


def test_disks_that_are_not_their_claim_do_not_follow_it():
    volumes = [{"name": "eph", "ephemeral": {"persistentVolumeClaim": {"claimName": "c"}}},  # a qcow2 overlay
               {"name": "host", "hostDisk": {"path": "/data/host.img", "type": "DiskOrCreate", "capacity": "1Gi"}},
               {"name": "scratch", "emptyDisk": {"capacity": "1Gi"}}]
    sizing, steps = sizing_of(volumes, pvc_status("eph", "1Gi", "1Gi"))
    assert sizing == {} and steps == []


def test_a_hotplugged_claim_follows_its_size_live_only():
    volumes = [{"name": "hot", "persistentVolumeClaim": {"claimName": "c", "hotpluggable": True}}]
    status = {**pvc_status("hot", "1Gi", "1Gi"), "phase": "MountedToPod", "hotplugVolume": {"attachPodName": "hp"}}
    sizing, steps = sizing_of(volumes, status)
    assert sizing["hot"].path == "/hp/hot.img" and steps == []


@pytest.mark.parametrize(("capacity", "requested", "size"), [
    ("2Gi", "1Gi", GiB), ("1Gi", "2Gi", GiB), ("1Gi", None, None), (None, "1Gi", None), ("lots", "1Gi", None)])
def test_the_claims_size_is_the_smaller_of_request_and_capacity_and_needs_both(capacity, requested, size):
    info = decode(PVCInfo, pvc_status("x", capacity, requested)["persistentVolumeClaimInfo"])
    assert claim_size(info) == size


def test_the_size_a_filesystem_volume_allows_is_upstreams_to_the_byte():
    sizing = DiskSizing("d", "/p/d.img", False, 10 * GiB, "0.055")
    # (1 - 0.055) * 10 GiB = 10146860236.8 -> 10146860236 -> rounded down to 9676 MiB
    assert guest_size(sizing, usable=100 * GiB) == 9676 * MiB
    assert guest_size(sizing, usable=5 * GiB) == 4838 * MiB  # the volume holds less than the claim
    assert guest_size(DiskSizing("d", "/p/d.img", False, 10 * GiB, "0"), usable=100 * GiB) == 10 * GiB


@pytest.mark.parametrize("overhead", [None, "lots", "-0.1", "1.5"])
def test_without_a_valid_overhead_a_filesystem_volume_is_never_resized(overhead):
    assert guest_size(DiskSizing("d", "/p/d.img", False, GiB, overhead), usable=100 * GiB) is None


def test_less_than_a_mebibyte_is_no_size():
    assert guest_size(DiskSizing("d", "/p/d.img", False, MiB // 2, "0"), usable=GiB) is None
