"""Dedicated CPUs and hugepages on a real node whose kubelet offers them (node03,
tests/cluster/dedicated_node.py), as their user and the node's administrator check them: what
kubectl shows of the VMI, its pod and the node, kubelet's CPU manager checkpoint, where the
kernel lets each thread of the pod run (`/proc/<pid>/task/<tid>/status`), the VMM's own config
(`vm.info`), the machine's hugepage pool (`/proc/meminfo`) and the VMM's hugetlb memory
(`/proc/<pid>/smaps_rollup`).

`isolateEmulatorThread` cannot run here: the static CPU manager keeps at least one CPU in the
shared pool (the node's reserved CPU), so this 2-CPU machine has one CPU to give exclusively, and
such a VMI's pod asks for two (one per vCPU, one for the emulator thread): with the node's 1.9
allocatable CPUs it stays Pending (`Insufficient cpu`). Where its threads go is shown in the pod
sandbox (tests/functional/test_dedicated_cpus.py)."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ch_launcher.kubevirt.quantity import quantity_bytes
from tests.cluster.dedicated_node import POOL, DedicatedNode, threads
from tests.cluster.node import NodeCluster
from tests.cluster.objects import annotated_vmi
from tests.functional.pod_probes import vm_info
from tests.hugepages import PAGE, meminfo

HOSTNAME = "kubernetes.io/hostname"


@pytest.fixture(scope="module")
def node03(node_cluster: NodeCluster) -> Iterator[DedicatedNode]:
    start = time.monotonic()
    with DedicatedNode(node_cluster).running() as node:
        print(f"\nnode03 up and its images imported in {time.monotonic() - start:.1f} s")
        yield node


def on_node03(name: str, **domain: Any) -> dict[str, Any]:
    """`annotated_vmi(name)` placed on node03, with `domain` merged into its spec.domain."""
    vmi = annotated_vmi(name)
    vmi["spec"]["nodeSelector"] = {HOSTNAME: "node03"}
    vmi["spec"]["domain"].update(domain)
    return vmi


def run(cluster: NodeCluster, vmi: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Create `vmi`, wait until it is Running and Ready; it and its launcher pod."""
    name = vmi["metadata"]["name"]
    r = cluster.kubectl("create", "-f", "-", input=cluster.yaml(vmi))
    assert (r.rc, r.lines) == (0, [f"virtualmachineinstance.kubevirt.io/{name} created"]), r.out
    found = cluster.wait_for_vmi(name, ready=True)
    return found, cluster.launcher_pod(found)


def delete(cluster: NodeCluster, vmi: dict[str, Any]) -> None:
    """Delete the VMI and wait until its launcher pod is gone."""
    cluster.kubectl("delete", "vmi", vmi["metadata"]["name"], "--ignore-not-found", "--wait=false")
    uid = vmi["metadata"]["uid"]
    cluster.wait_for(lambda: not cluster.json("get", "pods", "-l", f"kubevirt.io/created-by={uid}")["items"],
                     f"the pod of {vmi['metadata']['name']} to go", timeout=90, every=1)


