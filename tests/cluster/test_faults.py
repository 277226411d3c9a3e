"""The machinery around a Cloud Hypervisor VM failing on a real node, as a user of a
virtualization platform checks before trusting it: what `kubectl get vmi`, the events, `virtctl`
and the guest's serial log (how many times it booted) show. Each story has VMIs of its own.

The node's components run under a keeper that starts them again 1 s after they exit
(`../shared/k8s/node-kill.sh`), as systemd and the DaemonSet controller do. A story that takes
something of the shared cluster away (the add-on's server) puts it back before it ends, and waits
until it is back."""

from __future__ import annotations

import datetime
import json
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.apiserver.cluster import ClusterError
from tests.cluster.images import LAUNCHER_IMAGE
from tests.cluster.node import NodeCluster, parent_pid
from tests.cluster.objects import annotated_vm, annotated_vmi
from tests.cluster.watch import Watch

MiB = 1 << 20
CRASHED = ("Warning", "Stopped", "The VirtualMachineInstance crashed.")  # virt-handler's words for a crashed domain


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def ready(vmi: dict[str, Any]) -> bool:
    return conditions(vmi).get("Ready") == "True" and vmi.get("status", {}).get("phase") == "Running"


def vm_row(cluster: NodeCluster, name: str) -> list[str]:
    """`kubectl get vm NAME`'s row, split into its columns."""
    (row,) = cluster.ok("get", "vm", name).splitlines()[1:]
    return row.split()


def conditions(vmi: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in vmi.get("status", {}).get("conditions", [])}


def events_of(cluster: NodeCluster, uid: str) -> set[tuple[str, str, str]]:
    found = cluster.json("get", "events", "--field-selector", f"involvedObject.uid={uid}")["items"]
    return {(e["type"], e["reason"], e["message"]) for e in found}


def events_once(cluster: NodeCluster, uid: str, *reasons: str) -> set[tuple[str, str, str]]:
    """The object's events once there is one of each of `reasons` (a component records its events
    apart from, and after, the status it writes)."""
    def recorded() -> set[tuple[str, str, str]] | None:
        events = events_of(cluster, uid)
        return events if set(reasons) <= {reason for _, reason, _ in events} else None
    found: set[tuple[str, str, str]] = cluster.wait_for(recorded, f"events {', '.join(reasons)}", timeout=60,
                                                         every=0.5)
    return found


