"""Two real nodes and KubeVirt's live migration of Cloud Hypervisor VMs between them.

node02 (tests/cluster/two_nodes.py) joins the cluster of the other stories for this module only.
What a user sees is asserted: `kubectl get vmi/vmim/pods`, events, what `virtctl` prints, the
guest's serial log (virt-tail's `guest-console-log` container) with its boot count.

The migratable VM is what Cloud Hypervisor and the launcher can move: no writable local disk (the
tiny guest boots as the firmware of a VMI without disks; a containerDisk's writable overlay cannot
move, docs/migration.md §4), a masquerade interface on the pod network. On this PVM machine every
Cloud Hypervisor switch-over fails (`GetNestedState`): everything before it is real (the target
pod on node02, the target launcher prepared, the guest's memory sent through virt-handler's
migration proxies), and the VM runs on in its source pod.

The stories run in file order on one VM (`mig`): `virtctl migrate` twice, `virtctl migrate-cancel`,
then `kubectl drain` of its node; the guest must have booted once through all of them.
"""

from __future__ import annotations

import datetime
import json
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.cluster.node import NodeCluster
from tests.cluster.objects import CH, annotated_vmi
from tests.cluster.two_nodes import SecondNode

pytestmark = pytest.mark.two_nodes

VM = "mig"
SOURCE = "node01"
HOSTNAME = "kubernetes.io/hostname"


def migratable_vm(name: str) -> dict[str, Any]:
    """A VM Cloud Hypervisor can migrate: no disk (the tiny guest is the firmware), a masquerade
    interface, `evictionStrategy: LiveMigrate`; it prefers node01, so a migration goes to node02
    (a required nodeSelector would be copied into the target pod and pin it to the source's node)."""
    affinity = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": {"matchExpressions": [
            {"key": HOSTNAME, "operator": "In", "values": [SOURCE]}]}}]}}
    template = {"metadata": {"labels": {"kubevirt.io/vm": name}, "annotations": dict(CH)},
                "spec": {"evictionStrategy": "LiveMigrate", "affinity": affinity,
                         "domain": {"memory": {"guest": "128Mi"},
                                    "devices": {"autoattachGraphicsDevice": False,
                                                "interfaces": [{"name": "default", "masquerade": {}}]}},
                         "networks": [{"name": "default", "pod": {}}]}}
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": name},
            "spec": {"runStrategy": "Always", "template": template}}


def vmi_row(cluster: NodeCluster, name: str) -> dict[str, str]:
    """`kubectl get vmi NAME -o wide` as a row keyed by its header."""
    header, row = cluster.ok("get", "vmi", name, "-o", "wide").splitlines()
    return dict(zip(header.split(), row.split(), strict=False))


def events_of(cluster: NodeCluster, uid: str) -> list[tuple[str, str, str]]:
    items = cluster.json("get", "events", "--field-selector", f"involvedObject.uid={uid}")["items"]
    return [(e["type"], e["reason"], e["message"]) for e in items]


def wait_for_event(cluster: NodeCluster, uid: str, event: tuple[str, str, str]) -> None:
    """Until the object `uid` has `event` (its component records it apart from the status it wrote)."""
    cluster.wait_for(lambda: event in events_of(cluster, uid), f"the event {event}", timeout=60, every=0.5)


def wait_for_vmi(cluster: NodeCluster, vmi: str, state: Callable[[dict[str, Any], dict[str, str]], bool],
                 what: str) -> dict[str, Any]:
    """VMI `vmi` (its object and `kubectl get vmi -o wide`'s row) once `state` holds for them:
    after a migration the VMI's status is written by virt-controller and both virt-handlers, each
    in its own update, and later than the migration object's."""
    def reached() -> dict[str, Any] | None:
        found = cluster.json("get", "vmi", vmi)
        return found if state(found, vmi_row(cluster, vmi)) else None
    found: dict[str, Any] = cluster.wait_for(reached, what, timeout=60, every=0.5)
    return found


def serial_log(cluster: NodeCluster, pod: str, *, until: str = "KCH-GUEST-READY", timeout: float = 30) -> str:
    """The guest's serial log as virt-tail prints it (`kubectl logs POD -c guest-console-log`),
    once it shows `until` (virt-tail follows the launcher's log file with a delay)."""
    def shown() -> str | None:
        out = cluster.ok("logs", pod, "-c", "guest-console-log")
        return out if until in out else None
    found: str = cluster.wait_for(shown, f"{pod}'s serial log to show {until}", timeout=timeout, every=0.5)
    return found