def hugetlb_bytes(pid: int) -> int:
    """The hugetlb memory process `pid` maps (/proc/PID/smaps_rollup, shared and private)."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
                  if ":" in line)
    return sum(int(fields[f].split()[0]) << 10 for f in ("Shared_Hugetlb", "Private_Hugetlb"))


def vmm_config(pid: int) -> dict[str, Any]:
    """vm.info's config, read on the VMM's API socket through its own root."""
    argv = Path(f"/proc/{pid}/cmdline").read_text().split("\0")
    (socket,) = [arg.split("path=", 1)[1].split(",")[0] for prev, arg in itertools.pairwise(argv)
                 if prev == "--api-socket"]
    config: dict[str, Any] = vm_info(NodeCluster.path_in(pid, socket))["config"]
    return config


def test_the_node_offers_its_exclusive_cpu_and_its_hugepages(node_cluster: NodeCluster,
                                                            node03: DedicatedNode) -> None:
    node = node_cluster.json("get", "node", node03.name)
    assert node["metadata"]["labels"].get("cpumanager") == "true"  # virt-handler, with the CPUManager gate
    allocatable = node["status"]["allocatable"]
    assert (allocatable["cpu"], allocatable["hugepages-2Mi"]) == ("1900m", f"{POOL * 2}Mi"), allocatable
    state = node03.cpu_manager_state()
    assert (state["policyName"], state["defaultCpuSet"]) == ("static", "0-1"), state


def test_a_dedicated_cpu_vmi_runs_its_vcpu_alone_on_the_cpu_kubelet_gave_its_pod(node_cluster: NodeCluster,
                                                                                 node03: DedicatedNode) -> None:
    vmi, pod = run(node_cluster, on_node03("dedicated", cpu={"cores": 1, "dedicatedCpuPlacement": True}))
    try:
        assert pod["spec"]["nodeName"] == node03.name and pod["status"]["qosClass"] == "Guaranteed"
        compute = next(c for c in pod["spec"]["containers"] if c["name"] == "compute")
        assert compute["resources"]["requests"]["cpu"] == compute["resources"]["limits"]["cpu"] == "1"
        # kubelet: CPU 1 is the compute container's alone, CPU 0 the shared pool's
        state = node03.cpu_manager_state()
        assert state["defaultCpuSet"] == "0" and state["entries"][pod["metadata"]["uid"]] == {"compute": "1"}, state
        assert node03.cgroup(pod, "compute", "cpuset").joinpath("cpuset.cpus").read_text().strip() == "1"
        # the compute container's processes, as virt-handler's runtime finds them: the VMM
        # (qemu-system-clo) a child of the launcher's parent, virtqemud a child of the launcher
        processes = node03.processes(pod)
        (vmm,) = [pid for pid, (comm, _) in processes.items() if comm == "qemu-system-clo"]
        ((_, launcher),) = [entry for entry in processes.values() if entry[0] == "virtqemud"]
        assert processes[launcher][0] == "ch-launcher", processes
        assert processes[vmm][1] == processes[launcher][1], processes  # the launcher's parent: the monitor
        # each vCPU thread on the exclusive CPU (the VMM's cpus.affinity), every other thread of the
        # pod's compute container where KubeVirt leaves QEMU's emulator threads without
        # isolateEmulatorThread: on the container's cpuset, that same CPU
        assert vmm_config(vmm)["cpus"]["affinity"] == [{"vcpu": 0, "host_cpus": [1]}]
        vmm_threads = threads(vmm)
        assert ("vcpu0", "1") in vmm_threads, vmm_threads
        for pid in processes:
            assert {cpus for _name, cpus in threads(pid)} == {"1"}, (processes[pid], threads(pid))
        # virt-handler's runtime (HandleHousekeeping for dedicated CPUs, after each Sync) found the
        # VMM: no Sync of this VMI failed (virt-handler's SyncFailed event and error line)
        log = node03.node.log("virt-handler")
        failed = [line for line in log.splitlines() if f'"name":"{vmi["metadata"]["name"]}"' in line
                  and json.loads(line).get("msg") == "Synchronizing the VirtualMachineInstance failed."]
        events = node_cluster.json("get", "events", "--field-selector", f"involvedObject.uid={vmi['metadata']['uid']}")
        assert failed == [] and "SyncFailed" not in {e["reason"] for e in events["items"]}, (failed, events)
        with node_cluster.console("dedicated") as console:
            console.type(b"~h")
            console.wait_for("KCH-GUEST-HELLO")
    finally:
        delete(node_cluster, vmi)
    # kubelet gives CPU 1 back to the shared pool (its CPU manager's reconcile, some seconds later)
    node_cluster.wait_for(lambda: node03.cpu_manager_state()["defaultCpuSet"] == "0-1",
                          "CPU 1 back in the shared pool", timeout=60, every=1)


def test_a_hugepage_vmi_takes_its_guest_memory_from_the_nodes_pool_while_it_runs(node_cluster: NodeCluster,
                                                                                 node03: DedicatedNode) -> None:
    guest = 64 << 20
    free = meminfo("HugePages_Free")
    vmi, pod = run(node_cluster, on_node03("hugepages", memory={"guest": "64Mi", "hugepages": {"pageSize": "2Mi"}}))
    try:
        compute = next(c for c in pod["spec"]["containers"] if c["name"] == "compute")
        assert quantity_bytes(compute["resources"]["limits"]["hugepages-2Mi"]) == guest
        assert meminfo("HugePages_Free") == free - guest // PAGE  # all of it, from the start
        # they are the VMM's: its guest RAM is hugetlb memory (this machine mounts no hugetlb
        # cgroup, so kubelet cannot also limit the pod's pages here)
        (vmm,) = [pid for pid, (comm, _) in node03.processes(pod).items() if comm == "cloud-hyperviso"]
        assert hugetlb_bytes(vmm) == guest
        with node_cluster.console("hugepages") as console:
            console.type(b"~h")
            console.wait_for("KCH-GUEST-HELLO")
    finally:
        delete(node_cluster, vmi)
    node_cluster.wait_for(lambda: meminfo("HugePages_Free") == free, "the pages to return to the pool", timeout=30)
