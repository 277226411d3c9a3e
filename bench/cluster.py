#!/usr/bin/env python3
"""A Cloud Hypervisor VMI's life on the real node of tests/cluster (../shared/k8s: containerd,
kubelet, KubeVirt's virt-controller and virt-handler; the add-on installed as the README says, its
images built with `make images`), against a plain pod of the same images in the same run:

- **VMI**: `kubectl create` of an annotated VMI (a containerDisk, cloud-init NoCloud, a
  masquerade interface; tests/cluster/objects.py) until `kubectl wait` sees it `Running`; then
  `kubectl delete vmi` until its launcher pod is gone (the guest shuts down on the ACPI button).
- **pod**: `kubectl create` of a pod of the same images in the same shape (an init container of
  KubeVirt's launcher image copying `container-disk` into an emptyDir, the ch-launcher image, the
  launcher image and the containerDisk image each running a container that idles; uid 107)
  until `kubectl wait` sees it Ready; then `kubectl delete pod` until it is gone.

p50 (and max) over N rounds of each, interleaved; the ratio VMI / pod is KubeVirt's and the
launcher's share of starting and stopping a VM on a node.

Then **at once** (tests/cluster/load.py): 1, 10 and 20 VMIs in one `kubectl create`, against as
many plain pods in one `kubectl create`, each batch deleted before the next: create -> Running
(pods: Ready) p50 and p99 (nearest rank: with 20, the slowest), each pod's cgroup memory (peak)
against its memory request (the plain pods request none), and virt-handler's CPU over 20 s while
the batch idles. Where the node cannot run (no
../shared beside the checkout, not root, a tool missing), it says why and exits 0, as the other
benchmarks do.

    python bench/cluster.py [--rounds N]

Timings depend on the machine's load (printed); compare within one run.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.cluster.images import ADMISSION_IMAGE, LAUNCHER_IMAGE, Builder, missing  # noqa: E402
from tests.cluster.load import cpu_share, create_at_once, delete_batch, host_pid, plain_pod, pod_memory, pods_of  # noqa: E402
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


def at_once(cluster: NodeCluster, counts: tuple[int, ...] = (1, 10, 20), idle: float = 20) -> None:
    """The module docstring's "at once" part, printed as a table."""
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    reason = unavailable() or missing()
    if reason:
        print(f"bench/cluster.py: cannot run here ({reason}); nothing measured")
        return 0
    print(f"building the images ({LAUNCHER_IMAGE}, {ADMISSION_IMAGE}) and starting the node ...", flush=True)
    cluster = NodeCluster(pathlib.Path(tempfile.mkdtemp(prefix="bench-cluster-")))
    try:
        cluster.start_node()
        cluster.load_images(Builder().build())
        cluster.install()
        pod_round(cluster, "warm-up")  # first use of each image on the node (not counted)
        vmi_round(cluster, "warm-up")
        figures: dict[str, list[tuple[float, float]]] = {"VMI": [], "pod": []}
        for i in range(args.rounds):
            figures["VMI"].append(vmi_round(cluster, f"bench-{i}"))
            figures["pod"].append(pod_round(cluster, f"bench-{i}"))
        print(f"{args.rounds} rounds each on one node, load average {os.getloadavg()[0]:.1f}")
        print(f"{'':6} {'create -> Running p50 (max) s':>30} {'delete -> pod gone p50 (max) s':>32}")
        p50 = {}
        for kind, rounds in figures.items():
            ups, downs = [r[0] for r in rounds], [r[1] for r in rounds]
            p50[kind] = (statistics.median(ups), statistics.median(downs))
            print(f"{kind:6} {p50[kind][0]:22.2f} ({max(ups):5.2f}) {p50[kind][1]:24.2f} ({max(downs):5.2f})")
        print(f"ratio VMI / pod at p50: create -> Running {p50['VMI'][0] / p50['pod'][0]:.2f}x, "
              f"delete -> pod gone {p50['VMI'][1] / p50['pod'][1]:.2f}x")
        at_once(cluster)
    finally:
        cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
