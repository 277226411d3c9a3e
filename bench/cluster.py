#!/usr/bin/env python3
"""Cloud Hypervisor VMIs against KubeVirt's own QEMU ones on the real node of tests/cluster
(../shared/k8s: containerd, kubelet, KubeVirt's virt-controller and virt-handler; the add-on installed
as the README says; virt-controller's launcher image KubeVirt's own, QEMU 10.0 and libvirt 12.9),
in one run, rounds interleaved (tests/cluster/backends.py: the same VMI on both backends, one
vCPU, a containerDisk; 128Mi and 1Gi without a NIC, 128Mi with a masquerade NIC, e1000e for QEMU).
Each figure for each backend and the ratio CH / QEMU:

- **one at a time**, per shape: `kubectl create` -> `Running` and `kubectl delete` -> pod gone
  (once the guest has booted: one that has not ignores the ACPI button), p50 (max); the `compute`
  container's memory at Running and 10 s later (cgroup v1 `memory.usage_in_bytes`) and its peak by
  then (`memory.max_usage_in_bytes`), the whole pod's peak then, p50; the launcher pod's CPU seconds
  until Running (its cpuacct cgroup's `cpuacct.usage`, every container), p50; its memory request;
- **10 at once** (128Mi, no NIC, one `kubectl create` per backend): create -> Running p50 (max),
  the same memory and CPU readings, p50;
- **VMIs per node**: how many 128Mi VMIs of each backend the node's allocatable memory holds by
  their launcher pods' memory requests (what each backend asks for: guest, overhead, the other
  containers);
- **launcher killed**: SIGKILL of virt-launcher in a QEMU VMI's pod and of ch-launcher in a Cloud
  Hypervisor one, one right after the other: seconds until each VMI is `Failed`, p50 (max);
- **where one start's time goes** (Cloud Hypervisor, `--timelines N` starts, default 2): an
  annotated VMI (containerDisk, cloud-init NoCloud, masquerade NIC) started alone, the seconds from
  `kubectl create` to each step: scheduled, sandbox ready, init containers done, compute started
  (the pod's watch: kubelet's conditions and container status), `launcher-sock` ready,
  virt-handler's first call, the first Sync received, `vm.boot` returned, the first Domain event
  delivered (the launcher's own log lines, their microsecond timestamps), VMI `Running` (its
  watch); and the CPU seconds of the compute container's processes by then (the monitor and the
  launcher, both `ch-launcher`; `cloud-hyperviso`).

With `--against-pods`, also the older baseline, a plain pod of the same images and shape
(tests/cluster/load.py): an annotated VMI (a containerDisk, cloud-init NoCloud, a masquerade
interface) against that pod, create -> Running (Ready) and delete -> gone; then 1, 10 and 20
annotated VMIs at once against as many plain pods (create -> Running p50 and p99, each pod's cgroup
peak against its request, virt-handler's CPU while the batch idles).

Where the node cannot run (no ../shared beside the checkout, not root, a tool missing), it says
why and exits 0, as the other benchmarks do.

    python bench/cluster.py [--rounds N] [--kills N] [--timelines N] [--against-pods] [--only PART,...]
    python bench/cluster.py --only pods     # the plain-pod baseline alone

Timings depend on the machine's load (printed); compare within one run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ch_launcher.kubevirt.quantity import quantity_bytes  # noqa: E402
from tests.cluster.backends import (  # noqa: E402
    BACKENDS,
    CLOUD_HYPERVISOR,
    QEMU,
    SMALL,
    AtOnce,
    Round,
    Shape,
    kill_launchers,
    one_round,
)
from tests.cluster.backends import at_once as backends_at_once  # noqa: E402
from tests.cluster.images import ADMISSION_IMAGE, LAUNCHER_IMAGE, Builder, missing  # noqa: E402
from tests.cluster.load import (  # noqa: E402
    PHASE_COLUMNS,
    cpu_share,
    create_at_once,
    delete_batch,
    host_pid,
    plain_pod,
    pod_memory,
    pods_of,
)
from tests.cluster.node import NodeCluster, unavailable  # noqa: E402
from tests.cluster.objects import annotated_vmi  # noqa: E402

TIMEOUT = "120s"


def timed(cluster: NodeCluster, *steps: tuple[str, ...], stdin: str | None = None) -> float:
    """Seconds for kubectl `steps` run one after the other (each must succeed)."""
    start = time.monotonic()
    for i, args in enumerate(steps):
        r = cluster.kubectl(*args, input=stdin if i == 0 else None, timeout=180)
        if r.rc != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed:\n{r.out}")
    return time.monotonic() - start


def vmi_round(cluster: NodeCluster, name: str) -> tuple[float, float]:
    up = timed(cluster, ("create", "-f", "-"), ("wait", "--for=jsonpath={.status.phase}=Running", f"vmi/{name}",
                                                f"--timeout={TIMEOUT}"),
               stdin=cluster.yaml(annotated_vmi(name)))
    pod = cluster.launcher_pod(cluster.json("get", "vmi", name))["metadata"]["name"]
    down = timed(cluster, ("delete", "vmi", name, "--wait=false"),
                 ("wait", "--for=delete", f"pod/{pod}", f"--timeout={TIMEOUT}"))
    return up, down


def pod_round(cluster: NodeCluster, name: str) -> tuple[float, float]:
    up = timed(cluster, ("create", "-f", "-"), ("wait", "--for=condition=Ready", f"pod/{name}", f"--timeout={TIMEOUT}"),
               stdin=cluster.yaml(plain_pod(name, cluster.launcher_image())))
    down = timed(cluster, ("delete", "pod", name, "--wait=false"),
                 ("wait", "--for=delete", f"pod/{name}", f"--timeout={TIMEOUT}"))
    return up, down


MiB = 1 << 20


def against_pods(cluster: NodeCluster, rounds: int) -> None:
    """The module docstring's `--against-pods` part: one at a time, printed as a table."""
    pod_round(cluster, "warm-up")  # first use of each image on the node (not counted)
    vmi_round(cluster, "warm-up")
    figures: dict[str, list[tuple[float, float]]] = {"VMI": [], "pod": []}
    for i in range(rounds):
        figures["VMI"].append(vmi_round(cluster, f"bench-{i}"))
        figures["pod"].append(pod_round(cluster, f"bench-{i}"))
    print(f"\nagainst a plain pod: {rounds} rounds each on one node, load average {os.getloadavg()[0]:.1f}")
    print(f"{'':6} {'create -> Running p50 (max) s':>30} {'delete -> pod gone p50 (max) s':>32}")
    p50 = {}
    for kind, measured in figures.items():
        ups, downs = [r[0] for r in measured], [r[1] for r in measured]
        p50[kind] = (statistics.median(ups), statistics.median(downs))
        print(f"{kind:6} {p50[kind][0]:22.2f} ({max(ups):5.2f}) {p50[kind][1]:24.2f} ({max(downs):5.2f})")
    print(f"ratio VMI / pod at p50: create -> Running {p50['VMI'][0] / p50['pod'][0]:.2f}x, "
          f"delete -> pod gone {p50['VMI'][1] / p50['pod'][1]:.2f}x")


