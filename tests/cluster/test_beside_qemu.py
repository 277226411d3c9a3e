"""Cloud Hypervisor VMIs beside KubeVirt's own QEMU ones on the same real node: virt-controller's
launcher image is KubeVirt's (`qemu_launcher.py`), so a VMI without the add-on's annotation really
runs on QEMU (virt-launcher-monitor, virt-launcher, libvirtd, QEMU with KVM; SeaBIOS boots the
containerDisk's boot sector), and the add-on must leave it exactly as KubeVirt made it. Each story
has VMIs of its own (`backends.vmi`: the same shape on both backends)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from admission.mutate import OVERHEAD_ANNOTATION, RECORD_ANNOTATION
from admission.overhead import kubevirt_overhead
from ch_launcher.kubevirt.quantity import quantity_bytes
from ch_launcher.kubevirt.vmi import parse_vmi
from tests.cluster.backends import CLOUD_HYPERVISOR, QEMU, SMALL, Shape, backend_of, booted, pod_memory_request, vmi
from tests.cluster.bootdisk import POWER_BUTTON
from tests.cluster.images import LAUNCHER_IMAGE
from tests.cluster.node import NodeCluster, archive_reference
from tests.cluster.objects import CH
from tests.cluster.test_faults import CRASHED, alive, events_once, restart_virt_handler_and_use_each
from tests.cluster.test_vm_story import NAME as README_VM
from tests.cluster.test_vm_story import readme_check as readme_vm_check

MiB = 1 << 20
POWERED_OFF = {QEMU: POWER_BUTTON, CLOUD_HYPERVISOR: "KCH-GUEST-POWER-BUTTON"}
VMM = {QEMU: "qemu-system-x86", CLOUD_HYPERVISOR: "cloud-hyperviso"}  # comm: 15 characters
QEMU_PROCESSES = {"virt-launcher-m", "virt-launcher", "libvirtd", "virtlogd", VMM[QEMU]}
KUBEVIRT_GRACE_SECONDS = 30  # v1.DefaultGracePeriodSeconds
_pairs = itertools.count(1)


def readme_check(name: str) -> list[str]:
    """README "Use": the command that prints the ch-launcher image of a Cloud Hypervisor VMI, for VMI `name`."""
    return [name if arg == README_VM else arg for arg in readme_vm_check()]


def gone(cluster: NodeCluster, pod: str, timeout: float) -> None:
    cluster.wait_for(lambda: cluster.kubectl("get", "pod", pod).rc != 0, f"{pod} to go", timeout=timeout)


def ended_pod(cluster: NodeCluster, pod: str) -> dict[str, Any]:
    """Pod `pod` once its phase is Failed."""
    def failed() -> dict[str, Any] | None:
        found: dict[str, Any] = cluster.json("get", "pod", pod)
        return found if found["status"]["phase"] == "Failed" else None
    ended: dict[str, Any] = cluster.wait_for(failed, f"{pod} to end", timeout=60)
    return ended


@pytest.fixture
def side_by_side(node_cluster: NodeCluster) -> Iterator[dict[str, str]]:
    """Names for one VMI of each backend, deleted afterwards; the story creates them."""
    n = next(_pairs)
    names = {CLOUD_HYPERVISOR: f"bq{n}-ch", QEMU: f"bq{n}-qemu"}
    yield names
    node_cluster.kubectl("delete", "vmi", *names.values(), "--ignore-not-found", "--wait=false")


def create_both(cluster: NodeCluster, names: dict[str, str],
                shape: Shape = SMALL) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """One VMI of each backend in one `kubectl create`; each Running and Ready, with its launcher pod."""
    r = cluster.kubectl("create", "-f", "-", input=cluster.yaml([vmi(n, b, shape) for b, n in names.items()]))
    assert r.rc == 0, r.out
    found = {b: cluster.wait_for_vmi(n, ready=True) for b, n in names.items()}
    return {b: (v, cluster.launcher_pod(v)) for b, v in found.items()}


def test_a_vmi_without_the_annotation_runs_on_qemu_beside_cloud_hypervisor_in_the_pod_kubevirt_made(
        node_cluster: NodeCluster, side_by_side: dict[str, str]) -> None:
    """With a masquerade NIC each (e1000e for QEMU: no /dev/vhost-net here)."""
    both = create_both(node_cluster, side_by_side, Shape(nic=True))
    (qemu_vmi, qemu_pod), (_, ch_pod) = both[QEMU], both[CLOUD_HYPERVISOR]

    # QEMU runs under KubeVirt's own processes ...
    assert set(node_cluster.processes(qemu_pod)) == QEMU_PROCESSES
    # ... in the pod virt-controller rendered: KubeVirt's image and command, its memory, nothing of the add-on
    compute = next(c for c in qemu_pod["spec"]["containers"] if c["name"] == "compute")
    status = next(s for s in qemu_pod["status"]["containerStatuses"] if s["name"] == "compute")
    assert node_cluster.images is not None
    assert compute["image"] == node_cluster.launcher_image()
    assert compute["command"][0] == "/usr/bin/virt-launcher-monitor"
    assert status["imageID"] == archive_reference(node_cluster.images.virt_launcher)
    annotations = qemu_pod["metadata"]["annotations"]
    assert RECORD_ANNOTATION not in annotations and not set(CH) & set(annotations)
    overhead = int(annotations[OVERHEAD_ANNOTATION])
    assert overhead == kubevirt_overhead(parse_vmi(qemu_vmi)).total  # the calculator's KubeVirt formula, as it ran
    assert quantity_bytes(compute["resources"]["requests"]["memory"]) == 128 * MiB + overhead
    assert not any(key.startswith("kubevirt-ch.io/") for key in qemu_vmi["metadata"].get("annotations", {}))
    assert qemu_vmi["status"]["launcherContainerImageVersion"] == node_cluster.launcher_image()
    assert node_cluster.kubectl(*readme_check(side_by_side[QEMU])).out == ""

    # the Cloud Hypervisor VMI beside it runs in the add-on's launcher, sized by the add-on
    assert set(node_cluster.processes(ch_pod)) == {"ch-launcher", VMM[CLOUD_HYPERVISOR]}
    assert backend_of(ch_pod) == CLOUD_HYPERVISOR and RECORD_ANNOTATION in ch_pod["metadata"]["annotations"]
    assert node_cluster.kubectl(*readme_check(side_by_side[CLOUD_HYPERVISOR])).out == LAUNCHER_IMAGE
    print(f"\nlauncher pods' memory requests, 128Mi guest: Cloud Hypervisor "
          f"{pod_memory_request(ch_pod) / MiB:.1f} MiB, QEMU {pod_memory_request(qemu_pod) / MiB:.1f} MiB")

    # both guests boot: SeaBIOS boots the containerDisk's boot sector on QEMU, the tiny guest runs on CH
    for _, pod in both.values():
        assert booted(node_cluster, pod) == 1

    # `kubectl delete` of both: each guest powers off on the ACPI button, each pod goes
    consoles = {b: node_cluster.follow_logs(p["metadata"]["name"], "guest-console-log") for b, (_, p) in both.items()}
    try:
        r = node_cluster.kubectl("delete", "vmi", *side_by_side.values(), "--wait=false")
        assert r.rc == 0, r.out
        for _, pod in both.values():
            gone(node_cluster, pod["metadata"]["name"], timeout=KUBEVIRT_GRACE_SECONDS + 30)
        printed = {b: console.communicate(timeout=30)[0] for b, console in consoles.items()}
    finally:
        for console in consoles.values():
            if console.poll() is None:
                console.kill()
    for backend, text in printed.items():
        assert POWERED_OFF[backend] in text, (backend, text)


def test_a_vm_moves_from_qemu_to_cloud_hypervisor_and_back_by_its_template_and_a_restart(
        node_cluster: NodeCluster) -> None:
    """The README's "to move a VM between backends, change its template and restart it", both ways,
    with a VM of no NIC (the one shape that runs on both here without a change). Each VMI is seen
    running by its VMM process in the new pod (the guests' boots: the stories above and below); a
    grace period of 0 stops each at once, as the README's own VM asks, whether its guest is up yet
    or not (SeaBIOS runs emulated here, for tens of seconds under load)."""
    name = "bq-mover"
    template = vmi(name, QEMU)
    template["spec"]["terminationGracePeriodSeconds"] = 0
    vm = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": name},
          "spec": {"runStrategy": "Always", "template": {"metadata": {}, "spec": template["spec"]}}}
    r = node_cluster.kubectl("create", "-f", "-", input=node_cluster.yaml(vm))
    assert r.rc == 0, r.out
    try:
        current = node_cluster.wait_for_vmi(name, ready=True)
        assert VMM[QEMU] in node_cluster.processes(node_cluster.launcher_pod(current))
        annotation = "/spec/template/metadata/annotations"
        moves = ((CLOUD_HYPERVISOR, [{"op": "add", "path": annotation, "value": CH}]),
                 (QEMU, [{"op": "remove", "path": annotation}]))
        for backend, patch in moves:
            r = node_cluster.kubectl("patch", "vm", name, "--type=json", "-p", json.dumps(patch))
            assert (r.rc, r.lines) == (0, [f"virtualmachine.kubevirt.io/{name} patched"]), r.out
            before = current["metadata"]["uid"]
            r = node_cluster.virtctl("restart", name)
            assert (r.rc, r.lines) == (0, [f"VM {name} was scheduled to restart"]), r.out

            def restarted(old: str = before) -> dict[str, Any] | None:
                found = node_cluster.wait_for_vmi(name, ready=True, timeout=90)
                return found if found["metadata"]["uid"] != old else None
            current = node_cluster.wait_for(restarted, f"{name} to run again", timeout=120)
            pod = node_cluster.launcher_pod(current)  # one pod: the old one is gone
            assert backend_of(pod) == backend and VMM[backend] in node_cluster.processes(pod), (backend, pod["spec"])
            check = node_cluster.kubectl(*readme_check(name)).out
            assert check == (LAUNCHER_IMAGE if backend == CLOUD_HYPERVISOR else ""), (backend, check)
        (row,) = node_cluster.ok("get", "vm", name).splitlines()[1:]
        assert row.split()[2:4] == ["Running", "True"], row
    finally:
        node_cluster.kubectl("delete", "vm", name, "--ignore-not-found", "--wait=false")


def test_a_qemu_vmi_and_a_cloud_hypervisor_vmi_both_run_on_through_virt_handler_restarting(
        node_cluster: NodeCluster, side_by_side: dict[str, str]) -> None:
    both = create_both(node_cluster, side_by_side)  # the guests boot meanwhile (one boot each, below)
    # through the new virt-handler, to libvirt and to ch-launcher
    watch = restart_virt_handler_and_use_each(node_cluster, list(side_by_side.values()))
    for backend, (before, pod) in both.items():
        name = side_by_side[backend]
        assert set(watch.seen(key=name)) == {"Running"}, watch.rows
        after = node_cluster.wait_for_vmi(name, ready=True)
        assert after["metadata"]["uid"] == before["metadata"]["uid"]
        assert node_cluster.launcher_pod(after)["metadata"]["name"] == pod["metadata"]["name"]
        assert booted(node_cluster, pod) == 1


def test_a_killed_virt_launcher_and_a_killed_ch_launcher_fail_their_vmis_alike(
        node_cluster: NodeCluster, side_by_side: dict[str, str]) -> None:
    """SIGKILL of the launcher process of each backend, one right after the other. Each pod keeps
    its monitor, the compute container's first process, which stops the VMM: ch-launcher's at
    once, and the container exits with the launcher's status (137); virt-launcher-monitor stops
    QEMU and exits (255, once 1). ch-launcher's monitor also hands virt-handler the launcher's epitaph (the
    Domain Shutoff/Crashed), so its VMI fails at once; virt-handler learns of QEMU's only from its
    watchdog, when the launcher's command socket has refused connections for 30 s
    (`--watchdog-timeout`, checked every 11 s: `pkg/virt-handler/cache/domain-watcher.go`;
    KubeVirt's own path for a crashed virt-launcher). Both fail as crashed. The times are printed
    (bench/cluster.py measures them over rounds)."""
    both = create_both(node_cluster, side_by_side)
    (_, qemu_pod), (_, ch_pod) = both[QEMU], both[CLOUD_HYPERVISOR]
    qemu_processes, ch_processes = node_cluster.processes(qemu_pod), node_cluster.processes(ch_pod)
    (vmm,), (qemu,) = ch_processes[VMM[CLOUD_HYPERVISOR]], qemu_processes[VMM[QEMU]]
    watch = node_cluster.watch("vmi")  # all of them: kubectl watches one name at most
    try:
        os.kill(node_cluster.ch_launcher(ch_pod), signal.SIGKILL)
        killed = {CLOUD_HYPERVISOR: time.monotonic()}
        os.kill(qemu_processes["virt-launcher"][0], signal.SIGKILL)
        killed[QEMU] = time.monotonic()
        node_cluster.wait_for(lambda: not alive(vmm), "cloud-hypervisor to end with its launcher", timeout=5,
                              every=0.05)
        vmm_gone = time.monotonic() - killed[CLOUD_HYPERVISOR]
        node_cluster.wait_for(lambda: not alive(qemu), "virt-launcher-monitor to stop QEMU", timeout=30)
        node_cluster.wait_for(lambda: set(side_by_side.values()) <= set(watch.first("Failed")), "both VMIs to fail",
                              timeout=120, every=0.5)
        failed = {b: watch.first("Failed")[side_by_side[b]] - killed[b] for b in killed}
    finally:
        watch.close()
    print(f"\nSIGKILL -> VMI Failed: ch-launcher (Cloud Hypervisor) {failed[CLOUD_HYPERVISOR]:.1f} s (its VMM gone "
          f"{vmm_gone:.2f} s), virt-launcher (QEMU) {failed[QEMU]:.1f} s")
    # ch-launcher's monitor exits with the launcher's status (killed: 137); virt-launcher-monitor
    # exits on its own, 255 (its child's -1 status) in most runs, 1 in one run at load 33
    exit_codes = {CLOUD_HYPERVISOR: {128 + signal.SIGKILL}, QEMU: {1, 255}}
    for backend, expected in exit_codes.items():
        vmi_obj, pod = both[backend]
        assert CRASHED in events_once(node_cluster, vmi_obj["metadata"]["uid"], "Stopped"), backend
        ended = ended_pod(node_cluster, pod["metadata"]["name"])
        compute = next(s for s in ended["status"]["containerStatuses"] if s["name"] == "compute")
        assert compute["state"]["terminated"]["exitCode"] in expected, (backend, compute)
        assert not set(node_cluster.containers_of(pod["metadata"]["name"])) & node_cluster.running_tasks()
