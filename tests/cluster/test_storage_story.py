"""PersistentVolumeClaims on the real node, as a user without a storage provisioner has them
(static volumes: tests/cluster/storage.py): a VM with a Filesystem and a Block claim runs, what
its guest writes on them survives `virtctl restart`, and `virtctl addvolume`/`removevolume` hot-plug
claims into the running VM through KubeVirt's attachment pods and virt-handler's mounts. Asserted
through kubectl and virtctl, what the guest reads back on its console, what the VMM holds
(`vm.info`) and what is on the volumes as the administrator finds it (`disk.img` in the volume's
directory, the loop device).

The stories run in file order on one VM (`storage`, a containerDisk, cloud-init and the two
claims). The hotplug goes through the VM (`virtctl addvolume VM`: KubeVirt's declarative hotplug,
DeclarativeHotplugVolumes, Beta and on by default at this KubeVirt): virt-api patches the VM's
template, virt-controller the VMI. (A standalone VMI's hotplug, which virt-api patches itself, is
refused here with "update of VMI object is restricted": ../shared/k8s/virt-api.sh runs virt-api
as the cluster's admin, not as KubeVirt's ServiceAccount, whose patches alone KubeVirt's VMI
update admitter lets change a spec.)
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from tests.cluster.disks import by_name, disk_command, vmm_info
from tests.cluster.node import NodeCluster
from tests.cluster.objects import annotated_vm
from tests.cluster.storage import Claim, StaticVolumes
from tests.guest.console import DISK_MARK, PCI_ADDED, PCI_EJECT

NAME = "storage"
CLAIMS: dict[str, Claim] = {}  # the VM's claims, by volume name
MARKED = ("MARKED", "WRITTEN")


def storage_vm(fs: Claim, block: Claim) -> dict[str, Any]:
    """`annotated_vm(NAME)` with two more virtio disks on the claims."""
    vm = annotated_vm(NAME)
    spec = vm["spec"]["template"]["spec"]
    for claim in (fs, block):
        spec["domain"]["devices"]["disks"].append({"name": claim.name, "disk": {"bus": "virtio"}})
        spec["volumes"].append({"name": claim.name, "persistentVolumeClaim": {"claimName": claim.name}})
    return vm


def first_bytes(claim: Claim, count: int) -> bytes:
    """The start of the volume as the administrator reads it: `disk.img` in the directory, the
    loop device itself (the VMM's writes sit in its page cache until written back to the file)."""
    with open(claim.image if claim.volume_mode == "Filesystem" else claim.device, "rb") as f:
        return f.read(count)


@pytest.fixture(scope="module")
def volumes(node_cluster: NodeCluster) -> Iterator[StaticVolumes]:
    volumes = StaticVolumes(node_cluster, node_cluster.workdir / "volumes")
    try:
        yield volumes
    finally:
        volumes.close()


@pytest.fixture(scope="module")
def storage(node_cluster: NodeCluster, volumes: StaticVolumes) -> Iterator[dict[str, Any]]:
    """The VM, Running and Ready; its VMI as first seen. Deleted afterwards, its pods gone before
    the volumes go."""
    fs, block = volumes.filesystem("pvc-fs"), volumes.block("pvc-block")
    CLAIMS.update({fs.name: fs, block.name: block})
    r = node_cluster.kubectl("create", "-f", "-", input=node_cluster.yaml(storage_vm(fs, block)))
    assert (r.rc, r.lines) == (0, [f"virtualmachine.kubevirt.io/{NAME} created"]), r.out
    try:
        yield node_cluster.wait_for_vmi(NAME, ready=True)
    finally:
        node_cluster.kubectl("delete", "vm", NAME, "--ignore-not-found", "--wait=false")
        node_cluster.wait_for(lambda: not node_cluster.json("get", "pods", "-l", f"vmi.kubevirt.io/id={NAME}")[
            "items"] and not node_cluster.json("get", "pods", "-l", "kubevirt.io=hotplug-disk")["items"],
                              "the VM's pods to go", timeout=120, every=1)


def test_a_vm_with_a_filesystem_and_a_block_claim_runs_with_both_in_its_volume_status(
        node_cluster: NodeCluster, storage: dict[str, Any]) -> None:
    def statuses() -> dict[str, dict[str, Any]] | None:  # each with its target: virt-handler's, maybe after Ready
        found = {v["name"]: v for v in node_cluster.json("get", "vmi", NAME)["status"].get("volumeStatus", [])}
        return found if len(found) == 4 and all(v.get("target") for v in found.values()) else None
    volumes: dict[str, dict[str, Any]] = node_cluster.wait_for(statuses, "the VMI's volume status", timeout=60)
    assert sorted(volumes) == ["cloudinitdisk", "containerdisk", "pvc-block", "pvc-fs"], volumes
    for name, mode in (("pvc-fs", "Filesystem"), ("pvc-block", "Block")):
        info = volumes[name]["persistentVolumeClaimInfo"]
        assert (info["claimName"], info["volumeMode"], info["capacity"]["storage"]) == (name, mode, "64Mi"), info
        assert volumes[name]["target"].startswith("vd"), volumes[name]
    # what the VMM opened: KubeVirt's paths in the pod (the claim's disk.img, the block device node)
    disks = {d["id"]: d for d in vmm_info(node_cluster, node_cluster.launcher_pod(storage))["config"]["disks"]}
    assert disks["pvc-fs"]["path"] == "/var/run/kubevirt-private/vmi-disks/pvc-fs/disk.img"
    assert disks["pvc-block"]["path"] == "/dev/pvc-block"
    assert not disks["pvc-fs"].get("readonly") and not disks["pvc-block"].get("readonly")
    # the launcher made disk.img in the volume's directory, of the claim's size (KubeVirt's rule:
    # the request, when the capacity is not smaller), owned by the pod's user
    image = CLAIMS["pvc-fs"].image
    assert (image.stat().st_uid, image.stat().st_size) == (107, 64 << 20), image.stat()


def test_what_the_guest_writes_on_its_claims_survives_virtctl_restart(node_cluster: NodeCluster,
                                                                      storage: dict[str, Any]) -> None:
    vmi = node_cluster.wait_for_vmi(NAME, ready=True)
    info = vmm_info(node_cluster, node_cluster.launcher_pod(vmi))
    with node_cluster.console(NAME) as console:
        console.type(b"~h")
        console.wait_for("KCH-GUEST-HELLO")
        assert by_name(disk_command(console, "disk-write"), info) == {
            "containerdisk": "WRITTEN", "cloudinitdisk": "READ-ONLY", "pvc-fs": "WRITTEN", "pvc-block": "WRITTEN"}
    for claim in CLAIMS.values():
        assert first_bytes(claim, len(DISK_MARK)) == DISK_MARK, claim
    r = node_cluster.virtctl("restart", NAME)
    assert (r.rc, r.lines) == (0, [f"VM {NAME} was scheduled to restart"]), r.out

    def restarted() -> dict[str, Any] | None:
        found = node_cluster.json("get", "vmi", NAME)
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in found["status"].get("conditions", []))
        return found if found["metadata"]["uid"] != vmi["metadata"]["uid"] and ready else None
    again = node_cluster.wait_for(restarted, "a new VMI to be Ready", timeout=120, every=1)
    info = vmm_info(node_cluster, node_cluster.launcher_pod(again))
    with node_cluster.console(NAME) as console:
        console.type(b"~h")
        console.wait_for("KCH-GUEST-HELLO")
        # the claims kept the mark; the containerDisk's overlay is new with each pod
        assert by_name(disk_command(console, "disk-read"), info) == {
            "containerdisk": "UNMARKED", "cloudinitdisk": "UNMARKED", "pvc-fs": "MARKED", "pvc-block": "MARKED"}


