"""The launcher-side preparation of a VMI with a containerDisk, a PVC, an emptyDisk and cloud-init
NoCloud, in a temporary pod layout: translate as the launcher does, run the steps, and look at the
files the VMM will open with the tools that judge them (qemu-img, qemu-io, pycdlib)."""

from __future__ import annotations

import io
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from typing import Any

import pycdlib
import pytest

from ch_launcher.convert import LauncherEnv, PodFacts, translate
from ch_launcher.prepare import PreparationError, execute
from tests.builders import (
    new_vmi,
    with_cloud_init,
    with_container_disk,
    with_devices,
    with_empty_disk,
    with_firmware_uuid,
    with_memory,
    with_namespace,
    with_pvc,
    with_status,
    with_uid,
)

GiB = 2**30
USER_DATA = "#cloud-config\npassword: fedora\nchpasswd: { expire: False }\nwrite_files:\n- content: \"✓ ünïcödé\"\n"


def vmi() -> dict[str, Any]:
    return new_vmi(
        "vmi-storage", with_namespace("tenant"), with_uid("0f6c2b9a-1d1e-4c55-9a3e-5d6a0c7e1f10"),
        with_firmware_uuid("5d307ca9-b3ef-428c-8861-06e72d69f223"), with_memory("512Mi"),
        with_devices(autoattachPodInterface=False),
        with_container_disk("quay.io/containerdisks/fedora:41", bootOrder=1), with_pvc("pvcdisk", "data"),
        with_empty_disk("emptydisk", "3Gi"), with_cloud_init(USER_DATA),
        with_status(volumeStatus=[{"name": "pvcdisk", "persistentVolumeClaimInfo": {
            "volumeMode": "Filesystem", "capacity": {"storage": "2Gi"}, "requests": {"storage": "1Gi"}}}]),
    )


@pytest.fixture
def tools() -> dict[str, str]:
    found = {name: shutil.which(name) for name in ("qemu-img", "qemu-io")}
    missing = [n for n, p in found.items() if p is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} missing: `make test` installs qemu-utils when run as root")
    return {n: p for n, p in found.items() if p}


@pytest.fixture
def tmp_root() -> Iterator[pathlib.Path]:
    """A short root: the serial console socket lives under the private dir (107-byte limit)."""
    root = tempfile.mkdtemp(prefix="kc", dir="/tmp")
    yield pathlib.Path(root)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pod(tmp_root: pathlib.Path, tools: dict[str, str]) -> LauncherEnv:
    """A pod's layout as virt-controller, kubelet and the container-disk container leave it."""
    tmp_path = tmp_root
    env = LauncherEnv(private_dir=str(tmp_path / "kubevirt-private"), share_dir=str(tmp_path / "kubevirt"),
                      ephemeral_disk_dir=str(tmp_path / "kubevirt-ephemeral-disks"),
                      container_disk_dir=str(tmp_path / "kubevirt" / "container-disks"),
                      firmware_dir=str(tmp_path / "cloud-hypervisor"), pod=PodFacts(cpuset=(0, 1)))
    os.makedirs(env.firmware_dir)
    pathlib.Path(env.firmware_dir, "hypervisor-fw").write_bytes(b"\x7fELF firmware")
    # The container disk: a qcow2 image with a recognisable first sector.
    os.makedirs(env.container_disk_dir)
    raw = tmp_path / "image.raw"
    with open(raw, "wb") as f:
        f.write(b"CONTAINER-IMAGE-SECTOR-0".ljust(512, b"\0"))
        f.truncate(GiB)
    subprocess.run([tools["qemu-img"], "convert", "-q", "-f", "raw", "-O", "qcow2", str(raw),
                    f"{env.container_disk_dir}/disk_0.img"], check=True, timeout=60)
    raw.unlink()
    os.makedirs(f"{env.private_dir}/vmi-disks/pvcdisk")  # the PVC's mount point
    return env


def qemu_info(tools: dict[str, str], path: str) -> dict[str, Any]:
    out = subprocess.run([tools["qemu-img"], "info", "--output=json", path], check=True, capture_output=True,
                         text=True, timeout=30).stdout
    return json.loads(out)