def at_once_against_pods(cluster: NodeCluster, counts: tuple[int, ...] = (1, 10, 20), idle: float = 20) -> None:
    """The module docstring's `--against-pods` part: many at once, printed as a table."""
    handler = host_pid(cluster, "virt-handler")
    print(f"\nat once (load average {os.getloadavg()[0]:.1f}); virt-handler alone: "
          f"{cpu_share(handler, idle):.1%} of a CPU")
    print(f"{'':9} {'create -> running p50 / p99 s':>30} {'pod peak MiB min-max':>22} {'request MiB':>12} "
          f"{'virt-handler CPU':>17}")
    rows: dict[tuple[str, int], tuple[float, float, float]] = {}
    for count in counts:
        for kind in ("vmi", "pod"):
            batch = create_at_once(cluster, kind, count, f"{kind}-at-once-{count}", timeout=600)
            try:
                memory = [pod_memory(cluster, pod) for pod in pods_of(cluster, batch)]
                cpu = cpu_share(handler, idle)
            finally:
                delete_batch(cluster, batch, timeout=600)
            peaks = [m.peak / MiB for m in memory]
            rows[kind, count] = (batch.p50, batch.p99, statistics.median(peaks))
            print(f"{count:3} {kind + 's':5} {batch.p50:17.1f} / {batch.p99:5.1f} {min(peaks):14.0f}-{max(peaks):<7.0f}"
                  f"{memory[0].request / MiB:12.0f} {cpu:16.1%}")
    for count in counts:
        vmi, pod = rows["vmi", count], rows["pod", count]
        print(f"ratio VMI / pod, {count:2} at once: create -> running p50 {vmi[0] / pod[0]:.2f}x, "
              f"p99 {vmi[1] / pod[1]:.2f}x; median pod peak memory {vmi[2] / pod[2]:.2f}x")