@pytest.fixture
def fresh(node_cluster: NodeCluster) -> Iterator[Callable[..., list[tuple[dict[str, Any], dict[str, Any]]]]]:
    """Creates annotated VMIs at once and returns each, Running and Ready, with its launcher pod;
    deletes them afterwards."""
    made: list[str] = []

    def create(*names: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        made.extend(names)
        r = node_cluster.kubectl("create", "-f", "-", input=node_cluster.yaml([annotated_vmi(n) for n in names]))
        assert r.rc == 0, r.out
        found = [node_cluster.wait_for_vmi(n, ready=True) for n in names]
        return [(vmi, node_cluster.launcher_pod(vmi)) for vmi in found]

    yield create
    if made:
        node_cluster.kubectl("delete", "vmi", *made, "--ignore-not-found", "--wait=false")


def pause_and_unpause(cluster: NodeCluster, name: str) -> None:
    r = cluster.virtctl("pause", "vmi", name)
    assert (r.rc, r.lines) == (0, [f"VMI {name} was scheduled to pause"]), r.out
    def paused() -> bool:  # virt-handler writes Paused and Ready in two updates
        found = conditions(cluster.json("get", "vmi", name))
        return found.get("Paused") == "True" and found.get("Ready") == "False"
    cluster.wait_for(paused, f"{name} to be paused")
    r = cluster.virtctl("unpause", "vmi", name)
    assert (r.rc, r.lines) == (0, [f"VMI {name} was scheduled to unpause"]), r.out

    def unpaused() -> bool:
        found = conditions(cluster.json("get", "vmi", name))
        return "Paused" not in found and found.get("Ready") == "True"
    cluster.wait_for(unpaused, f"{name} to be unpaused")


def restart_virt_handler_and_use_each(cluster: NodeCluster, names: Sequence[str]) -> Watch:
    """Kill virt-handler; once the new one has found each VMI's domain (it dialled the launcher's
    socket and read it), pause and unpause each through it. The watch of every VMI's phase
    meanwhile, closed."""
    offset = len(cluster.node_log("virt-handler"))
    watch = cluster.watch("vmi")  # all of them: kubectl watches one name at most
    try:
        print("\n" + cluster.kill("virt-handler"))

        def found_again() -> bool:
            log = cluster.node_log("virt-handler")[offset:]
            return all(f'"msg":"VMI is in phase: Running | Domain status: Running, reason: Unknown","name":"{n}"'
                       in log for n in names)
        cluster.wait_for(found_again, "the new virt-handler to find every domain", timeout=60)
        for name in names:
            pause_and_unpause(cluster, name)
    finally:
        watch.close()
    return watch


def test_virt_handler_restarting_finds_both_launchers_again_and_the_guests_run_on(node_cluster: NodeCluster, fresh):
    names = ("f-handler-a", "f-handler-b")
    before = fresh(*names)
    watch = restart_virt_handler_and_use_each(node_cluster, names)
    for name, (vmi, pod) in zip(names, before, strict=True):
        assert set(watch.seen(key=name)) == {"Running"}, watch.rows
        after = node_cluster.wait_for_vmi(name, ready=True)
        assert after["metadata"]["uid"] == vmi["metadata"]["uid"]
        assert node_cluster.launcher_pod(after)["metadata"]["name"] == pod["metadata"]["name"]
        assert node_cluster.boots(pod) == 1


def test_kubelet_and_containerd_restarting_leave_the_vmi_running(node_cluster: NodeCluster, fresh):
    ((vmi, pod),) = fresh("f-kubelet")
    name = pod["metadata"]["name"]
    statuses = {s["name"]: s["containerID"] for s in pod["status"]["containerStatuses"]}
    vmi_watch, pod_watch = node_cluster.watch("vmi", "f-kubelet"), node_cluster.watch("pod", name)
    try:
        start = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        print("\n" + node_cluster.kill("containerd") + "\n" + node_cluster.kill("kubelet"))

        def heartbeat_after_restart() -> bool:  # the new kubelet reports the node
            node = node_cluster.json("get", "node", "node01")
            ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
            beat = datetime.datetime.fromisoformat(ready["lastHeartbeatTime"])
            return ready["status"] == "True" and beat > start
        node_cluster.wait_for(heartbeat_after_restart, "the new kubelet's heartbeat", timeout=60)
        with node_cluster.console("f-kubelet") as console:
            console.type(b"~h")
            console.wait_for("KCH-GUEST-HELLO")
        pause_and_unpause(node_cluster, "f-kubelet")
    finally:
        vmi_watch.close()
        pod_watch.close()
    assert set(vmi_watch.seen()) == {"Running"}, vmi_watch.rows
    assert set(pod_watch.seen()) == {"Running"}, pod_watch.rows
    def reported_ready() -> dict[str, Any] | None:  # by the new kubelet, once it has synced the pod
        pod_now: dict[str, Any] = node_cluster.json("get", "pod", name)
        return pod_now if all(s["ready"] for s in pod_now["status"]["containerStatuses"]) else None
    now = node_cluster.wait_for(reported_ready, "the new kubelet to report the pod ready", timeout=60)
    assert {s["name"]: s["containerID"] for s in now["status"]["containerStatuses"]} == statuses
    assert all(s["restartCount"] == 0 and s["ready"] for s in now["status"]["containerStatuses"])
    ids = {cid.split("://", 1)[1] for cid in statuses.values()}
    assert ids <= node_cluster.running_tasks()  # containerd found its shims again
    assert node_cluster.wait_for_vmi("f-kubelet", ready=True)["metadata"]["uid"] == vmi["metadata"]["uid"]
    assert node_cluster.boots(pod) == 1


def test_a_killed_cloud_hypervisor_fails_the_vmi_and_its_vm_starts_a_new_one(node_cluster: NodeCluster):
    name = "f-vmm-crash"
    r = node_cluster.kubectl("create", "-f", "-", input=node_cluster.yaml(annotated_vm(name)))
    assert r.rc == 0, r.out
    try:
        first = node_cluster.wait_for_vmi(name, ready=True)
        uid = first["metadata"]["uid"]
        pod = node_cluster.launcher_pod(first)
        (vmm,) = node_cluster.processes(pod)["cloud-hyperviso"]
        watch = node_cluster.watch("vmi", name, columns="UID:.metadata.uid,PHASE:.status.phase")
        try:
            os.kill(vmm, signal.SIGKILL)
            killed = time.monotonic()
            node_cluster.wait_for(lambda: "Failed" in watch.seen(key=uid), "the VMI to fail", timeout=60)
            failed = time.monotonic() - killed

            def replaced() -> dict[str, Any] | None:
                r = node_cluster.kubectl("get", "vmi", name, "-o", "json")
                vmi = json.loads(r.out) if r.rc == 0 else None
                return vmi if vmi is not None and vmi["metadata"]["uid"] != uid and ready(vmi) else None
            second = node_cluster.wait_for(replaced, "the VM to run a new VMI", timeout=180, every=0.5)
            running_again = time.monotonic() - killed
        finally:
            watch.close()
        print(f"\ncloud-hypervisor SIGKILLed -> VMI Failed {failed:.1f} s, new VMI Ready {running_again:.1f} s")
        events = events_once(node_cluster, uid, "Stopped", "VMMCrashed")
        assert CRASHED in events, events
        crash = f"cloud-hypervisor (pid {vmm_pid_in_pod(events)}) was killed by SIGKILL while the VM was running"
        assert ("Warning", "VMMCrashed", crash) in events, events
        assert node_cluster.boots(node_cluster.launcher_pod(second)) == 1
        # the failed VMI's pod ends and goes, and containerd's garbage collection forgets it
        gone = pod["metadata"]["name"]
        node_cluster.wait_for(lambda: node_cluster.kubectl("get", "pod", gone).rc != 0, "the old pod to go", timeout=60)
        node_cluster.wait_for(lambda: not node_cluster.containers_of(gone), "containerd to forget the old pod",
                              timeout=90, every=2)
        # the VM's status follows its new VMI (virt-controller writes it after the VMI's)
        node_cluster.wait_for(lambda: vm_row(node_cluster, name)[2:4] == ["Running", "True"],
                              "the VM to show Running and Ready", timeout=60)
    finally:
        node_cluster.kubectl("delete", "vm", name, "--ignore-not-found", "--wait=false")


def vmm_pid_in_pod(events: set[tuple[str, str, str]]) -> str:
    """The VMM's PID in the pod's PID namespace, as the launcher's VMMCrashed event names it."""
    (message,) = [m for _, reason, m in events if reason == "VMMCrashed"]
    return message.split("(pid ", 1)[1].split(")", 1)[0]


def test_a_killed_launcher_takes_its_vmm_with_it_and_the_vmi_fails_at_once(node_cluster: NodeCluster, fresh):
    """The compute container's first process is the launcher's monitor, as virt-launcher-monitor is
    virt-launcher's: when the launcher dies it stops the VMM, tells virt-handler the VM is gone
    (the launcher's epitaph: Shutoff/Crashed) and ends with the launcher's status, taking the
    containerDisk containers with it (their sockets removed), so kubelet, virt-handler and
    virt-controller all see it at once. (Without the monitor virt-handler learnt it only when its
    watchdog gave up on the launcher's socket: 39.7 s.)"""
    ((vmi, pod),) = fresh("f-launcher-kill")
    uid, name = vmi["metadata"]["uid"], pod["metadata"]["name"]
    processes = node_cluster.processes(pod)
    (vmm,) = processes["cloud-hyperviso"]
    launcher = node_cluster.ch_launcher(pod)
    (monitor,) = set(processes["ch-launcher"]) - {launcher}
    assert (parent_pid(launcher), parent_pid(vmm)) == (monitor, launcher)
    watch = node_cluster.watch("vmi", "f-launcher-kill", columns="UID:.metadata.uid,PHASE:.status.phase")
    pod_watch = node_cluster.watch("pod", name, columns="NAME:.metadata.name,PHASE:.status.phase")
    try:
        os.kill(launcher, signal.SIGKILL)
        killed = time.monotonic()
        node_cluster.wait_for(lambda: not alive(vmm), "the VMM to end with its launcher", timeout=5, every=0.05)
        vmm_gone = time.monotonic() - killed
        node_cluster.wait_for(lambda: "Failed" in watch.seen(key=uid), "the VMI to fail", timeout=60, every=0.1)
        failed = watch.first("Failed")[uid] - killed
        node_cluster.wait_for(lambda: "Failed" in pod_watch.seen(key=name), "the launcher pod to end", timeout=60)
        pod_failed = pod_watch.first("Failed")[name] - killed
    finally:
        watch.close()
        pod_watch.close()
    print(f"\nch-launcher SIGKILLed -> VMM gone {vmm_gone:.2f} s, VMI Failed {failed:.1f} s, "
          f"pod Failed {pod_failed:.1f} s")
    compute = next(s for s in node_cluster.json("get", "pod", name)["status"]["containerStatuses"]
                   if s["name"] == "compute")
    assert compute["state"]["terminated"]["exitCode"] == 128 + signal.SIGKILL
    try:
        events = events_once(node_cluster, uid, "Stopped", "LauncherCrashed")
    except ClusterError as e:
        log = node_cluster.kubectl("logs", name, "-c", "compute").out[-4000:]
        raise AssertionError(f"{e}: {events_of(node_cluster, uid)}\nthe compute container's log:\n{log}") from None
    said = (f"ch-launcher (pid {launcher_pid_in_pod(events)}) was killed by signal 9 while the VM was running; "
            "the VM is gone")
    assert CRASHED in events and ("Warning", "LauncherCrashed", said) in events, events
    assert not set(node_cluster.containers_of(name)) & node_cluster.running_tasks()


def launcher_pid_in_pod(events: set[tuple[str, str, str]]) -> str:
    """The launcher's PID in the pod's PID namespace, as its LauncherCrashed event names it."""
    (message,) = [m for _, reason, m in events if reason == "LauncherCrashed"]
    return message.split("(pid ", 1)[1].split(")", 1)[0]


WEBHOOK_DOWN = ('Error from server (InternalError): error when creating "STDIN": Internal error occurred: failed '
                'calling webhook "virtualmachineinstances.validator.kubevirt-ch.io": failed to call webhook: Post '
                '"https://ch-admission.kubevirt-ch.svc:443/validate?timeout=5s": no endpoints available for service '
                '"ch-admission"')


ADMISSION = ("-n", "kubevirt-ch")
ADMISSION_PODS = ("get", "pods", *ADMISSION, "-l", "app.kubernetes.io/name=ch-admission")


def admission_endpoints(cluster: NodeCluster) -> set[str]:
    """The pods the add-on's Service sends requests to: the ready endpoints of its EndpointSlices
    (what the API server dials for the webhooks), by pod name."""
    slices = cluster.json("get", "endpointslices", *ADMISSION, "-l", "kubernetes.io/service-name=ch-admission")
    return {e.get("targetRef", {}).get("name", "") for s in slices["items"] for e in s.get("endpoints") or []
            if e.get("conditions", {}).get("ready")}


def admission_pods(cluster: NodeCluster) -> dict[str, dict[str, Any]]:
    """The add-on's server pods, by name (terminating ones too)."""
    return {p["metadata"]["name"]: p for p in cluster.json(*ADMISSION_PODS)["items"]}


def serving(pod: dict[str, Any]) -> bool:
    """Not being deleted, and ready (its readiness probe passed)."""
    return not pod["metadata"].get("deletionTimestamp") and any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def wait_for_admission(cluster: NodeCluster, replicas: int, timeout: float = 180) -> None:
    """Until the webhooks' callers see `replicas` pods of the add-on's server: that many pods,
    none terminating, all ready and all behind the Service (0: no pod and no endpoint left)."""
    def settled() -> bool:
        pods = admission_pods(cluster)
        ready = {name for name, pod in pods.items() if serving(pod)}
        return len(pods) == len(ready) == replicas and admission_endpoints(cluster) == ready
    cluster.wait_for(settled, f"{replicas} ready pods of the add-on's server behind its Service", timeout=timeout,
                     every=0.5)


def scale_admission(cluster: NodeCluster, replicas: int) -> None:
    """Scale the add-on's Deployment and wait for what the webhooks' callers see
    (`wait_for_admission`: a rollout that Kubernetes reports done may not be in the Service's
    endpoints yet, and pods that are gone may still be)."""
    cluster.ok(*ADMISSION, "scale", "deployment/ch-admission", f"--replicas={replicas}")
    wait_for_admission(cluster, replicas)


def test_with_the_admission_server_down_annotated_vmis_are_refused_and_running_ones_carry_on(
        node_cluster: NodeCluster):
    r = node_cluster.kubectl("create", "-f", "-", input=node_cluster.yaml(annotated_vm("f-down")))
    assert r.rc == 0, r.out
    plain = annotated_vmi("f-down-plain")
    del plain["metadata"]["annotations"]
    try:
        running = node_cluster.wait_for_vmi("f-down", ready=True)
        scale_admission(node_cluster, 0)
        try:
            refused = node_cluster.kubectl("create", "-f", "-",
                                           input=node_cluster.yaml(annotated_vmi("f-down-refused")))
            assert (refused.rc, refused.lines) == (1, [WEBHOOK_DOWN])
            assert node_cluster.kubectl("get", "vmi", "f-down-refused").rc == 1
            r = node_cluster.kubectl("create", "-f", "-", input=node_cluster.yaml(plain))
            assert (r.rc, r.lines) == (0, ["virtualmachineinstance.kubevirt.io/f-down-plain created"]), r.out
            # the running VM carries on (its guest answers), and stops as usual
            assert node_cluster.wait_for_vmi("f-down", ready=True)["metadata"]["uid"] == running["metadata"]["uid"]
            with node_cluster.console("f-down") as console:
                console.type(b"~h")
                console.wait_for("KCH-GUEST-HELLO")
            r = node_cluster.virtctl("stop", "f-down")
            assert (r.rc, r.lines) == (0, ["VM f-down was scheduled to stop"]), r.out
            node_cluster.wait_for(lambda: node_cluster.kubectl("get", "vmi", "f-down").rc != 0, "the VMI to go",
                                  timeout=90)
        finally:
            scale_admission(node_cluster, 2)
        r = node_cluster.kubectl("create", "-f", "-", input=node_cluster.yaml(annotated_vmi("f-down-refused")))
        assert (r.rc, r.lines) == (0, ["virtualmachineinstance.kubevirt.io/f-down-refused created"]), r.out
        vmi = node_cluster.wait_for_vmi("f-down-refused", ready=True)
        compute = next(c for c in node_cluster.launcher_pod(vmi)["spec"]["containers"] if c["name"] == "compute")
        assert compute["image"] == LAUNCHER_IMAGE
    finally:
        node_cluster.kubectl("delete", "vm", "f-down", "--ignore-not-found", "--wait=false")
        node_cluster.kubectl("delete", "vmi", "f-down-refused", "f-down-plain", "--ignore-not-found", "--wait=false")


def test_a_rollout_restart_of_the_admission_server_refuses_and_misses_nothing(node_cluster: NodeCluster):
    """A loop creates annotated VMIs, one after the other, while the Deployment replaces both
    replicas (maxUnavailable 0, readiness probes), until the Service sends requests only to the
    two new pods and no old pod is left: every create is admitted and every launcher pod is
    mutated. The VMIs are pinned to a node that does not exist, so that they cost no CPU while the
    new replicas start: the webhooks act at creation, not at scheduling. The rollout's end is read
    from the pods and the Service's endpoints, not the Deployment's counters (under load the
    Deployment reported two available while an old pod was not yet terminating)."""
    old = set(admission_pods(node_cluster))
    created: list[str] = []
    refused: list[str] = []
    during = 0

    def replaced() -> bool:
        pods = admission_pods(node_cluster)
        ready = {name for name, pod in pods.items() if serving(pod)}
        return not set(pods) & old and len(ready) == len(pods) == 2 and admission_endpoints(node_cluster) == ready
    try:
        node_cluster.ok(*ADMISSION, "rollout", "restart", "deployment/ch-admission")
        start = time.monotonic()
        while True:
            name = f"f-roll-{len(created) + len(refused)}"
            vmi = annotated_vmi(name)
            vmi["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "nowhere"}
            r = node_cluster.kubectl("create", "-f", "-", input=node_cluster.yaml(vmi))
            (created if r.rc == 0 else refused).append(name if r.rc == 0 else r.out)
            if replaced():
                break
            during += 1
            assert time.monotonic() - start < 300 and len(created) + len(refused) < 200, \
                f"the rollout did not end: {admission_pods(node_cluster).keys()}, {admission_endpoints(node_cluster)}"
        rollout = time.monotonic() - start
        assert refused == []

        def pods_mutated() -> bool:
            pods = node_cluster.json("get", "pods", "-l", "kubevirt.io=virt-launcher")["items"]
            mine = {p["metadata"]["labels"].get("vmi.kubevirt.io/id"): p for p in pods}
            return all(n in mine for n in created)
        node_cluster.wait_for(pods_mutated, "a launcher pod for every VMI", timeout=120)
        pods = node_cluster.json("get", "pods", "-l", "kubevirt.io=virt-launcher")["items"]
        images = {p["metadata"]["labels"].get("vmi.kubevirt.io/id"):
                  next(c["image"] for c in p["spec"]["containers"] if c["name"] == "compute") for p in pods}
        assert {n: images[n] for n in created} == dict.fromkeys(created, LAUNCHER_IMAGE)
        failures = [e["message"] for e in node_cluster.json("get", "events")["items"]
                    if e["reason"] == "FailedCreate" and e["involvedObject"]["name"] in created]
        assert failures == []
        print(f"\nrollout restart of ch-admission: {rollout:.1f} s, {during} annotated VMIs created during it "
              f"({len(created)} in all), none refused, every launcher pod mutated")
        assert during >= 3
    finally:
        if created:
            node_cluster.kubectl("delete", "vmi", *created, "--ignore-not-found", "--wait=false")
        wait_for_admission(node_cluster, 2, timeout=240)


def rss(pid: int) -> int:
    """Resident memory of process `pid`, in bytes (/proc/PID/status VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def serial_log_files(cluster: NodeCluster, vmi: dict[str, Any], pod: dict[str, Any]) -> list[Path]:
    """The serial log and its rotated backups in the pod's `private` emptyDir, on the node."""
    private = (cluster.node_dir / "kubelet" / "pods" / pod["metadata"]["uid"] / "volumes" / "kubernetes.io~empty-dir"
               / "private" / vmi["metadata"]["uid"])
    return sorted(private.glob("virt-serial0-log*"))


def test_a_guest_flooding_its_console_leaves_the_launchers_memory_flat_and_the_console_answering(
        node_cluster: NodeCluster, fresh):
    """The tiny guest prints 80-byte lines without pause (`~f`), as fast as its port writes go
    (each byte is a port write the VMM handles: 9-31 KiB/s measured on this PVM machine). The
    launcher relays them to the serial log and to the console client; its memory stays where it
    was, with a client attached and without, and `virtctl console` connects in the middle of the
    flood and stops it. (The log's rotation at 2 MiB: tests/functional/test_console.py.)"""
    ((vmi, pod),) = fresh("f-flood")
    launcher = node_cluster.ch_launcher(pod)
    samples: list[int] = []

    def sample_for(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            samples.append(rss(launcher))
            time.sleep(1)

    with node_cluster.console("f-flood") as console:
        console.type(b"~f")
        console.wait_for("KCH-GUEST-FLOODING")
        start, logged = time.monotonic(), sum(f.stat().st_size for f in serial_log_files(node_cluster, vmi, pod))
        sample_for(12)  # a client attached
    sample_for(6)  # nobody attached: the log alone
    with node_cluster.console("f-flood") as console:
        flooding = console.wait_for("KCH-GUEST-FLOOD 0123", count=20, timeout=30)
        assert "KCH-GUEST-FLOOD-STOPPED" not in flooding
        console.type(b"~f")
        # the guest reads its input between two lines: under load (33) a line took seconds
        console.wait_for("KCH-GUEST-FLOOD-STOPPED", timeout=90)
        elapsed = time.monotonic() - start
        console.type(b"~h")
        console.wait_for("KCH-GUEST-HELLO")
    rate = (sum(f.stat().st_size for f in serial_log_files(node_cluster, vmi, pod)) - logged) / elapsed
    print(f"\nconsole flood: {rate / 1024:.1f} KiB/s for {elapsed:.0f} s; launcher RSS {samples[0] / MiB:.1f} MiB "
          f"at the start, {min(samples) / MiB:.1f}-{max(samples) / MiB:.1f} MiB over {len(samples)} samples")
    assert max(samples) - samples[0] < 2 * MiB, samples
    assert rate > 1024
    assert node_cluster.wait_for_vmi("f-flood", ready=True)["metadata"]["uid"] == vmi["metadata"]["uid"]
    assert node_cluster.boots(pod) == 1
