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


@pytest.fixture
def running(node_cluster: NodeCluster) -> Iterator[Callable[[str], tuple[dict[str, Any], dict[str, Any]]]]:
    """A fresh annotated VMI, Running and Ready, and its launcher pod; deleted afterwards."""
    made: list[str] = []

    def create(name: str, **spec: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """`spec`: more of the VMI's spec (top-level keys), or `devices` merged into its devices."""
        made.append(name)
        vmi = annotated_vmi(name)
        vmi["spec"]["domain"]["devices"].update(spec.pop("devices", {}))
        vmi["spec"].update(spec)
        r = node_cluster.kubectl("create", "-f", "-", input=node_cluster.yaml(vmi))
        assert (r.rc, r.lines) == (0, [f"virtualmachineinstance.kubevirt.io/{name} created"]), r.out
        found = node_cluster.wait_for_vmi(name, ready=True)
        return found, node_cluster.launcher_pod(found)

    yield create
    for name in made:
        node_cluster.kubectl("delete", "vmi", name, "--ignore-not-found", "--wait=false")


def error_lines(log: str) -> list[str]:
    """The launcher's error-level log lines (KubeVirt's JSON lines)."""
    found = []
    for line in log.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("level") == "error":
            found.append(entry["msg"])
    return found


def vmi_events(node_cluster: NodeCluster, vmi: dict[str, Any]) -> set[tuple[str, str, str]]:
    """(type, reason, message) of the events `kubectl get events` shows for `vmi`."""
    events = node_cluster.json("get", "events", "--field-selector", f"involvedObject.uid={vmi['metadata']['uid']}")
    return {(e["type"], e["reason"], e["message"]) for e in events["items"]}


def wait_for_event(node_cluster: NodeCluster, vmi: dict[str, Any], reason: str) -> tuple[str, str, str]:
    def found() -> tuple[str, str, str] | None:
        return next((e for e in vmi_events(node_cluster, vmi) if e[1] == reason), None)
    event: tuple[str, str, str] = node_cluster.wait_for(found, f"a {reason} event of {vmi['metadata']['name']}",
                                                        timeout=60)
    return event


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
    assert wait_for_event(node_cluster, vmi_obj, "Stopped") == ("Normal", "Stopped",
                                                                "The VirtualMachineInstance was shut down.")
    assert error_lines(node_cluster.ok("logs", name, "-c", "compute")) == []


def test_kubectl_delete_shuts_the_guest_down_gracefully_and_leaves_nothing_on_the_node(node_cluster: NodeCluster,
                                                                                       running):
    _vmi, pod = running("deleted")
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
        # the VMI goes once virt-controller has seen its pod go (its finalizer)
        node_cluster.wait_for(lambda: node_cluster.kubectl("get", "vmi", "deleted").rc != 0, "the VMI to go",
                              timeout=60)
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


def test_a_guest_panic_fails_the_vmi_with_kubevirts_guest_panicked_warning(node_cluster: NodeCluster, running):
    """The pvpanic device KubeVirt's `panicDevices` asks for: the guest's panic reaches
    virt-handler as virt-launcher reports one (Crashed/Panicked, a GuestPanicked Warning on the
    VMI), then the VM is destroyed as under libvirt's default on_crash: the VMI ends Failed."""
    vmi_obj, pod = running("panicked", devices={"panicDevices": [{"model": "pvpanic"}]})
    with node_cluster.console("panicked") as console:
        console.type(b"~k")
        console.wait_for("KCH-GUEST-PANIC")
    node_cluster.wait_for_vmi("panicked", "Failed", timeout=60)
    assert wait_for_event(node_cluster, vmi_obj, "GuestPanicked") == (
        "Warning", "GuestPanicked", "GuestPanicked (details unavailable)")
    (row,) = node_cluster.ok("get", "vmi", "panicked").splitlines()[1:]
    assert row.split()[2] == "Failed"
    # what a story that waited in vain for this VMI would have been told
    report = node_cluster.vmi_report("panicked")
    assert "VMI panicked: phase Failed" in report and \
        "event VirtualMachineInstance Warning GuestPanicked: GuestPanicked (details unavailable)" in report, report
    assert error_lines(node_cluster.ok("logs", pod["metadata"]["name"], "-c", "compute")) == []


def test_a_vcpu_failure_fails_the_vmi_with_the_vmms_reason_not_as_a_shutdown(node_cluster: NodeCluster, running):
    """Cloud Hypervisor stops the VM on a KVM internal error as after a poweroff (exit 0): the
    launcher tells them apart, so the VMI ends Failed (not Succeeded) with a VMMCrashed Warning
    naming the vCPU's exit reason."""
    vmi_obj, _pod = running("vcpufail")
    with node_cluster.console("vcpufail") as console:
        console.type(b"~e")
        console.wait_for("KCH-GUEST-EMULATION-FAILURE")
    node_cluster.wait_for_vmi("vcpufail", "Failed", timeout=60)
    kind, _, message = wait_for_event(node_cluster, vmi_obj, "VMMCrashed")
    assert kind == "Warning" and "Unexpected exit reason on vcpu run: InternalError" in message, message
    assert ("Normal", "Stopped", "The VirtualMachineInstance was shut down.") not in vmi_events(node_cluster, vmi_obj)


def test_a_guest_that_ignores_the_power_button_is_stopped_at_the_end_of_its_grace_period(node_cluster: NodeCluster,
                                                                                       running):
    """`kubectl delete vmi` of a guest that ignores ACPI: the power button is pressed, the guest
    carries on, and when the VMI's grace period is over the VM is killed and the pod goes."""
    grace = 5
    _vmi, pod = running("stubborn", terminationGracePeriodSeconds=grace)
    name = pod["metadata"]["name"]
    logs = node_cluster.follow_logs(name, "compute")
    try:
        with node_cluster.console("stubborn") as console:
            console.type(b"~i")
            console.wait_for("KCH-GUEST-IGNORING-ACPI")
            start = time.monotonic()
            r = node_cluster.kubectl("delete", "vmi", "stubborn", "--wait=false")
            assert r.rc == 0, r.out
            console.wait_for("KCH-GUEST-POWER-BUTTON-IGNORED")
        node_cluster.wait_for(lambda: node_cluster.kubectl("get", "pod", name).rc != 0, "the launcher pod to go",
                              timeout=grace + 30)
        gone = time.monotonic() - start
        log = logs.communicate(timeout=30)[0]
    finally:
        if logs.poll() is None:
            logs.kill()
    print(f"\nkubectl delete vmi (guest ignoring ACPI, grace {grace} s) -> launcher pod gone: {gone:.1f} s")
    assert gone >= grace
    messages = [json.loads(line).get("msg", "") for line in log.splitlines() if line.startswith("{")]
    assert "VM is down: Shutdown" not in messages, log  # the guest never powered off
    assert any(m.startswith("KillVirtualMachine") for m in messages), log
    assert error_lines(log) == []


def test_a_vmi_started_paused_runs_once_unpaused(node_cluster: NodeCluster):
    """`startStrategy: Paused`: the VMI is Running with KubeVirt's Paused condition and the guest
    has not run; `virtctl unpause vmi` runs it."""
    vmi = annotated_vmi("startpaused")
    vmi["spec"]["startStrategy"] = "Paused"
    r = node_cluster.kubectl("create", "-f", "-", input=node_cluster.yaml(vmi))
    assert r.rc == 0, r.out
    try:
        def paused() -> dict[str, Any] | None:
            found = node_cluster.json("get", "vmi", "startpaused")
            conditions = {c["type"]: c for c in found.get("status", {}).get("conditions", [])}
            return found if "Paused" in conditions and found["status"].get("phase") == "Running" else None
        found = node_cluster.wait_for(paused, "VMI startpaused to be Running and Paused", timeout=90)
        pod = node_cluster.launcher_pod(found)
        (condition,) = [c for c in found["status"]["conditions"] if c["type"] == "Paused"]
        assert (condition["status"], condition["reason"]) == ("True", "PausedByUser"), condition
        console_log = node_cluster.ok("logs", pod["metadata"]["name"], "-c", "guest-console-log")
        assert "KCH-GUEST-READY" not in console_log, console_log
        r = node_cluster.virtctl("unpause", "vmi", "startpaused")
        assert (r.rc, r.lines) == (0, ["VMI startpaused was scheduled to unpause"]), r.out
        node_cluster.wait_for_vmi("startpaused", ready=True)
        node_cluster.wait_for(lambda: "KCH-GUEST-READY" in node_cluster.ok(
            "logs", pod["metadata"]["name"], "-c", "guest-console-log"), "the guest to boot", timeout=30)
    finally:
        node_cluster.kubectl("delete", "vmi", "startpaused", "--ignore-not-found", "--wait=false")
