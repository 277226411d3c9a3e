"""Two real nodes (node02 beside node01: `second_node`) and KubeVirt's own migration path
between them: `virtctl migrate` creates the VirtualMachineInstanceMigration, virt-controller
the target pod on the other node, virt-handler on each node its migration proxies (TLS between
the nodes), and the launchers move the memory through them.

The VMs here can migrate as far as the add-on is concerned: no disk but cloud-init (rebuilt in
the target pod), a masquerade interface. A containerDisk VMI's migration is refused at creation
(`/validate-migration`, last story). Their template prefers node02, so that node01, which runs
the add-on's server, is the one they migrate to and the drain does not touch the server.

On this machine (PVM) Cloud Hypervisor fails every switch-over (`GetNestedState`): the stories
assert everything up to it (the target pod on the other node, the launcher's target side, the
memory sent through the proxies) and the failure as the user sees it. Where a switch-over
succeeds (VT-x or SVM) the first story asserts the VM runs on the other node instead."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.cluster.node import NodeCluster
from tests.cluster.objects import annotated_vm, annotated_vmi

pytestmark = pytest.mark.two_nodes

MiB = 1 << 20
NODE02_NET = "10.244.1."


def migratable_vm(name: str, memory: str = "128Mi") -> dict[str, Any]:
    vm = annotated_vm(name)
    spec = vm["spec"]["template"]["spec"]
    spec["domain"]["devices"]["disks"] = [d for d in spec["domain"]["devices"]["disks"] if d["name"] != "containerdisk"]
    spec["volumes"] = [v for v in spec["volumes"] if v["name"] != "containerdisk"]
    spec["domain"]["memory"]["guest"] = memory
    spec["evictionStrategy"] = "LiveMigrate"
    prefer = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node02"]}
    spec["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": {"matchExpressions": [prefer]}}]}}
    return vm


@pytest.fixture
def vms(node_cluster: NodeCluster, second_node: str) -> Iterator[Callable[..., dict[str, Any]]]:
    """Creates a migratable VM and returns its VMI, Running and Ready on node02; deletes it after."""
    made: list[str] = []

    def create(name: str, memory: str = "128Mi") -> dict[str, Any]:
        made.append(name)
        r = node_cluster.kubectl("create", "-f", "-", input=node_cluster.yaml(migratable_vm(name, memory)))
        assert r.rc == 0, r.out
        node_cluster.wait_for(lambda: node_cluster.kubectl("get", "vmi", name).rc == 0, f"VMI {name}", timeout=30)
        vmi = node_cluster.wait_for_vmi(name, ready=True)
        assert vmi["status"]["nodeName"] == second_node
        return vmi

    yield create
    if made:
        node_cluster.kubectl("delete", "vm", *made, "--ignore-not-found", "--wait=false")


def running_pod(cluster: NodeCluster, vmi: dict[str, Any]) -> dict[str, Any]:
    """The launcher pod that runs `vmi` (a failed migration leaves the ended target pod beside it)."""
    pods = cluster.json("get", "pods", "-l", f"kubevirt.io/created-by={vmi['metadata']['uid']}")["items"]
    node = vmi["status"]["nodeName"]
    (pod,) = [p for p in pods if p["status"]["phase"] == "Running" and p["spec"]["nodeName"] == node]
    found: dict[str, Any] = pod
    return found


def says_hello(cluster: NodeCluster, name: str) -> None:
    with cluster.console(name) as console:
        console.type(b"~h")
        console.wait_for("KCH-GUEST-HELLO")


def launcher_log(cluster: NodeCluster, pod_name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in cluster.ok("logs", pod_name, "-c", "compute").splitlines()
            if line.startswith("{")]


def memory_sent(cluster: NodeCluster, source_pod: str) -> tuple[int, float]:
    """Bytes the source launcher's relay passed to virt-handler's source proxy in its last
    migration, and the seconds from the send's start to the relay's end (its log)."""
    log = launcher_log(cluster, source_pod)
    start = [e for e in log if e.get("msg", "").startswith("Initiating live migration ")][-1]
    end = [e for e in log if e.get("msg", "").startswith("migration relay send ended: ")][-1]
    sent = int(end["msg"].rsplit("; ", 1)[1].split(" bytes")[0])
    seconds = (datetime.datetime.fromisoformat(end["timestamp"])
               - datetime.datetime.fromisoformat(start["timestamp"])).total_seconds()
    return sent, seconds


def finished_migration(cluster: NodeCluster, vm: str, before: str | None = None) -> dict[str, Any]:
    """The VMI's migrationState once a migration other than `before` (a migrationUid) ended."""
    def ended() -> dict[str, Any] | None:
        state = cluster.json("get", "vmi", vm)["status"].get("migrationState") or {}
        return state if state.get("endTimestamp") and state.get("migrationUid") != before else None
    found: dict[str, Any] = cluster.wait_for(ended, f"the migration of {vm} to end", timeout=120, every=0.5)
    return found


