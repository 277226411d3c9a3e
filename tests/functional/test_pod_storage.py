"""Every storage kind docs/features.md supports opens in a launcher pod, on the simulated and on the
real VMM: the launcher (uid 107) prepares what it must (overlays, sparse images, ISOs), the VMM
(uid 107, no capability) opens every disk, and vm.info shows each as translated.

The files virt-handler and kubelet provide are made as they make them: container disk images
owned by 107 and read-only (KubeVirt's containerDisk images carry `--chown=107:107`, mode 0440),
the filesystem PVC's directory (the claim's mount) and `disk.img` owned by 107, the block PVC a
loop device shown as `/dev/<volume>` owned by 107, configMap/secret/downwardAPI/serviceAccount
files in kubelet's atomic-writer layout (`..data` symlinks), root's with the pod's fsGroup 107.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.functional.harness import Harness, make_vmi
from tests.functional.pod_fixtures import vm_config, vmm_info
from tests.functional.vhost_user_peer import VHOST_USER_F_PROTOCOL_FEATURES, VIRTIO_F_VERSION_1, VhostUserPeer
from tests.guest.build import guest_payload

pytestmark = [pytest.mark.root, pytest.mark.timeout(90)]

MiB = 1 << 20


def kubelet_volume(directory: Path, files: dict[str, str], gid: int = 107) -> None:
    """kubelet's AtomicWriter layout: the files in a timestamped directory, `..data` pointing
    at it, and one symlink per key through `..data`; root's, group fsGroup, 0640/0750."""
    stamp = directory / "..2026_01_01_00_00_00.000000001"
    stamp.mkdir(parents=True)
    for name, text in files.items():
        (stamp / name).write_text(text)
        os.chown(stamp / name, 0, gid)
        os.chmod(stamp / name, 0o640)
        os.symlink(f"..data/{name}", directory / name)
    os.symlink(stamp.name, directory / "..data")
    for d in (directory, stamp):
        os.chown(d, 0, gid)
        os.chmod(d, 0o750)


def container_disk(path: Path, fmt: str) -> None:
    """A containerDisk image as virt-handler mounts it: 107's, read-only."""
    path.unlink(missing_ok=True)
    subprocess.run(["qemu-img", "create", "-q", "-f", fmt, str(path), "16M"], check=True)
    os.chown(path, 107, 107)
    os.chmod(path, 0o440)


