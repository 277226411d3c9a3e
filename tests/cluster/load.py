"""Many VMIs, or as many plain pods of the same images, created at once on the real node: how long
each took to run, what each pod's cgroup holds against its request, and what virt-handler burns
meanwhile. Used by tests/cluster/test_load.py and bench/cluster.py; the plain pod is the
launcher pod's shape without KubeVirt, so that the ratio VMI / pod is what KubeVirt and the
launcher add."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ch_launcher.kubevirt.quantity import quantity_bytes
from tests.cluster.images import DISK_IMAGE, LAUNCHER_IMAGE
from tests.cluster.node import NodeCluster
from tests.cluster.objects import annotated_vmi

LABEL = "kubevirt-ch.io/load"
# KubeVirt asks 100m of CPU per vCPU for the compute container (cpuAllocationRatio 10): with the
# add-on's two server replicas, a 2-CPU node holds 17 such VMIs. The load's small VMIs ask half.
VMI_CPU_REQUEST = "50m"
READY_COLUMNS = 'NAME:.metadata.name,READY:.status.conditions[?(@.type=="Ready")].status'
PHASE_COLUMNS = "NAME:.metadata.name,PHASE:.status.phase"


def plain_pod(name: str, virt_launcher_image: str) -> dict[str, Any]:
    """A pod of the launcher pod's images and shape, with nothing of KubeVirt's in it: an init
    container of KubeVirt's launcher image copying `container-disk` into an emptyDir, the
    ch-launcher image, the launcher image and the containerDisk image each running a container
    that idles; uid 107."""
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


def small_vmi(name: str) -> dict[str, Any]:
    """`annotated_vmi(name)` asking VMI_CPU_REQUEST of CPU."""
    vmi = annotated_vmi(name)
    vmi["spec"]["domain"]["resources"] = {"requests": {"cpu": VMI_CPU_REQUEST}}
    return vmi


def labelled(obj: dict[str, Any], batch: str) -> dict[str, Any]:
    obj["metadata"].setdefault("labels", {})[LABEL] = batch
    return obj


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile `q` (0-100) of `values` (with 20 values, p99 is the largest)."""
    ordered = sorted(values)
    return ordered[max(math.ceil(q / 100 * len(ordered)) - 1, 0)]


@dataclass
class Batch:
    """`count` objects of one kind created by one `kubectl create`, and when each ran."""
    kind: str  # "vmi" or "pod"
    batch: str
    names: list[str]
    seconds: dict[str, float]  # name -> seconds from `kubectl create` until Running (VMI) / Ready (pod)

    @property
    def p50(self) -> float:
        return percentile(list(self.seconds.values()), 50)

    @property
    def p99(self) -> float:
        return percentile(list(self.seconds.values()), 99)


def create_at_once(cluster: NodeCluster, kind: str, count: int, batch: str, timeout: float = 300) -> Batch:
    """`count` annotated VMIs (kind "vmi") or plain pods (kind "pod") in one `kubectl create`,
    labelled `LABEL=batch`; returns once every one runs (VMI phase Running, pod Ready), with the
    seconds each took. ClusterError at `timeout`."""
    names = [f"{batch}-{i}" for i in range(count)]
    if kind == "vmi":
        objects = [labelled(small_vmi(n), batch) for n in names]
        watch = cluster.watch("vmi", "-l", f"{LABEL}={batch}", columns=PHASE_COLUMNS)
        value = "Running"
    else:
        objects = [labelled(plain_pod(n, cluster.launcher_image()), batch) for n in names]
        watch = cluster.watch("pod", "-l", f"{LABEL}={batch}", columns=READY_COLUMNS)
        value = "True"
    try:
        time.sleep(0.5)  # the watch has listed (nothing yet) before the objects appear
        start = time.monotonic()
        run = cluster.kubectl("create", "-f", "-", input=cluster.yaml(objects), timeout=timeout)
        if run.rc != 0:
            raise AssertionError(f"kubectl create of {count} {kind}s failed:\n{run.out}")
        cluster.wait_for(lambda: len(watch.first(value)) == count, f"{count} {kind}s to run", timeout=timeout,
                         every=0.5)
        return Batch(kind, batch, names, {n: t - start for n, t in watch.first(value).items()})
    except BaseException:
        delete_batch(cluster, Batch(kind, batch, names, {}))
        raise
    finally:
        watch.close()


def delete_batch(cluster: NodeCluster, batch: Batch, timeout: float = 300) -> None:
    """Delete the batch's objects and wait until their pods are gone."""
    cluster.kubectl("delete", batch.kind, "-l", f"{LABEL}={batch.batch}", "--wait=false")
    selector = f"{LABEL}={batch.batch}" if batch.kind == "pod" else "kubevirt.io=virt-launcher"
    names = set(batch.names)

    def gone() -> bool:
        pods = cluster.json("get", "pods", "-l", selector)["items"]
        left = [p for p in pods if p["metadata"]["name"] in names
                or p["metadata"].get("labels", {}).get("vmi.kubevirt.io/id") in names]
        return not left
    cluster.wait_for(gone, f"the pods of {batch.batch} to go", timeout=timeout, every=1)


def pods_of(cluster: NodeCluster, batch: Batch) -> list[dict[str, Any]]:
    if batch.kind == "pod":
        pods: list[dict[str, Any]] = cluster.json("get", "pods", "-l", f"{LABEL}={batch.batch}")["items"]
        return pods
    names = set(batch.names)
    return [p for p in cluster.json("get", "pods", "-l", "kubevirt.io=virt-launcher")["items"]
            if p["metadata"]["labels"].get("vmi.kubevirt.io/id") in names]


@dataclass
class PodMemory:
    name: str
    usage: int  # the pod cgroup's memory.usage_in_bytes
    peak: int  # its memory.max_usage_in_bytes
    request: int  # the sum of its containers' memory requests (0 for none)


def pod_memory(cluster: NodeCluster, pod: dict[str, Any]) -> PodMemory:
    """The pod-level memory cgroup (v1) kubelet made for `pod` on node01, against its request."""
    root = Path("/sys/fs/cgroup/memory") / (cluster.node_dir / "cgroup-root").read_text().strip()
    (cgroup,) = root.glob(f"kubepods*/**/pod{pod['metadata']['uid']}")
    request = sum(quantity_bytes(c.get("resources", {}).get("requests", {}).get("memory", "0"))
                  for c in pod["spec"]["containers"])
    return PodMemory(pod["metadata"]["name"], int((cgroup / "memory.usage_in_bytes").read_text()),
                     int((cgroup / "memory.max_usage_in_bytes").read_text()), request)


def host_pid(cluster: NodeCluster, component: str, node: str = "node01") -> int:
    """The host PID of a node component (node-up.sh records it in the node's PID namespace)."""
    directory = cluster.dir_of(node)
    inner = int((directory / "pids" / component).read_text())
    init = int((directory / "init.pid").read_text())
    namespace = os.readlink(f"/proc/{init}/ns/pid")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(entry / "ns" / "pid") != namespace:
                continue
            nspid = next(line for line in (entry / "status").read_text().splitlines() if line.startswith("NSpid:"))
        except (OSError, StopIteration):
            continue
        if int(nspid.split()[-1]) == inner:
            return int(entry.name)
    raise AssertionError(f"no process {component} (pid {inner} in {node}'s PID namespace)")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid`, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_share(pid: int, seconds: float) -> float:
    """The share of one CPU process `pid` used over the next `seconds` (0.05 = 5 %)."""
    before, start = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - before) / (time.monotonic() - start)