def test_a_vmi_placed_on_node02_runs_there_like_on_node01(node_cluster: NodeCluster, second_node: str):
    vmi = annotated_vmi("on-node02")
    vmi["spec"]["nodeSelector"] = {"kubernetes.io/hostname": second_node}
    r = node_cluster.kubectl("create", "-f", "-", input=node_cluster.yaml(vmi))
    assert r.rc == 0, r.out
    try:
        running = node_cluster.wait_for_vmi("on-node02", ready=True)
        pod = node_cluster.launcher_pod(running)
        (row,) = node_cluster.ok("get", "vmi", "on-node02").splitlines()[1:]
        assert row.split()[2:5] == ["Running", pod["status"]["podIP"], second_node]
        assert pod["spec"]["nodeName"] == second_node and pod["status"]["podIP"].startswith(NODE02_NET)
        says_hello(node_cluster, "on-node02")  # virt-api -> node02's virt-handler -> the launcher
        assert node_cluster.boots(pod) == 1
        containers = set(node_cluster.ctr_on(second_node, "containers", "list", "-q").split())
        ids = {s["containerID"].split("://", 1)[1] for s in pod["status"]["containerStatuses"]}
        assert ids <= containers
    finally:
        node_cluster.kubectl("delete", "vmi", "on-node02", "--ignore-not-found", "--wait=false")
    node_cluster.wait_for(lambda: node_cluster.kubectl("get", "pod", pod["metadata"]["name"]).rc != 0,
                          "the pod on node02 to go", timeout=60)


def test_virtctl_migrate_reaches_the_switch_over_and_a_failed_one_leaves_the_vm_running(node_cluster: NodeCluster,
                                                                                        vms, second_node: str):
    vmi = vms("mig-vm")
    source_pod = running_pod(node_cluster, vmi)
    for attempt in (1, 2):
        if migrate_once(node_cluster, vmi, source_pod, second_node, attempt):
            return  # it moved: nothing left to try again


