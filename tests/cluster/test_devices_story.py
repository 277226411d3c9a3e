"""More of what a VMI may ask for, on the real node, where the pod sandbox tests
(tests/functional/test_pod_storage.py, test_tpm.py) stage it by hand: the volumes kubelet and
virt-handler give a launcher pod without a storage provisioner (containerDisk, cloud-init,
configMap, secret, serviceAccount, downwardAPI, emptyDisk), and a TPM. One VMI holds them all;
what the VMM holds is read on its API socket, as an administrator of the node could.

A `bridge` interface on the pod network is not among them: virt-handler gives the pod's address
to a dummy link it creates in the pod (its netpod phase 1), and this machine's kernel has no dummy
links (CONFIG_DUMMY unset: "Critical network error: LinkAdd: operation not supported"), so here
only the pod sandbox (tests/functional/test_pod_bindings.py) shows that binding."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.node import NodeCluster
from tests.cluster.objects import annotated_vmi
from tests.functional.pod_probes import vm_info

NAME = "devices"
ISO_VOLUMES: dict[str, dict[str, Any]] = {"configmap": {"configMap": {"name": "devices-config"}},
               "secret": {"secret": {"secretName": "devices-secret"}},
               "serviceaccount": {"serviceAccount": {"serviceAccountName": "default"}},
               "downwardapi": {"downwardAPI": {"fields": [{"path": "labels",
                                                           "fieldRef": {"fieldPath": "metadata.labels"}}]}}}


def devices_vmi() -> dict[str, Any]:
    vmi = annotated_vmi(NAME)
    spec = vmi["spec"]
    devices = spec["domain"]["devices"]
    devices["tpm"] = {}
    for name in (*ISO_VOLUMES, "scratch"):
        devices["disks"].append({"name": name, "disk": {"bus": "virtio"}})
    spec["volumes"] += [{"name": name, **source} for name, source in ISO_VOLUMES.items()]
    spec["volumes"].append({"name": "scratch", "emptyDisk": {"capacity": "16Mi"}})
    return vmi


@pytest.fixture(scope="module")
def running(node_cluster: NodeCluster) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    node_cluster.ok("create", "configmap", "devices-config", "--from-literal=greeting=hello")
    node_cluster.ok("create", "secret", "generic", "devices-secret", "--from-literal=password=ch")
    r = node_cluster.kubectl("create", "-f", "-", input=node_cluster.yaml(devices_vmi()))
    assert r.rc == 0, r.out
    try:
        vmi = node_cluster.wait_for_vmi(NAME, ready=True)
        yield vmi, node_cluster.launcher_pod(vmi)
    finally:
        node_cluster.kubectl("delete", "vmi", NAME, "--ignore-not-found", "--wait=false")
        node_cluster.kubectl("delete", "configmap", "devices-config", "--ignore-not-found")
        node_cluster.kubectl("delete", "secret", "devices-secret", "--ignore-not-found")


def vmm_info(node_cluster: NodeCluster, pod: dict[str, Any]) -> dict[str, Any]:
    """vm.info on the VMM's API socket (its `--api-socket path=`), reached through the VMM's own root."""
    vmm = node_cluster.process_in(pod, "compute", "cloud-hyperviso")
    argv = Path(f"/proc/{vmm}/cmdline").read_text().split("\0")
    (socket,) = [arg.split("path=", 1)[1].split(",")[0] for prev, arg in itertools.pairwise(argv)
                 if prev == "--api-socket"]
    return vm_info(node_cluster.path_in(vmm, socket))


def test_every_volume_the_node_gives_is_a_disk_of_the_vm(node_cluster: NodeCluster,
                                                         running: tuple[dict[str, Any], dict[str, Any]]):
    _vmi, pod = running
    disks = vmm_info(node_cluster, pod)["config"]["disks"]
    by_id = {d["id"]: d for d in disks}
    expected = ["containerdisk", "cloudinitdisk", *ISO_VOLUMES, "scratch"]
    assert sorted(by_id) == sorted(expected), disks
    for name in ("cloudinitdisk", *ISO_VOLUMES):
        assert by_id[name]["readonly"] and by_id[name]["path"].endswith(".iso"), by_id[name]
    assert not by_id["scratch"].get("readonly"), by_id["scratch"]
    # virt-handler's volume status names each volume's target in the guest, from the launcher's
    # Domain (in an update of its own, maybe after Ready)
    def targets() -> dict[str, str | None]:
        return {v["name"]: v.get("target") for v in node_cluster.json("get", "vmi", NAME)["status"]["volumeStatus"]}
    node_cluster.wait_for(lambda: sorted(targets()) == sorted(expected) and all(targets().values()),
                          "every volume's target in the VMI's status", timeout=60)
    assert all(t and t.startswith("vd") for t in targets().values()), targets()


def test_a_tpm_is_the_launchers_swtpm_behind_the_vmms_crb_tpm(node_cluster: NodeCluster,
                                                              running: tuple[dict[str, Any], dict[str, Any]]):
    _vmi, pod = running
    swtpm = node_cluster.process_in(pod, "compute", "swtpm")
    assert Path(f"/proc/{swtpm}/status").read_text().count("\t107\t") >= 1  # uid 107, as the VMM
    tpm = vmm_info(node_cluster, pod)["config"]["tpm"]
    assert tpm["socket"].endswith(".sock"), tpm
