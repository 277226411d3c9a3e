"""How an annotated VMI ends on a real node: the guest powering off, and `kubectl delete vmi`.
Each story has a VMI of its own (a containerDisk, cloud-init NoCloud, a masquerade interface on
the pod network), as a user writes one."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.cluster.node import NodeCluster
from tests.cluster.objects import annotated_vmi

KUBEVIRT_GRACE_SECONDS = 30  # v1.DefaultGracePeriodSeconds: the VMIs here set no terminationGracePeriodSeconds
# the launcher's one known error-level line, at every non-root start (a manager defect:
# tests/functional/test_pod_devices.py::test_no_error_is_logged_while_virt_handler_has_not_yet_given_the_pod_kvm)
KNOWN_START_ERROR = "cloud-hypervisor did not start: VMM (pid "


@pytest.fixture
def running(node_cluster: NodeCluster) -> Iterator[Callable[[str], tuple[dict[str, Any], dict[str, Any]]]]:
    """A fresh annotated VMI, Running and Ready, and its launcher pod; deleted afterwards."""
    made: list[str] = []

    def create(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
        made.append(name)
        r = node_cluster.kubectl("create", "-f", "-", input=node_cluster.yaml(annotated_vmi(name)))
        assert (r.rc, r.lines) == (0, [f"virtualmachineinstance.kubevirt.io/{name} created"]), r.out
        found = node_cluster.wait_for_vmi(name, ready=True)
        return found, node_cluster.launcher_pod(found)

    yield create
    for name in made:
        node_cluster.kubectl("delete", "vmi", name, "--ignore-not-found", "--wait=false")


def error_lines(log: str) -> list[str]:
    """The launcher's error-level log lines (KubeVirt's JSON lines), but the known start-up one."""
    found = []
    for line in log.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("level") == "error" and not entry.get("msg", "").startswith(KNOWN_START_ERROR):
            found.append(entry["msg"])
    return found


def test_a_guest_that_powers_off_leaves_its_vmi_succeeded_and_its_pod_completed(node_cluster: NodeCluster, running):
    vmi_obj, pod = running("poweroff")
    with node_cluster.console("poweroff") as console:
        console.type(b"~p")
        console.wait_for("KCH-GUEST-POWEROFF")
    node_cluster.wait_for_vmi("poweroff", "Succeeded", timeout=60)
    (row,) = node_cluster.ok("get", "vmi", "poweroff").splitlines()[1:]
    assert row.split()[2] == "Succeeded"
    name = pod["metadata"]["name"]
    node_cluster.wait_for(lambda: node_cluster.json("get", "pod", name)["status"]["phase"] == "Succeeded",
                          "the launcher pod to complete", timeout=60)
    (line,) = node_cluster.ok("get", "pod", name).splitlines()[1:]
    assert line.split()[1:3] == ["0/3", "Completed"], line
    done = node_cluster.json("get", "pod", name)
    compute = next(s for s in done["status"]["containerStatuses"] if s["name"] == "compute")
    assert (compute["state"]["terminated"]["exitCode"], compute["state"]["terminated"]["reason"]) == (0, "Completed")
    events = node_cluster.json("get", "events", "--field-selector", f"involvedObject.uid={vmi_obj['metadata']['uid']}")
    assert ("Normal", "Stopped", "The VirtualMachineInstance was shut down.") in {
        (e["type"], e["reason"], e["message"]) for e in events["items"]}
    assert error_lines(node_cluster.ok("logs", name, "-c", "compute")) == []


def test_kubectl_delete_shuts_the_guest_down_gracefully_and_leaves_nothing_on_the_node(node_cluster: NodeCluster,
                                                                                       running):
    vmi_obj, pod = running("deleted")
    name = pod["metadata"]["name"]
    containers = node_cluster.containers_of(name)
    assert len(containers) >= 4  # the sandbox, compute, guest-console-log, the containerDisk, init containers
    # what a user watching the VMI sees: its launcher's log, and its console
    logs = node_cluster.follow_logs(name, "compute")
    try:
        with node_cluster.console("deleted") as console:
            start = time.monotonic()
            r = node_cluster.kubectl("delete", "vmi", "deleted", "--wait=false")
            assert r.rc == 0 and r.lines[0].startswith('virtualmachineinstance.kubevirt.io "deleted" deleted'), r.out
            console.wait_for("KCH-GUEST-POWER-BUTTON")  # the ACPI power button: the guest shuts down itself
        node_cluster.wait_for(lambda: node_cluster.kubectl("get", "pod", name).rc != 0, "the launcher pod to go",
                              timeout=KUBEVIRT_GRACE_SECONDS)
        gone = time.monotonic() - start
        assert node_cluster.kubectl("get", "vmi", "deleted").rc != 0
        log = logs.communicate(timeout=30)[0]
    finally:
        if logs.poll() is None:
            logs.kill()
    print(f"\nkubectl delete vmi -> launcher pod gone: {gone:.1f} s")
    messages = [json.loads(line).get("msg", "") for line in log.splitlines() if line.startswith("{")]
    assert any(m.startswith("ShutdownVirtualMachine: ") and "power-button" in m for m in messages), log
    assert "VM is down: Shutdown" in messages, log  # the guest powered off: no kill at the grace period's end
    assert error_lines(log) == []
    # the node: nothing of the pod runs any more, and kubelet's container GC (every minute) removes it
    assert not set(containers) & node_cluster.running_tasks()
    node_cluster.wait_for(lambda: not node_cluster.containers_of(name), "containerd to forget the pod's containers",
                          timeout=90, every=2)