def migrate_once(cluster: NodeCluster, vmi: dict[str, Any], source_pod: dict[str, Any], source_node: str,
                 attempt: int) -> bool:
    """`virtctl migrate` of the VM of `vmi` to node01, asserted to its end; whether it moved."""
    name = vmi["metadata"]["name"]
    before = (cluster.json("get", "vmi", name)["status"].get("migrationState") or {}).get("migrationUid")
    watch = cluster.watch("vmim", columns="UID:.metadata.uid,PHASE:.status.phase")  # its UID is the migration's
    try:
        r = cluster.virtctl("migrate", name)
        assert (r.rc, r.lines) == (0, [f"VM {name} was scheduled to migrate"]), r.out
        state = finished_migration(cluster, name, before)
        uid = state["migrationUid"]
        cluster.wait_for(lambda: {"Failed", "Succeeded"} & set(watch.seen(key=uid)), "the VMIM to end", timeout=60)
    finally:
        watch.close()
    phases = watch.seen(key=uid)
    assert {"Scheduled", "PreparingTarget", "TargetReady", "Running"} <= set(phases), phases
    assert state["sourceNode"] == source_node and state["targetNode"] == "node01"
    target_pod = state["targetPod"]
    assert cluster.json("get", "pod", target_pod)["spec"]["nodeName"] == "node01"
    assert "SyncMigrationTarget: prepared: waiting for the source" in [e.get("msg") for e in
                                                                       launcher_log(cluster, target_pod)]
    sent, seconds = memory_sent(cluster, source_pod["metadata"]["name"])
    print(f"\nmigration {attempt}: {phases[-1]}; {sent / MiB:.1f} MiB through virt-handler's proxies in "
          f"{seconds:.2f} s ({sent / MiB / seconds:.0f} MiB/s); {state.get('failureReason')}")
    assert sent >= 128 * MiB  # all of the guest's memory, before the switch-over
    if phases[-1] == "Succeeded":  # a machine whose KVM hands over the vCPUs' state
        assert cluster.wait_for_vmi(name, ready=True)["status"]["nodeName"] == "node01"
        return True
    reason = state["failureReason"]
    assert state["failed"] is True
    assert reason.startswith("Live migration failed: ") and "GetNestedState" in reason, reason
    events = cluster.json("get", "events", "--field-selector", f"involvedObject.uid={vmi['metadata']['uid']}")
    failed = f"VirtualMachineInstance migration uid {state['migrationUid']} failed. reason:{reason}"
    assert ("Warning", "Migrated", failed) in {(e["type"], e["reason"], e["message"]) for e in events["items"]}
    # the VM runs on in its pod on node02, not rebooted; the target pod ended and runs nothing
    after = cluster.wait_for_vmi(name, ready=True)
    assert (after["metadata"]["uid"], after["status"]["nodeName"]) == (vmi["metadata"]["uid"], source_node)
    assert running_pod(cluster, after)["metadata"]["name"] == source_pod["metadata"]["name"]
    says_hello(cluster, name)
    assert cluster.boots(source_pod) == 1
    cluster.wait_for(lambda: cluster.json("get", "pod", target_pod)["status"]["phase"] in ("Failed", "Succeeded"),
                     "the target pod to end", timeout=60)
    statuses = cluster.json("get", "pod", target_pod)["status"]["containerStatuses"]
    ids = {s["containerID"].split("://", 1)[1] for s in statuses}
    assert not ids & set(cluster.ctr_on("node01", "tasks", "list", "-q").split())
    return False


def test_virtctl_migrate_cancel_aborts_a_migration_in_flight(node_cluster: NodeCluster, vms, second_node: str):
    """A 2 GiB guest: its memory takes seconds to send, so the cancel lands while it goes."""
    vmi = vms("cancel-vm", memory="2Gi")
    source_pod = running_pod(node_cluster, vmi)
    r = node_cluster.virtctl("migrate", "cancel-vm")
    assert (r.rc, r.lines) == (0, ["VM cancel-vm was scheduled to migrate"]), r.out
    node_cluster.wait_for(lambda: any(m["status"].get("phase") == "Running"
                                      for m in node_cluster.json("get", "vmim")["items"]),
                          "the migration to run", timeout=90)
    time.sleep(1)  # a second of memory on the way
    r = node_cluster.virtctl("migrate-cancel", "cancel-vm")
    assert (r.rc, r.lines) == (0, ["VM cancel-vm was scheduled to migrate-cancel"]), r.out
    state = finished_migration(node_cluster, "cancel-vm")
    assert (state["failed"], state.get("abortStatus"), state["failureReason"]) == (
        True, "Succeeded", "Live migration has been aborted"), state
    node_cluster.wait_for(lambda: not node_cluster.json("get", "vmim")["items"], "the VMIM to go", timeout=30)
    sent, seconds = memory_sent(node_cluster, source_pod["metadata"]["name"])
    print(f"\ncancelled after {sent / MiB:.0f} MiB of 2048 in {seconds:.1f} s")
    assert 0 < sent < 2048 * MiB
    after = node_cluster.wait_for_vmi("cancel-vm", ready=True)
    assert (after["metadata"]["uid"], after["status"]["nodeName"]) == (vmi["metadata"]["uid"], second_node)
    says_hello(node_cluster, "cancel-vm")
    assert node_cluster.boots(source_pod) == 1