def launcher_log(cluster: NodeCluster, pod: str) -> list[dict[str, Any]]:
    """The compute container's JSON log lines."""
    entries = []
    for line in cluster.ok("logs", pod, "-c", "compute").splitlines():
        if line.startswith("{"):
            try:
                entries.append(json.loads(line))
            except ValueError:
                continue
    return entries


def migrations_of(cluster: NodeCluster, vmi: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.json("get", "vmim", "-l", f"kubevirt.io/vmi-name={vmi}")["items"]
    return sorted(items, key=lambda m: m["metadata"]["creationTimestamp"])


def pods_of(cluster: NodeCluster, vmi_uid: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.json("get", "pods", "-l", f"kubevirt.io/created-by={vmi_uid}")["items"]
    return items


def running_pods(cluster: NodeCluster, vmi: str) -> list[tuple[str, str]]:
    """The VMI's launcher pods that run (name, node): what `kubectl get pods -o wide` shows Running
    (a failed migration's target pod stays, ended, until the VMI goes, as with virt-launcher)."""
    uid = cluster.json("get", "vmi", vmi)["metadata"]["uid"]
    return [(p["metadata"]["name"], p["spec"]["nodeName"]) for p in pods_of(cluster, uid)
            if p["status"]["phase"] == "Running"]


def say_hello(cluster: NodeCluster, vmi: str) -> None:
    """The guest answers on `virtctl console` (its ~h command)."""
    with cluster.console(vmi) as console:
        console.type(b"~h")
        console.wait_for("KCH-GUEST-HELLO")


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def node02(node_cluster: NodeCluster) -> Iterator[SecondNode]:
    node = SecondNode(node_cluster)
    start = time.monotonic()
    node.start()
    print(f"\nnode02 up and its images imported in {time.monotonic() - start:.1f} s")
    try:
        yield node
        # the module's VMIs end on node02 before it goes (a pod left there would stay Terminating)
        node_cluster.wait_for(lambda: not node.pods(), "the pods on node02 to go", timeout=120, every=1)
    finally:
        node.stop()


@pytest.fixture(scope="module")
def mig(node_cluster: NodeCluster, node02: SecondNode) -> Iterator[dict[str, Any]]:
    """The migratable VM, Running and Ready on node01; its VMI as first seen."""
    r = node_cluster.kubectl("create", "-f", "-", input=node_cluster.yaml(migratable_vm(VM)))
    assert (r.rc, r.lines) == (0, [f"virtualmachine.kubevirt.io/{VM} created"]), r.out
    vmi = node_cluster.wait_for_vmi(VM, ready=True)
    yield vmi
    node_cluster.kubectl("delete", "vm", VM, "--ignore-not-found", "--wait=false")
    node_cluster.wait_for(lambda: not pods_of(node_cluster, vmi["metadata"]["uid"]), "the VM's pods to go",
                          timeout=90)


# --- stories ----------------------------------------------------------------------------------


def test_a_vmi_placed_on_node02_runs_there_like_on_node01(node_cluster: NodeCluster, node02: SecondNode):
    name = "on-node02"
    vmi_obj = annotated_vmi(name)
    vmi_obj["spec"]["nodeSelector"] = {HOSTNAME: node02.name}
    r = node_cluster.kubectl("create", "-f", "-", input=node_cluster.yaml(vmi_obj))
    assert (r.rc, r.lines) == (0, [f"virtualmachineinstance.kubevirt.io/{name} created"]), r.out
    try:
        vmi = node_cluster.wait_for_vmi(name, ready=True)
        row = vmi_row(node_cluster, name)
        assert (row["PHASE"], row["NODENAME"], row["READY"]) == ("Running", node02.name, "True"), row
        pod = node_cluster.launcher_pod(vmi)
        pod_name = pod["metadata"]["name"]
        assert pod["spec"]["nodeName"] == node02.name
        assert pod["status"]["podIP"].startswith("10.244.1."), pod["status"]  # node02's POD_CIDR
        containers = node02.containers_of(pod_name)
        assert len(containers) >= 4 and set(containers) & node02.running_tasks()
        assert not node_cluster.containers_of(pod_name)  # nothing of it on node01
        say_hello(node_cluster, name)
        assert serial_log(node_cluster, pod_name, until="KCH-GUEST-HELLO").count("KCH-GUEST-READY") == 1
        with node_cluster.console(name) as console:
            r = node_cluster.kubectl("delete", "vmi", name, "--wait=false")
            assert r.rc == 0, r.out
            console.wait_for("KCH-GUEST-POWER-BUTTON")  # shut down gracefully, as on node01
        node_cluster.wait_for(lambda: node_cluster.kubectl("get", "pod", pod_name).rc != 0, "the launcher pod to go",
                              timeout=60)
        assert node_cluster.kubectl("get", "vmi", name).rc != 0
        assert not set(containers) & node02.running_tasks()
    finally:
        node_cluster.kubectl("delete", "vmi", name, "--ignore-not-found", "--wait=false")


def migration_ended(cluster: NodeCluster, vmi: str, known: int) -> dict[str, Any] | None:
    """The VMI's migration after the first `known`, once it has ended (Failed or Succeeded) and
    virt-controller copied the VMI's final migration state into it (a later write than the phase)."""
    later = migrations_of(cluster, vmi)[known:]
    status = later[0].get("status", {}) if later else {}
    if status.get("phase") in ("Failed", "Succeeded") and status.get("migrationState", {}).get("completed"):
        return later[0]
    return None


def message_time(entry: dict[str, Any]) -> float:
    return datetime.datetime.fromisoformat(entry["timestamp"]).timestamp()


def relay_end(log: list[dict[str, Any]], side: str, after: float) -> tuple[dict[str, Any], int]:
    """The launcher's `migration relay SIDE ended: ...; N bytes` line after `after`, and N."""
    for entry in log:
        m = re.match(rf"migration relay {side} ended: .*; (\d+) bytes", entry.get("msg", ""))
        if m and message_time(entry) >= after:
            return entry, int(m.group(1))
    raise AssertionError(f"no 'migration relay {side} ended' line in the launcher's log")


def proxy_bytes(handler_log: str, vmi_uid: str, port: int) -> list[int]:
    """What virt-handler's migration proxies of `vmi_uid` copied towards the target through the
    target node's TCP `port` (its `N bytes copied from inbound to outbound` lines)."""
    copied = []
    for line in handler_log.splitlines():
        if vmi_uid not in line or "bytes copied from inbound to outbound" not in line:
            continue
        entry = json.loads(line)
        if entry.get("uid") == vmi_uid and str(port) in (entry.get("outbound", "") + entry.get("listening", "")):
            copied.append(int(entry["msg"].split()[0]))
    return copied


def test_virtctl_migrate_goes_to_node02_and_fails_at_the_switch_over_leaving_the_vm_running_on_node01(
        node_cluster: NodeCluster, node02: SecondNode, mig: dict[str, Any]):
    """Twice: the target pod on node02, its launcher prepared, all guest memory through
    virt-handler's proxies, Cloud Hypervisor's switch-over failing (GetNestedState on this PVM
    machine); the VMIM Failed with the launcher's reason, the VM on in its pod on node01."""
    uid = mig["metadata"]["uid"]
    (source,) = [pod for pod, node in running_pods(node_cluster, VM) if node == SOURCE]
    memory = 128 << 20
    # virt-handler reaches the pod's sockets through /proc/<pid>/root/var/run (see the Containerfile)
    assert node_cluster.ok("exec", source, "-c", "compute", "--", "readlink", "/var/run").strip() == "../run"
    for attempt in (1, 2):
        known = len(migrations_of(node_cluster, VM))
        started = time.time() - 1
        r = node_cluster.virtctl("migrate", VM)
        assert (r.rc, r.out.strip()) == (0, f"VM {VM} was scheduled to migrate"), r.out
        vmim = node_cluster.wait_for(lambda known=known: migration_ended(node_cluster, VM, known),
                                     f"migration {attempt} to end", timeout=240, every=1)
        name, migration_uid = vmim["metadata"]["name"], vmim["metadata"]["uid"]
        # kubectl get vmim
        (row,) = node_cluster.ok("get", "vmim", name).splitlines()[1:]
        assert row.split()[1:] == ["Failed", VM], row
        phases = [t["phase"] for t in vmim["status"]["phaseTransitionTimestamps"]]
        assert phases == ["Pending", "Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running",
                          "Failed"], phases
        state = vmim["status"]["migrationState"]
        assert (state["sourceNode"], state["sourcePod"], state["targetNode"], state["targetNodeAddress"]) == (
            SOURCE, source, node02.name, node02.ip), state
        assert (state["failed"], state["completed"], state.get("targetNodeDomainDetected")) == (True, True, True)
        reason = state["failureReason"]
        assert reason.startswith("Live migration failed: ") and "GetNestedState" in reason, reason
        # the VMI: Running on node01 in the same pod, its status and events naming the launcher's reason
        wait_for_vmi(node_cluster, VM, lambda vmi, row, migration_uid=migration_uid: (
            vmi["status"].get("migrationState", {}).get("migrationUid") == migration_uid
            and (row["PHASE"], row["NODENAME"], row["READY"], row["LIVE-MIGRATABLE"]) == ("Running", SOURCE, "True",
                                                                                         "True")),
            f"the VMI to show migration {attempt} failed, Running and Ready on {SOURCE}")
        assert node_cluster.json("get", "vmi", VM)["status"]["migrationState"]["failureReason"] == reason
        wait_for_event(node_cluster, uid, ("Warning", "Migrated",
                                           (f"VirtualMachineInstance migration uid {migration_uid} failed. "
                                           f"reason:{reason}")))
        # the target pod: on node02, prepared, received the memory, then told to clean up (it ends
        # as virt-launcher's does on that signal: a panic's exit code 2), nothing of it running
        target = state["targetPod"]
        pod = node_cluster.wait_for(lambda target=target: (p := node_cluster.json("get", "pod", target))["status"][
            "phase"] == "Failed" and p, f"the target pod {target} to end", timeout=60)
        assert pod["spec"]["nodeName"] == node02.name
        compute = next(s for s in pod["status"]["containerStatuses"] if s["name"] == "compute")
        assert compute["state"]["terminated"]["exitCode"] == 2
        target_log = launcher_log(node_cluster, target)
        messages = [e["msg"] for e in target_log]
        assert "SyncMigrationTarget: prepared: waiting for the source" in messages
        assert "domain ADDED: Paused/Migration" in messages  # the source connected: the receive started
        assert f"SignalTargetPodCleanup: this pod ({target}) is the migration target; exiting early" in messages
        assert not set(node02.containers_of(target)) & node02.running_tasks()
        assert running_pods(node_cluster, VM) == [(source, SOURCE)]
        # memory through the proxies: what the source launcher's relay sent, virt-handler's source
        # proxy (node01) and target proxy (node02) copied and the target launcher's relay received
        source_log = launcher_log(node_cluster, source)
        (initiated,) = [e for e in source_log if e["msg"].startswith(f"Initiating live migration {migration_uid} ")]
        ended, sent = relay_end(source_log, "send", started)
        _, received = relay_end(target_log, "receive", started)
        (port,) = [int(p) for p, dest in state["targetDirectMigrationNodePorts"].items() if dest == 49152]
        assert proxy_bytes(node_cluster.node_log("virt-handler"), uid, port) == [sent]
        assert proxy_bytes(node02.log("virt-handler"), uid, port) == [sent]
        assert received == sent >= memory  # every page of the guest, once, and the protocol around it
        seconds = message_time(ended) - message_time(initiated)
        print(f"\nmigration {attempt}: {sent} bytes ({sent / memory:.4f}x the guest's 128 MiB) in {seconds:.2f} s "
              f"through virt-handler's proxies: {sent / seconds / (1 << 20):.1f} MiB/s; "
              f"virtctl migrate -> Failed {vmim_seconds(vmim):.1f} s")
        # the guest: alive, never rebooted
        say_hello(node_cluster, VM)
        log = serial_log(node_cluster, source, until="KCH-GUEST-HELLO")
        assert log.count("KCH-GUEST-READY") == 1, log


def vmim_seconds(vmim: dict[str, Any]) -> float:
    """From the migration's creation to its last phase (seconds, KubeVirt's 1 s resolution)."""
    times = [datetime.datetime.fromisoformat(t["phaseTransitionTimestamp"]).timestamp()
             for t in vmim["status"]["phaseTransitionTimestamps"]]
    return max(times) - min(times)


def test_virtctl_migrate_cancel_of_a_migration_in_flight_leaves_the_vm_running_on_node01(
        node_cluster: NodeCluster, node02: SecondNode, mig: dict[str, Any]):
    uid = mig["metadata"]["uid"]
    (source,) = [pod for pod, node in running_pods(node_cluster, VM) if node == SOURCE]
    # a MigrationPolicy slows this VM's migrations down to 4 MiB/s (the launcher's relay honours
    # bandwidthPerMigration; 128 MiB take half a minute), so that one is in flight to cancel
    policy = {"apiVersion": "migrations.kubevirt.io/v1alpha1", "kind": "MigrationPolicy",
              "metadata": {"name": "slow"},
              "spec": {"bandwidthPerMigration": "4Mi",
                       "selectors": {"virtualMachineInstanceSelector": {"kubevirt.io/vm": VM}}}}
    node_cluster.ok("create", "-f", "-", input=node_cluster.yaml(policy))
    try:
        known = len(migrations_of(node_cluster, VM))
        r = node_cluster.virtctl("migrate", VM)
        assert (r.rc, r.out.strip()) == (0, f"VM {VM} was scheduled to migrate"), r.out

        def sending() -> dict[str, Any] | None:
            later = migrations_of(node_cluster, VM)[known:]
            if not later or later[0].get("status", {}).get("phase") != "Running":
                return None
            prefix = f"Initiating live migration {later[0]['metadata']['uid']} "
            return later[0] if any(e["msg"].startswith(prefix) for e in launcher_log(node_cluster, source)) else None
        vmim = node_cluster.wait_for(sending, "the migration to send the guest's memory", timeout=240, every=1)
        migration_uid = vmim["metadata"]["uid"]
        r = node_cluster.virtctl("migrate-cancel", VM)
        assert (r.rc, r.out.strip()) == (0, f"VM {VM} was scheduled to migrate-cancel"), r.out
        # virtctl deletes the migration; virt-handler asks the source launcher to abort it first
        node_cluster.wait_for(lambda: node_cluster.kubectl("get", "vmim", vmim["metadata"]["name"]).rc != 0,
                              "the cancelled migration to go", timeout=120, every=1)
        # the VMI's migration state once the abort and its outcome are both in it (written in
        # updates of their own, after the migration object went)
        vmi = wait_for_vmi(node_cluster, VM, lambda vmi, row: (
            (state := vmi["status"].get("migrationState", {})).get("migrationUid") == migration_uid
            and state.get("abortStatus") == "Succeeded" and state.get("failed") is True
            and (row["PHASE"], row["NODENAME"], row["READY"]) == ("Running", SOURCE, "True")),
            "the VMI to show the migration aborted, Running and Ready on node01")
        state = vmi["status"]["migrationState"]
        node_cluster.wait_for(lambda: node_cluster.json("get", "pod", state["targetPod"])["status"]["phase"]
                              == "Failed", "the target pod to end", timeout=60)
        assert running_pods(node_cluster, VM) == [(source, SOURCE)]
        assert (state["abortRequested"], state["failureReason"], state["migrationPolicyName"]) == (
            True, "Live migration has been aborted", "slow"), state
        wait_for_event(node_cluster, uid, ("Normal", "Migrating", "VirtualMachineInstance is aborting migration."))
        wait_for_event(node_cluster, uid, ("Warning", "Migrated", (f"VirtualMachineInstance migration uid "
                                           f"{migration_uid} failed. reason:Live migration has been aborted")))
        log = launcher_log(node_cluster, source)
        assert f"Live migration {migration_uid} abort succeeded" in [e["msg"] for e in log]
        (cut,) = [e["msg"] for e in log if e["msg"].startswith("migration relay send ended: cut ")
                  and message_time(e) >= message_time(next(x for x in log if x["msg"].startswith(
                      f"Initiating live migration {migration_uid} ")))]
        sent = int(re.search(r"; (\d+) bytes", cut).group(1))  # type: ignore[union-attr]
        assert 0 < sent < 128 << 20, cut  # cut in the middle of the guest's memory
        print(f"\ncancelled after {sent >> 20} MiB of 128 sent")
        say_hello(node_cluster, VM)
        assert serial_log(node_cluster, source, until="KCH-GUEST-HELLO").count("KCH-GUEST-READY") == 1
    finally:
        node_cluster.kubectl("delete", "migrationpolicy", "slow", "--ignore-not-found")


def test_kubectl_drain_of_node01_is_held_by_kubevirts_eviction_interceptor_and_the_vm_keeps_running(
        node_cluster: NodeCluster, node02: SecondNode, mig: dict[str, Any]):
    """KubeVirt's way to drain a node (its user guide's command). Its eviction interceptor refuses
    to evict a launcher pod whose VMI migrates on eviction and marks the VMI for evacuation; the
    drain retries until its timeout and reports it; the VM runs on, and `kubectl uncordon`
    returns the node. (No evacuation migration follows on this cluster: docs/migration.md §8.)"""
    (source,) = [pod for pod, node in running_pods(node_cluster, VM) if node == SOURCE]
    try:
        r = node_cluster.kubectl("drain", SOURCE, "--delete-emptydir-data", "--ignore-daemonsets=true", "--force",
                                 "--pod-selector=kubevirt.io=virt-launcher", "--timeout=30s", timeout=120)
        assert r.rc == 1, r.out
        assert r.lines[0] == f"node/{SOURCE} cordoned", r.out
        assert (f'error when evicting pods/"{source}" -n "default" (will retry after 5s): admission webhook '
                '"virt-launcher-eviction-interceptor.kubevirt.io" denied the request: ') in r.out, r.out
        assert f'Eviction triggered evacuation of VMI "default/{VM}"' in r.out, r.out
        assert (f'error: unable to drain node "{SOURCE}" due to error: error when evicting pods/"{source}" -n '
                '"default": global timeout reached: 30s') in r.out, r.out
        (node,) = node_cluster.ok("get", "node", SOURCE).splitlines()[1:]
        assert node.split()[1] == "Ready,SchedulingDisabled", node
        row = vmi_row(node_cluster, VM)
        assert (row["PHASE"], row["NODENAME"], row["READY"]) == ("Running", SOURCE, "True"), row
        assert running_pods(node_cluster, VM) == [(source, SOURCE)]
    finally:
        r = node_cluster.kubectl("uncordon", SOURCE)
    assert (r.rc, r.lines) == (0, [f"node/{SOURCE} uncordoned"]), r.out
    (node,) = node_cluster.ok("get", "node", SOURCE).splitlines()[1:]
    assert node.split()[1] == "Ready", node
    say_hello(node_cluster, VM)
    assert serial_log(node_cluster, source, until="KCH-GUEST-HELLO").count("KCH-GUEST-READY") == 1


def test_virtctl_migrate_of_a_vm_with_a_containerdisk_is_refused_by_the_webhook(node_cluster: NodeCluster,
                                                                              node02: SecondNode):
    name = "cdisk"
    template = annotated_vmi(name)
    vm = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": name},
          "spec": {"runStrategy": "Always",
                   "template": {"metadata": {"annotations": template["metadata"]["annotations"]},
                                "spec": template["spec"]}}}
    node_cluster.ok("create", "-f", "-", input=node_cluster.yaml(vm))
    try:
        vmi = node_cluster.wait_for_vmi(name, ready=True)
        r = node_cluster.virtctl("migrate", name)
        # README "Troubleshooting", in virtctl's words
        assert (r.rc, r.out.strip()) == (1, (
            'Error migrating VirtualMachine Internal error occurred: admission webhook '
            '"migrations.validator.kubevirt-ch.io" denied the request: Cannot migrate VMI, Reason: '
            "DisksNotLiveMigratable, Message: volume 'containerdisk' (containerDisk) is local to the pod and "
            "writable: Cloud Hypervisor cannot copy disks during a migration")), r.out
        assert migrations_of(node_cluster, name) == []
        assert [p["metadata"]["name"] for p in pods_of(node_cluster, vmi["metadata"]["uid"])] == [
            node_cluster.launcher_pod(vmi)["metadata"]["name"]]  # no target pod
        assert vmi_row(node_cluster, name)["PHASE"] == "Running"
    finally:
        node_cluster.kubectl("delete", "vm", name, "--ignore-not-found", "--wait=false")