# --- Cloud Hypervisor against QEMU -----------------------------------------------------------

SHAPES = (SMALL, Shape(memory="1Gi"), Shape(nic=True))
NAMES = {CLOUD_HYPERVISOR: "Cloud Hypervisor", QEMU: "QEMU"}


def p50_max(values: list[float]) -> tuple[float, float]:
    return statistics.median(values), max(values)


def row(figure: str, ch: tuple[float, float] | float, qemu: tuple[float, float] | float, unit: str = "") -> None:
    """One figure: Cloud Hypervisor's, QEMU's (each `p50 (max)` or one value) and CH / QEMU (of the first)."""
    def shown(value: tuple[float, float] | float) -> str:
        if isinstance(value, tuple):
            return f"{value[0]:.2f} ({value[1]:.2f})"
        return str(value) if isinstance(value, int) else f"{value:.2f}"
    first = {b: v[0] if isinstance(v, tuple) else v for b, v in ((CLOUD_HYPERVISOR, ch), (QEMU, qemu))}
    ratio = f"{first[CLOUD_HYPERVISOR] / first[QEMU]:.2f}x" if first[QEMU] else "-"
    print(f"{figure + (' ' + unit if unit else ''):46} {shown(ch):>18} {shown(qemu):>18} {ratio:>8}")


def header(title: str) -> None:
    print(f"\n{title} (load average {os.getloadavg()[0]:.1f})")
    print(f"{'':46} {NAMES[CLOUD_HYPERVISOR]:>18} {NAMES[QEMU]:>18} {'CH/QEMU':>8}")


def one_at_a_time(cluster: NodeCluster, rounds: int) -> dict[str, int]:
    """The one-at-a-time part for every shape; returns each backend's pod memory request at 128Mi."""
    requests: dict[str, int] = {}
    for s, shape in enumerate(SHAPES):
        for backend in BACKENDS:  # first use of the shape on the node (not counted)
            one_round(cluster, f"warm-{s}-{backend[:2]}", backend, shape, settle=0)
        measured: dict[str, list[Round]] = {b: [] for b in BACKENDS}
        for i in range(rounds):
            order = BACKENDS if i % 2 == 0 else BACKENDS[::-1]  # neither always goes first
            for backend in order:
                measured[backend].append(one_round(cluster, f"b{s}-{i}-{backend[:2]}", backend, shape))
        header(f"{shape}: {rounds} rounds each, interleaved")

        def figure(name: str, value: Callable[[Round], float], unit: str, with_max: bool = False,
                   by_backend: dict[str, list[Round]] = measured) -> None:
            got = {b: [value(r) for r in rs] for b, rs in by_backend.items()}
            if with_max:
                row(name, p50_max(got[CLOUD_HYPERVISOR]), p50_max(got[QEMU]), unit)
            else:
                row(name, statistics.median(got[CLOUD_HYPERVISOR]), statistics.median(got[QEMU]), unit)
        figure("create -> Running p50 (max)", lambda r: r.up, "s", with_max=True)
        figure("delete -> pod gone p50 (max)", lambda r: r.down, "s", with_max=True)
        figure("compute memory.usage_in_bytes at Running", lambda r: r.at_running.usage / MiB, "MiB")
        figure("compute memory.usage_in_bytes 10 s later", lambda r: r.later.usage / MiB, "MiB")
        figure("compute memory.max_usage_in_bytes (peak)", lambda r: r.later.peak / MiB, "MiB")
        figure("pod memory.max_usage_in_bytes (peak)", lambda r: r.pod_peak / MiB, "MiB")
        figure("pod cpuacct.usage until Running", lambda r: r.cpu, "s")
        figure("pod memory request", lambda r: r.request / MiB, "MiB")
        if shape == SMALL:
            requests = {b: measured[b][0].request for b in BACKENDS}
    return requests


