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
launcher's share of starting and stopping a VM on a node. Where the node cannot run (no
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
from typing import Any

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.cluster.images import ADMISSION_IMAGE, DISK_IMAGE, LAUNCHER_IMAGE, Builder, missing  # noqa: E402
from tests.cluster.node import NodeCluster, unavailable  # noqa: E402
from tests.cluster.objects import annotated_vmi  # noqa: E402

TIMEOUT = "120s"


def plain_pod(name: str, virt_launcher_image: str) -> dict[str, Any]:
    """A pod of the launcher pod's images and shape, with nothing of KubeVirt's in it."""
    idle = ["/bin/sh", "-c", "trap 'exit 0' TERM; sleep infinity & wait"]  # PID 1: no default SIGTERM
    volumes = [{"name": "init", "emptyDir": {}}, {"name": "disks", "emptyDir": {}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 30, "volumes": volumes,
                     "securityContext": {"runAsUser": 107, "runAsGroup": 107, "runAsNonRoot": True},
                     "initContainers": [{"name": "container-disk-binary", "image": virt_launcher_image,
                                         "command": ["/usr/bin/cp", "/usr/bin/container-disk",
                                                     "/init/container-disk"],
                                         "volumeMounts": [{"name": "init", "mountPath": "/init"}]}],
                     "containers": [
                         {"name": "compute", "image": LAUNCHER_IMAGE, "command": idle},
                         {"name": "guest-console-log", "image": virt_launcher_image, "command": idle},
                         {"name": "volumecontainerdisk", "image": DISK_IMAGE,
                          "command": ["/init/container-disk", "--copy-path", "/disks/disk_0"],
                          "volumeMounts": [{"name": "init", "mountPath": "/init"},
                                           {"name": "disks", "mountPath": "/disks"}]}]}}


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
    finally:
        cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