def hotplug_ready(cluster: NodeCluster, name: str) -> dict[str, Any] | None:
    """The VMI's status entry of hotplugged volume `name` once virt-handler marked it Ready."""
    vmi = cluster.json("get", "vmi", NAME)
    entry = next((v for v in vmi["status"].get("volumeStatus", []) if v["name"] == name), None)
    return entry if entry is not None and entry.get("phase") == "Ready" else None


def test_virtctl_addvolume_hot_plugs_claims_into_the_running_vm_and_removevolume_takes_them_out(
        node_cluster: NodeCluster, volumes: StaticVolumes, storage: dict[str, Any]) -> None:
    hot = {"hp-fs": volumes.filesystem("hp-fs", disk_image=32 << 20), "hp-block": volumes.block("hp-block")}
    vmi = node_cluster.wait_for_vmi(NAME, ready=True)
    pod = node_cluster.launcher_pod(vmi)
    with node_cluster.console(NAME) as console:
        console.type(b"~h")
        console.wait_for("KCH-GUEST-HELLO")
        for count, (name, claim) in enumerate(hot.items(), start=1):
            r = node_cluster.virtctl("addvolume", NAME, f"--volume-name={name}")
            assert (r.rc, r.lines) == (0, [(f"Successfully submitted add volume request to VM {NAME} for volume "
                                           f"{name}")]), r.out
            status: dict[str, Any] = node_cluster.wait_for(partial(hotplug_ready, node_cluster, name),
                                                           f"{name} to be Ready", timeout=120, every=1)
            assert status["target"].startswith("vd") and status["reason"] == "VolumeReady", status
            # KubeVirt's attachment pod holds the claim on the node, beside the launcher pod
            attachment = node_cluster.json("get", "pod", status["hotplugVolume"]["attachPodName"])
            assert attachment["spec"]["nodeName"] == "node01" and attachment["status"]["phase"] == "Running"
            assert attachment["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
            assert name in {v.get("persistentVolumeClaim", {}).get("claimName") for v in attachment["spec"]["volumes"]}
            # the VMM has the disk (virt-handler's mount in the pod's hotplug directory), the guest sees it
            info = vmm_info(node_cluster, pod)
            disk = next(d for d in info["config"]["disks"] if d["id"] == name)
            suffix = ".img" if claim.volume_mode == "Filesystem" else ""
            assert disk["path"] == f"/var/run/kubevirt/hotplug-disks/{name}{suffix}", disk
            console.wait_for(PCI_ADDED.decode(), count=count)
            assert by_name(disk_command(console, "disk-write"), info)[name] == "WRITTEN"
            assert first_bytes(claim, len(DISK_MARK)) == DISK_MARK
        for count, name in enumerate(hot, start=1):
            r = node_cluster.virtctl("removevolume", NAME, f"--volume-name={name}")
            assert (r.rc, r.lines) == (0, [(f"Successfully submitted remove volume request to VM {NAME} for volume "
                                           f"{name}")]), r.out
            console.wait_for(PCI_EJECT.decode(), count=count)  # the guest ejected it, as Linux does

            def gone(name: str = name) -> bool:
                statuses = node_cluster.json("get", "vmi", NAME)["status"].get("volumeStatus", [])
                disks = vmm_info(node_cluster, pod)["config"].get("disks") or []
                return name not in {v["name"] for v in statuses} and name not in {d["id"] for d in disks}
            node_cluster.wait_for(gone, f"{name} to leave the VMI and the VMM", timeout=120, every=1)
    node_cluster.wait_for(lambda: not node_cluster.json("get", "pods", "-l", "kubevirt.io=hotplug-disk")["items"],
                          "the attachment pods to go", timeout=120, every=1)
    template = node_cluster.json("get", "vm", NAME)["spec"]["template"]["spec"]
    assert not set(hot) & {v["name"] for v in template["volumes"]}
    # the VM runs on, in the same pod, with what it had
    after = node_cluster.wait_for_vmi(NAME, ready=True)
    assert node_cluster.launcher_pod(after)["metadata"]["uid"] == pod["metadata"]["uid"]
    assert os.path.exists(hot["hp-fs"].image)


def test_a_hotplug_cloud_hypervisor_cannot_take_is_refused_in_kubevirts_words(
        node_cluster: NodeCluster, volumes: StaticVolumes, storage: dict[str, Any]) -> None:
    """`--disk-type lun` (a SCSI LUN): the add-on's webhook refuses the VM's new template, and
    virtctl prints that as KubeVirt's subresource returns it. Nothing changes."""
    volumes.filesystem("lun-fs", disk_image=32 << 20)
    before = node_cluster.json("get", "vm", NAME)["spec"]["template"]["spec"]
    r = node_cluster.virtctl("addvolume", NAME, "--volume-name=lun-fs", "--disk-type=lun")
    index = len(before["domain"]["devices"]["disks"])
    assert (r.rc, r.lines) == (1, [
        ('error adding volume, admission webhook "virtualmachines.validator.kubevirt-ch.io" denied the request: '
        f"spec.template.spec.domain.devices.disks[{index}].lun is not supported by Cloud Hypervisor: it emulates "
        "no SCSI; attach the volume as a virtio disk instead")]), r.out
    assert node_cluster.json("get", "vm", NAME)["spec"]["template"]["spec"] == before