def ten_at_once(cluster: NodeCluster, count: int = 10) -> None:
    found: dict[str, AtOnce] = {}
    for backend in BACKENDS:
        found[backend] = backends_at_once(cluster, backend, count, f"once-{backend[:2]}")
    header(f"{count} at once ({SMALL}), one kubectl create per backend")

    def figure(name: str, value: Callable[[AtOnce], list[float]], unit: str, with_max: bool = False) -> None:
        got = {b: value(found[b]) for b in BACKENDS}
        if with_max:
            row(name, p50_max(got[CLOUD_HYPERVISOR]), p50_max(got[QEMU]), unit)
        else:
            row(name, statistics.median(got[CLOUD_HYPERVISOR]), statistics.median(got[QEMU]), unit)
    figure("create -> Running p50 (max)", lambda a: list(a.up.values()), "s", with_max=True)
    figure("compute memory.usage_in_bytes at Running", lambda a: [m.usage / MiB for m in a.at_running.values()],
           "MiB")
    figure("compute memory.usage_in_bytes, all running", lambda a: [m.usage / MiB for m in a.later.values()], "MiB")
    figure("compute memory.max_usage_in_bytes (peak)", lambda a: [m.peak / MiB for m in a.later.values()], "MiB")
    figure("pod cpuacct.usage until Running", lambda a: list(a.cpu.values()), "s")