def test_kubectl_drain_is_held_by_kubevirts_eviction_interceptor_and_the_vm_runs_on(node_cluster: NodeCluster, vms,
                                                                                    second_node: str):
    """`kubectl drain` of node02 (its launcher pods: the add-on's server runs on node01).
    virt-api's eviction interceptor denies the launcher pod's eviction and marks the VMI for
    evacuation; the drain retries until its timeout and says so; the VM keeps running; uncordon
    gives the node back. (On this cluster virt-api runs as the admin, not as its ServiceAccount,
    so its own VMI mutator drops the evacuation mark and virt-controller starts no evacuation
    migration: that one would fail at the switch-over as above.)"""
    vmi = vms("drain-vm")
    try:
        r = node_cluster.kubectl("drain", second_node, "--pod-selector=kubevirt.io=virt-launcher",
                                 "--delete-emptydir-data", "--timeout=20s", timeout=60)
        assert r.rc == 1
        denied = ('admission webhook "virt-launcher-eviction-interceptor.kubevirt.io" denied the request: '
                  'Eviction triggered evacuation of VMI "default/drain-vm"')
        assert r.lines[0] == f"node/{second_node} cordoned", r.out
        assert any(denied in line for line in r.lines), r.out
        assert "There are pending nodes to be drained:" in r.lines and f" {second_node}" in r.lines, r.out
        assert "global timeout reached: 20s" in r.out
        node = node_cluster.json("get", "node", second_node)
        assert node["spec"].get("unschedulable") is True
        after = node_cluster.wait_for_vmi("drain-vm", ready=True)
        assert (after["metadata"]["uid"], after["status"]["nodeName"]) == (vmi["metadata"]["uid"], second_node)
        says_hello(node_cluster, "drain-vm")
    finally:
        r = node_cluster.kubectl("uncordon", second_node)
    assert (r.rc, r.lines) == (0, [f"node/{second_node} uncordoned"]), r.out
    assert "unschedulable" not in node_cluster.json("get", "node", second_node)["spec"]


def test_a_containerdisk_vmis_migration_is_refused_at_creation(node_cluster: NodeCluster, second_node: str):
    r = node_cluster.kubectl("create", "-f", "-", input=node_cluster.yaml(annotated_vmi("cd-vmi")))
    assert r.rc == 0, r.out
    try:
        node_cluster.wait_for_vmi("cd-vmi", ready=True)
        vmim = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                "metadata": {"name": "cd-vmi-migration"}, "spec": {"vmiName": "cd-vmi"}}
        r = node_cluster.kubectl("create", "-f", "-", input=node_cluster.yaml(vmim))
        refused = ('Error from server: error when creating "STDIN": admission webhook '
                   '"migrations.validator.kubevirt-ch.io" denied the request: Cannot migrate VMI, Reason: '
                   "DisksNotLiveMigratable, Message: volume 'containerdisk' (containerDisk) is local to the pod and "
                   "writable: Cloud Hypervisor cannot copy disks during a migration")
        assert (r.rc, r.lines) == (1, [refused]), r.out
        assert not node_cluster.json("get", "vmim")["items"]
    finally:
        node_cluster.kubectl("delete", "vmi", "cd-vmi", "--ignore-not-found", "--wait=false")