def test_prepared_disks_are_what_the_vmm_is_told_to_open(pod: LauncherEnv, tools: dict[str, str]) -> None:
    plan = translate(vmi(), pod)
    execute(plan)
    disks = {d.id: d for d in plan.config.disks or []}
    assert list(disks) == ["containerdisk", "pvcdisk", "emptydisk", "cloudinitdisk"]

    # containerDisk: a qcow2 overlay whose backing file is the container image.
    overlay = disks["containerdisk"].path
    assert overlay == f"{pod.ephemeral_disk_dir}/disk-data/containerdisk/disk.qcow2"
    assert (disks["containerdisk"].image_type, disks["containerdisk"].backing_files) == ("Qcow2", True)
    info = qemu_info(tools, overlay)
    assert info["backing-filename"] == f"{pod.container_disk_dir}/disk_0.img"
    assert info["backing-filename-format"] == "qcow2" and info["virtual-size"] == GiB
    subprocess.run([tools["qemu-img"], "check", "-q", overlay], check=True, timeout=60)
    guest_view = subprocess.run([tools["qemu-io"], "-r", "-c", "read -v 0 32", overlay], check=True,
                                capture_output=True, text=True, timeout=30).stdout
    # "CONTAINER-IMAGE-", read through the overlay
    assert "43 4f 4e 54 41 49 4e 45 52 2d 49 4d 41 47 45 2d" in guest_view

    # PVC: disk.img created sparse at KubeVirt's size (the request, smaller than the capacity).
    image = pathlib.Path(disks["pvcdisk"].path or "")
    assert str(image) == f"{pod.private_dir}/vmi-disks/pvcdisk/disk.img"
    assert image.stat().st_size == GiB and image.stat().st_blocks == 0

    # emptyDisk: sparse at its capacity.
    empty = pathlib.Path(disks["emptydisk"].path or "")
    assert empty.stat().st_size == 3 * GiB and empty.stat().st_blocks == 0

    # cloud-init: an ISO labelled cidata whose user-data is the VMI's, byte for byte.
    iso = pycdlib.PyCdlib()
    iso.open(disks["cloudinitdisk"].path)
    try:
        assert iso.pvd.volume_identifier.decode().strip() == "cidata"
        out = io.BytesIO()
        iso.get_file_from_iso_fp(out, rr_path="/user-data")
        assert out.getvalue() == USER_DATA.encode()
        meta = io.BytesIO()
        iso.get_file_from_iso_fp(meta, rr_path="/meta-data")
        assert json.loads(meta.getvalue()) == {"instance-id": "5d307ca9-b3ef-428c-8861-06e72d69f223",
                                               "local-hostname": "vmi-storage"}
    finally:
        iso.close()
    assert disks["cloudinitdisk"].readonly is True


def test_a_launcher_restart_prepares_again_without_losing_guest_writes(pod: LauncherEnv, tools: dict[str, str]) -> None:
    plan = translate(vmi(), pod)
    execute(plan)
    disks = {d.id: d.path or "" for d in plan.config.disks or []}
    subprocess.run([tools["qemu-io"], "-c", "write -P 0x77 1M 64k", disks["containerdisk"]], check=True,
                   capture_output=True, timeout=30)
    with open(disks["pvcdisk"], "r+b") as f:
        f.write(b"filesystem on the PVC")
    execute(translate(vmi(), pod))  # same VMI, new launcher process
    out = subprocess.run([tools["qemu-io"], "-r", "-c", "read -P 0x77 1M 64k", disks["containerdisk"]], check=True,
                         capture_output=True, text=True, timeout=30).stdout
    assert "Pattern verification failed" not in out
    assert pathlib.Path(disks["pvcdisk"]).read_bytes()[:21] == b"filesystem on the PVC"


def test_an_image_virt_handler_already_made_for_the_pvc_is_used_as_it_is(pod: LauncherEnv) -> None:
    existing = pathlib.Path(pod.private_dir, "vmi-disks", "pvcdisk", "disk.img")
    existing.write_bytes(b"made by virt-handler")
    execute(translate(vmi(), pod))
    assert existing.read_bytes() == b"made by virt-handler"


def test_a_missing_container_image_stops_preparation_naming_the_volume(pod: LauncherEnv) -> None:
    os.unlink(f"{pod.container_disk_dir}/disk_0.img")
    with pytest.raises(PreparationError) as e:
        execute(translate(vmi(), pod))
    assert e.value.field == "spec.volumes[0].containerDisk"
    assert f"{pod.container_disk_dir}/disk_0.img" in e.value.message