def per_node(cluster: NodeCluster, requests: dict[str, int]) -> None:
    allocatable = quantity_bytes(cluster.json("get", "node", "node01")["status"]["allocatable"]["memory"])
    header(f"VMIs per node, 128Mi each: node01's allocatable memory {allocatable / MiB:.0f} MiB over each "
           f"launcher pod's memory request")
    row("launcher pod memory request", requests[CLOUD_HYPERVISOR] / MiB, requests[QEMU] / MiB, "MiB")
    fits = {b: allocatable // requests[b] for b in BACKENDS}
    row("VMIs that fit by memory", fits[CLOUD_HYPERVISOR], fits[QEMU])


def kills(cluster: NodeCluster, rounds: int) -> None:
    times: dict[str, list[float]] = {b: [] for b in BACKENDS}
    for i in range(rounds):
        for backend, seconds in kill_launchers(cluster, {b: f"kill-{i}-{b[:2]}" for b in BACKENDS}).items():
            times[backend].append(seconds)
    header(f"launcher SIGKILLed (ch-launcher | virt-launcher) -> VMI Failed, {rounds} rounds, both killed at once")
    row("SIGKILL -> VMI Failed p50 (max)", p50_max(times[CLOUD_HYPERVISOR]), p50_max(times[QEMU]), "s")


# --- where the time of one start goes (Cloud Hypervisor) ---------------------------------------

# what the pod's watch shows, one column per step (kubelet's conditions; `<none>` until set)
POD_STEPS = (("scheduled", ".spec.nodeName"),
             ("sandbox ready", '.status.conditions[?(@.type=="PodReadyToStartContainers")].status'),
             ("init containers done", '.status.conditions[?(@.type=="Initialized")].status'),
             ("compute started", '.status.containerStatuses[?(@.name=="compute")].state.running.startedAt'))
# the launcher's own log lines (their microsecond timestamps), in the order a start passes them
LAUNCHER_STEPS = (("launcher-sock ready", "command server ready on"),
                  ("virt-handler's first call", "virt-handler's first call"),
                  ("Sync received", "first SyncVirtualMachine received"),
                  ("vm.boot returned", "vm.boot returned"),
                  ("first Domain event sent", "first Domain event delivered to virt-handler"))


def cpu_seconds(pid: int) -> float:
    """CPU seconds process `pid` and the children it reaped have used (/proc/PID/stat)."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime


def log_times(log: str) -> dict[str, float]:
    """When each of LAUNCHER_STEPS' lines was logged (epoch seconds), from the compute container's log."""
    found: dict[str, float] = {}
    for line in log.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        for step, text in LAUNCHER_STEPS:
            if step not in found and str(entry.get("msg", "")).startswith(text):
                stamp = datetime.datetime.strptime(entry["timestamp"].replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")
                found[step] = stamp.timestamp()
    return found


def start_timeline(cluster: NodeCluster, name: str) -> tuple[dict[str, float], dict[str, float]]:
    """One annotated VMI (a containerDisk, cloud-init NoCloud, a masquerade interface) started
    alone: the seconds from `kubectl create` to each step, from what the pod's watch, the
    launcher's log and the VMI's watch say; and the CPU seconds of the compute container's
    processes (the monitor, the launcher, the VMM) once the VMI is Running. Deletes it."""
    columns = "NAME:.metadata.name," + ",".join(f"S{i}:{path}" for i, (_, path) in enumerate(POD_STEPS))
    pods, vmis = cluster.watch("pod", columns=columns), cluster.watch("vmi", columns=PHASE_COLUMNS)
    wall = time.time() - time.monotonic()  # the launcher's log is in wall-clock time, the watches monotonic
    try:
        start = time.monotonic()
        r = cluster.kubectl("create", "-f", "-", input=cluster.yaml(annotated_vmi(name)))
        if r.rc != 0:
            raise RuntimeError(f"kubectl create failed:\n{r.out}")
        cluster.wait_for(lambda: name in vmis.first("Running"), f"{name} to run", timeout=240, every=0.05)
        running = vmis.first("Running")[name]
        pod = cluster.launcher_pod(cluster.json("get", "vmi", name))
        cpu = {comm: sum(cpu_seconds(pid) for pid in pids) for comm, pids in cluster.processes(pod).items()}
    finally:
        pods.close()
        vmis.close()
    pod_name = pod["metadata"]["name"]
    steps: dict[str, float] = {}
    rows = pods.timed_rows()
    for i, (step, _) in enumerate(POD_STEPS):
        seen = [at for row, at in rows if row[0] == pod_name and row[i + 1:i + 2] not in ([], ["<none>"], ["False"])]
        if seen:
            steps[step] = seen[0] - start
    for step, at in log_times(cluster.kubectl("logs", pod_name, "-c", "compute").out).items():
        steps[step] = at - wall - start
    steps["VMI Running"] = running - start
    cluster.kubectl("delete", "vmi", name, "--wait=false")
    cluster.kubectl("wait", "--for=delete", f"pod/{pod_name}", "--timeout=120s", timeout=150)
    return steps, cpu


def timelines(cluster: NodeCluster, rounds: int) -> None:
    start_timeline(cluster, "timeline-warm-up")  # first use of the images on the node (not counted)
    for i in range(rounds):
        steps, cpu = start_timeline(cluster, f"timeline-{i}")
        print(f"\none start of an annotated VMI (containerDisk, cloud-init, masquerade NIC), round {i + 1}, "
              f"load average {os.getloadavg()[0]:.1f}")
        print(f"{'step':28} {'s after create':>15} {'since the step before':>22}")
        previous = 0.0
        order = [s for s, _ in POD_STEPS] + [s for s, _ in LAUNCHER_STEPS] + ["VMI Running"]
        for step in order:
            if step in steps:
                print(f"{step:28} {steps[step]:15.3f} {steps[step] - previous:22.3f}")
                previous = steps[step]
            else:
                print(f"{step:28} {'not seen':>15}")
        print("CPU seconds until Running: " + ", ".join(f"{comm} {s:.2f}" for comm, s in sorted(cpu.items())))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each backend per shape (default 3)")
    parser.add_argument("--kills", type=int, default=3, help="rounds of the launcher kill (default 3)")
    parser.add_argument("--timelines", type=int, default=2, help="starts whose timeline is printed (default 2)")
    parser.add_argument("--against-pods", action="store_true", help="also the plain-pod baseline (module docstring)")
    parser.add_argument("--only", type=lambda text: set(text.split(",")), default=None,
                        help="these parts only, comma-separated: timeline (one start's), kills (the launchers'), "
                             "qemu (the other figures against QEMU), pods (the plain-pod baseline)")
    args = parser.parse_args()
    reason = unavailable() or missing()
    if reason:
        print(f"bench/cluster.py: cannot run here ({reason}); nothing measured")
        return 0
    print(f"building the images ({LAUNCHER_IMAGE}, {ADMISSION_IMAGE}, KubeVirt's launcher) and starting the node ...",
          flush=True)
    cluster = NodeCluster(pathlib.Path(tempfile.mkdtemp(prefix="bench-cluster-")))
    try:
        cluster.start_node()
        cluster.load_images(Builder().build())
        cluster.install()
        parts = args.only or {"timeline", "qemu", "kills", *(["pods"] if args.against_pods else [])}
        if "timeline" in parts:
            timelines(cluster, args.timelines)
        if "qemu" in parts:
            requests = one_at_a_time(cluster, args.rounds)
            ten_at_once(cluster)
            per_node(cluster, requests)
        if "kills" in parts:
            kills(cluster, args.kills)
        if "pods" in parts:
            against_pods(cluster, args.rounds)
            at_once_against_pods(cluster)
    finally:
        cluster.close()
    return 0

if __name__ == "__main__":
    sys.exit(main())