def all_disks_vmi() -> dict:
    volumes = [
        {"name": "rawdisk", "containerDisk": {"image": "registry:5000/raw:devel"}},
        {"name": "qcowdisk", "containerDisk": {"image": "registry:5000/qcow2:devel"}},
        {"name": "pvcfs", "persistentVolumeClaim": {"claimName": "fs-claim"}},
        {"name": "pvcblock", "persistentVolumeClaim": {"claimName": "block-claim"}},
        {"name": "eph", "ephemeral": {"persistentVolumeClaim": {"claimName": "eph-claim"}}},
        {"name": "scratch", "emptyDisk": {"capacity": "32Mi"}},
        {"name": "hostdisk", "hostDisk": {"path": "/data/host.img", "type": "DiskOrCreate", "capacity": "16Mi"}},
        {"name": "cloudinitdisk", "cloudInitNoCloud": {"userData": "#cloud-config\n"}},
        {"name": "cm", "configMap": {"name": "app-config"}},
        {"name": "sec", "secret": {"secretName": "app-secret"}},
        {"name": "dapi", "downwardAPI": {"fields": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
        {"name": "sa", "serviceAccount": {"serviceAccountName": "default"}},
    ]
    vmi = make_vmi()
    vmi["spec"]["volumes"] = volumes
    vmi["spec"]["domain"]["devices"]["disks"] = [{"name": v["name"], "disk": {"bus": "virtio"}} for v in volumes]
    claim = {"capacity": {"storage": "64Mi"}, "requests": {"storage": "64Mi"}}
    vmi["status"]["volumeStatus"] = [
        {"name": "pvcfs", "persistentVolumeClaimInfo": {**claim, "volumeMode": "Filesystem"}},
        {"name": "pvcblock", "persistentVolumeClaimInfo": {**claim, "volumeMode": "Block"}},
        {"name": "eph", "persistentVolumeClaimInfo": {**claim, "volumeMode": "Filesystem"}},
    ]
    return vmi


def disks(harness: Harness) -> list[tuple]:
    return [(d["id"], d["path"], d.get("readonly", False), d.get("image_type"))
            for d in vmm_info(harness)["config"]["disks"]]


def test_every_volume_kind_opens_on_the_vmm_as_translated(pod, launch, vmm_kind):
    block_image = pod.root / "block-claim.img"
    with open(block_image, "wb") as f:
        f.truncate(16 * MiB)
    pod.block_device("pvcblock", block_image)

    def provide(h: Harness) -> None:  # what virt-handler and kubelet leave in the pod
        cdisks, private = h.layout.container_disk_dir, h.layout.private_dir
        container_disk(cdisks / "disk_0.img", "raw")
        container_disk(cdisks / "disk_1.img", "qcow2")
        for claim in ("pvcfs", "eph", "hostdisk"):  # the claims' mounts, writable by the pod
            (private / "vmi-disks" / claim).mkdir(parents=True)
        with open(private / "vmi-disks" / "eph" / "disk.img", "wb") as f:
            f.truncate(16 * MiB)
        pod.own(private / "vmi-disks")
        kubelet_volume(private / "config-map" / "cm", {"app.properties": "color=blue\n"})
        kubelet_volume(private / "secret" / "sec", {"password": "hunter2\n"})
        kubelet_volume(private / "downwardapi" / "dapi", {"labels": 'app="demo"\n'})
        kubelet_volume(h.root / "secrets" / "kubernetes.io" / "serviceaccount",
                       {"token": "eyJhbGciOi...", "ca.crt": "-----BEGIN CERTIFICATE-----\n", "namespace": "default"})

    vh = launch(all_disks_vmi(), before_boot=provide)

    private, ephemeral = vh.layout.private_dir, vh.layout.ephemeral_disk_dir
    assert disks(vh) == [
        ("rawdisk", f"{ephemeral}/disk-data/rawdisk/disk.qcow2", False, "Qcow2"),
        ("qcowdisk", f"{ephemeral}/disk-data/qcowdisk/disk.qcow2", False, "Qcow2"),
        ("pvcfs", f"{private}/vmi-disks/pvcfs/disk.img", False, "Raw"),
        ("pvcblock", "/dev/pvcblock", False, "Raw"),
        ("eph", f"{ephemeral}/disk-data/eph/disk.qcow2", False, "Qcow2"),
        ("scratch", f"{ephemeral}/empty-disks/scratch.img", False, "Raw"),
        ("hostdisk", f"{private}/vmi-disks/hostdisk/host.img", False, "Raw"),
        ("cloudinitdisk", f"{ephemeral}/cloud-init-data/default/testvmi/noCloud.iso", True, "Raw"),
        ("cm", f"{private}/config-map-disks/cm.iso", True, "Raw"),
        ("sec", f"{private}/secret-disks/sec.iso", True, "Raw"),
        ("dapi", f"{private}/downwardapi-disks/dapi.iso", True, "Raw"),
        ("sa", f"{private}/service-account-disk/service-account.iso", True, "Raw"),
    ]
    assert vmm_info(vh)["state"] == "Running"
    made = [Path(p) for _, p, _, _ in disks(vh) if not p.startswith("/dev/")]
    assert {p: p.stat().st_uid for p in made} == dict.fromkeys(made, 107)  # the launcher's files are the pod's


def test_kernel_boot_with_a_config_drive_boots_the_kernel_directly(pod, launch, vmm_kind):
    vmi = make_vmi()
    vmi["spec"]["domain"]["firmware"]["kernelBoot"] = {
        "kernelArgs": "console=ttyS0", "container": {"image": "registry:5000/kernel:devel",
                                                      "kernelPath": "/boot/vmlinux"}}
    vmi["spec"]["volumes"] = [{"name": "containerdisk", "containerDisk": {"image": "registry:5000/cirros:devel"}},
                              {"name": "cloudinitdisk", "cloudInitConfigDrive": {"userData": "#cloud-config\n"}}]
    vmi["spec"]["domain"]["devices"]["disks"] = [{"name": "containerdisk", "disk": {"bus": "virtio"}},
                                                 {"name": "cloudinitdisk", "disk": {"bus": "virtio"}}]

    def provide(h: Harness) -> None:  # the kernel-boot container's files (the tiny guest as the kernel)
        kernels = h.layout.container_disk_dir / "kernel-boot"
        kernels.mkdir()
        pod.own(kernels)
        shutil.copyfile(guest_payload(), kernels / "vmlinux")
        os.chmod(kernels / "vmlinux", 0o440)
        os.chown(kernels / "vmlinux", 107, 107)

    vh = launch(vmi, before_boot=provide)

    info = vmm_info(vh)
    payload = info["config"]["payload"]
    assert (payload.get("kernel"), payload.get("cmdline"), payload.get("firmware")) == (
        f"{vh.layout.container_disk_dir}/kernel-boot/vmlinux", "console=ttyS0", None)
    assert [d["id"] for d in info["config"]["disks"]] == ["containerdisk", "cloudinitdisk"]
    assert info["config"]["disks"][1]["path"].endswith("/cloud-init-data/default/testvmi/configdrive.iso")
    assert info["state"] == "Running"


# --- the same disks given to the bare VMM, simulated and real: how an unopenable image fails ---

def image_dir(pod) -> Path:
    d = pod.root / "img"
    d.mkdir(exist_ok=True)
    return d


def qemu_img(*args: str) -> None:
    subprocess.run(["qemu-img", "create", "-q", *args], check=True)


def boot_disk(vmm, **disk):
    status, body = vmm.call("PUT", "vm.create", vm_config(disks=[{"id": "d", **disk}]))
    assert status == 204, body
    return vmm.call("PUT", "vm.boot")


def open_failure(*chain: str):
    return 500, ["Error from API", "The VM could not boot", "Error from device manager", "Cannot open disk path",
                 *chain]


def test_a_writable_disk_the_pod_may_only_read_fails_to_open_and_a_read_only_one_boots(pod, vmm):
    image = image_dir(pod) / "ro.raw"
    qemu_img("-f", "raw", str(image), "16M")
    os.chmod(image, 0o444)

    assert boot_disk(vmm, path=str(image), image_type="Raw") == open_failure(
        f"I/O error (path={image} op=open)", "Permission denied (os error 13)")
    assert vmm.call("PUT", "vm.delete")[0] == 204
    assert boot_disk(vmm, path=str(image), image_type="Raw", readonly=True) == (204, None)


def test_a_backing_file_the_pod_cannot_read_fails_the_overlay(pod, vmm):
    base, overlay = image_dir(pod) / "base.raw", image_dir(pod) / "overlay.qcow2"
    qemu_img("-f", "raw", str(base), "16M")
    os.chmod(base, 0o600)  # root's
    qemu_img("-f", "qcow2", "-F", "raw", "-b", str(base), str(overlay))
    os.chown(overlay, 107, 107)

    assert boot_disk(vmm, path=str(overlay), image_type="Qcow2", backing_files=True) == open_failure(
        f"I/O error (path={overlay} op=open)", f"Backing file I/O error: {base}",
        "Permission denied (os error 13)")


def test_an_overlay_needs_backing_files_allowed(pod, vmm):
    base, overlay = image_dir(pod) / "base.raw", image_dir(pod) / "overlay.qcow2"
    qemu_img("-f", "raw", str(base), "16M")
    qemu_img("-f", "qcow2", "-F", "raw", "-b", str(base), str(overlay))
    pod.own(image_dir(pod))

    assert boot_disk(vmm, path=str(overlay), image_type="Qcow2") == open_failure(
        f"Unsupported feature (path={overlay} op=open)", "Maximum disk nesting depth exceeded")
    assert vmm.call("PUT", "vm.delete")[0] == 204
    assert boot_disk(vmm, path=str(overlay), image_type="Qcow2", backing_files=True) == (204, None)


def test_a_missing_image_names_the_path(pod, vmm):
    missing = image_dir(pod) / "nope.img"

    assert boot_disk(vmm, path=str(missing), image_type="Raw") == open_failure(
        f"I/O error (path={missing} op=open)", "No such file or directory (os error 2)")


def test_a_virtiofs_filesystem_boots_against_a_real_vhost_user_peer(pod, launch, vmm_kind):
    vmi = make_vmi()
    vmi["spec"]["domain"]["devices"]["filesystems"] = [{"name": "shared", "virtiofs": {}}]
    vmi["spec"]["volumes"].append({"name": "shared", "persistentVolumeClaim": {"claimName": "fs-claim"}})
    peers: list[VhostUserPeer] = []

    def provide(h: Harness) -> None:  # the virtiofs container's virtiofsd, listening for the VMM
        sockets = h.layout.share_dir / "virtiofs-containers"
        sockets.mkdir()
        pod.own(sockets)
        peers.append(VhostUserPeer(sockets / "shared.sock", queues=2, owner=pod.uid,
                                   features=VIRTIO_F_VERSION_1 | VHOST_USER_F_PROTOCOL_FEATURES))

    try:
        vh = launch(vmi, before_boot=provide)

        info = vmm_info(vh)
        fs = info["config"]["fs"]
        assert [(f["id"], f["tag"], f["socket"]) for f in fs] == [
            ("shared", "shared", f"{vh.layout.share_dir}/virtiofs-containers/shared.sock")]
        assert info["config"]["memory"]["shared"] is True and info["state"] == "Running"
        if vmm_kind == "real":
            assert peers[0].wait_for("GET_FEATURES")[:2] == ["SET_OWNER", "GET_FEATURES"]
    finally:
        for peer in peers:
            peer.close()
