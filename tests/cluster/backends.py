"""The same VMI on either backend of the real node, and what its launcher pod costs there: for the
stories of tests/cluster/test_beside_qemu.py and the side-by-side figures of bench/cluster.py.

A VMI of one `Shape` differs between the backends only where this node or Cloud Hypervisor
requires it: the add-on's annotation (Cloud Hypervisor) or none (KubeVirt runs it on QEMU), and,
with a NIC, its model: virtio for Cloud Hypervisor (the only model it has), `e1000e` for QEMU (this
node has no `/dev/vhost-net`, so a virtio NIC keeps a QEMU pod Pending). Both boot the
containerDisk of `images.py` (QEMU's SeaBIOS boots its boot sector, Cloud Hypervisor the tiny
guest as firmware), one vCPU, no display. A VMI with a NIC sets `dnsPolicy: None` and the
`dnsConfig` a cluster's kubelet would write (the node's kubelet has no cluster DNS and writes
`search .`, on which virt-launcher's DHCP server panics: ../shared/kubevirt/README.md; ch-launcher
leaves `.` out of what it offers).

The cgroup readings are cgroup v1 (this machine): `memory.usage_in_bytes` and
`memory.max_usage_in_bytes` of the `compute` container's memory cgroup, `cpuacct.usage` of the
pod's cpuacct cgroup (every container's CPU, init containers included).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ch_launcher.kubevirt.quantity import quantity_bytes
from tests.apiserver.cluster import ClusterError
from tests.cluster.bootdisk import READY
from tests.cluster.images import DISK_IMAGE, LAUNCHER_IMAGE
from tests.cluster.load import LABEL, PHASE_COLUMNS, Batch, delete_batch, labelled, pod_memory
from tests.cluster.node import NodeCluster
from tests.cluster.objects import CH

CLOUD_HYPERVISOR, QEMU = "cloud-hypervisor", "qemu"
BACKENDS = (CLOUD_HYPERVISOR, QEMU)
GUEST_READY = {QEMU: READY, CLOUD_HYPERVISOR: "KCH-GUEST-READY"}  # the boot sector's line, the tiny guest's
# what kubelet writes for a ClusterFirst pod of namespace default in a cluster whose DNS Service is 10.96.0.10
CLUSTER_DNS = {"nameservers": ["10.96.0.10"],
               "searches": ["default.svc.cluster.local", "svc.cluster.local", "cluster.local"],
               "options": [{"name": "ndots", "value": "5"}]}


@dataclass(frozen=True)
class Shape:
    """What a VMI asks for, the same on both backends."""

    memory: str = "128Mi"
    nic: bool = False  # a masquerade interface on the pod network

    def __str__(self) -> str:
        return f"{self.memory}, {'masquerade NIC' if self.nic else 'no NIC'}"


SMALL = Shape()  # 128Mi, no NIC


def vmi(name: str, backend: str, shape: Shape = SMALL) -> dict[str, Any]:
    """A VMI of `shape` that runs on `backend` (module docstring)."""
    devices: dict[str, Any] = {"autoattachGraphicsDevice": False,
                               "disks": [{"name": "containerdisk", "disk": {"bus": "virtio"}}]}
    spec: dict[str, Any] = {"domain": {"memory": {"guest": shape.memory}, "devices": devices},
                            "volumes": [{"name": "containerdisk", "containerDisk": {"image": DISK_IMAGE}}]}
    if shape.nic:
        interface: dict[str, Any] = {"name": "default", "masquerade": {}}
        if backend == QEMU:
            interface["model"] = "e1000e"
        devices["interfaces"] = [interface]
        spec["networks"] = [{"name": "default", "pod": {}}]
        spec["dnsPolicy"] = "None"
        spec["dnsConfig"] = CLUSTER_DNS
    else:
        devices["autoattachPodInterface"] = False
    metadata: dict[str, Any] = {"name": name}
    if backend == CLOUD_HYPERVISOR:
        metadata["annotations"] = dict(CH)
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "metadata": metadata, "spec": spec}


def backend_of(pod: dict[str, Any]) -> str:
    """Which backend a launcher pod runs: its compute container's image says."""
    compute = next(c for c in pod["spec"]["containers"] if c["name"] == "compute")
    return CLOUD_HYPERVISOR if compute["image"] == LAUNCHER_IMAGE else QEMU


def booted(cluster: NodeCluster, pod: dict[str, Any], timeout: float = 120) -> int:
    """How many times the guest of `pod` booted, from its serial log (virt-tail) once a first boot
    shows: SeaBIOS runs emulated on this PVM machine, so QEMU's guest prints its line some seconds
    after the VMI is Running (tens of seconds under load). ClusterError when none shows in `timeout`."""
    name, marker = pod["metadata"]["name"], GUEST_READY[backend_of(pod)]

    def count() -> int:
        r = cluster.kubectl("logs", name, "-c", "guest-console-log")
        return r.out.count(marker) if r.rc == 0 else 0
    found: int = cluster.wait_for(count, f"{marker} in {name}'s serial log", timeout=timeout, every=1)
    return found


@dataclass(frozen=True)
class Memory:
    usage: int  # the compute container's memory.usage_in_bytes
    peak: int  # its memory.max_usage_in_bytes


def compute_memory(cluster: NodeCluster, pod: dict[str, Any]) -> Memory:
    cgroup = cluster.memory_cgroup(pod, "compute")
    return Memory(int((cgroup / "memory.usage_in_bytes").read_text()),
                  int((cgroup / "memory.max_usage_in_bytes").read_text()))


def pod_cpu_seconds(cluster: NodeCluster, pod: dict[str, Any]) -> float:
    """The CPU time of every process the pod has run so far (its cpuacct cgroup, v1)."""
    root = Path("/sys/fs/cgroup/cpuacct") / (cluster.node_dir / "cgroup-root").read_text().strip()
    (cgroup,) = root.glob(f"kubepods*/**/pod{pod['metadata']['uid']}")
    return int((cgroup / "cpuacct.usage").read_text()) / 1e9


def pod_memory_request(pod: dict[str, Any]) -> int:
    """The memory the scheduler reserves for `pod`: its containers' requests, or its largest init
    container's if that is more, plus the pod's overhead."""
    def request(container: dict[str, Any]) -> int:
        return quantity_bytes(container.get("resources", {}).get("requests", {}).get("memory", "0"))
    spec = pod["spec"]
    running = sum(request(c) for c in spec["containers"])
    init = max((request(c) for c in spec.get("initContainers", [])), default=0)
    return max(running, init) + quantity_bytes(spec.get("overhead", {}).get("memory", "0"))


def processes(cluster: NodeCluster, pod: dict[str, Any]) -> set[str]:
    """The command names (15 characters at most) of the compute container's processes."""
    return set(cluster.processes(pod))


# --- measured on the node (bench/cluster.py) --------------------------------------------------


@dataclass(frozen=True)
class Round:
    """One VMI's life on one backend, as bench/cluster.py measures it."""

    backend: str
    up: float  # kubectl create -> VMI Running, seconds
    at_running: Memory  # the compute container at Running
    later: Memory  # the same `settle` seconds later (its peak: the highest so far)
    pod_peak: int  # the pod's memory cgroup's memory.max_usage_in_bytes then (every container)
    cpu: float  # the pod's CPU seconds until Running
    down: float  # kubectl delete -> launcher pod gone, seconds
    request: int  # the pod's memory request (pod_memory_request)


def _kubectl(cluster: NodeCluster, *args: str, stdin: str | None = None, timeout: float = 240) -> None:
    r = cluster.kubectl(*args, input=stdin, timeout=timeout)
    if r.rc != 0:
        raise ClusterError(f"kubectl {' '.join(args)} failed:\n{r.out}")


def one_round(cluster: NodeCluster, name: str, backend: str, shape: Shape, settle: float = 10) -> Round:
    """Creates VMI `name` of `shape` on `backend`, reads its pod once it is Running and `settle`
    seconds later, waits for its guest's boot line (a guest that has not booted yet ignores the
    ACPI button, and its delete would wait for the grace period), deletes it and waits for its
    pod to go. ClusterError when a step fails."""
    start = time.monotonic()
    _kubectl(cluster, "create", "-f", "-", stdin=cluster.yaml(vmi(name, backend, shape)))
    _kubectl(cluster, "wait", "--for=jsonpath={.status.phase}=Running", f"vmi/{name}", "--timeout=180s")
    up = time.monotonic() - start
    pod = cluster.launcher_pod(cluster.json("get", "vmi", name))
    at_running, cpu = compute_memory(cluster, pod), pod_cpu_seconds(cluster, pod)
    time.sleep(settle)  # the figure is defined as the reading this long after Running
    later, pod_peak = compute_memory(cluster, pod), pod_memory(cluster, pod).peak
    booted(cluster, pod, timeout=300)
    start = time.monotonic()
    _kubectl(cluster, "delete", "vmi", name, "--wait=false")
    _kubectl(cluster, "wait", "--for=delete", f"pod/{pod['metadata']['name']}", "--timeout=180s")
    return Round(backend, up, at_running, later, pod_peak, cpu, time.monotonic() - start, pod_memory_request(pod))


@dataclass(frozen=True)
class AtOnce:
    """`count` VMIs of one backend created by one `kubectl create`, each read as it reached Running."""

    backend: str
    up: dict[str, float]  # name -> kubectl create -> Running, seconds
    at_running: dict[str, Memory]
    cpu: dict[str, float]  # name -> its pod's CPU seconds until Running (read within 0.5 s of it)
    later: dict[str, Memory]  # every pod once all run


def at_once(cluster: NodeCluster, backend: str, count: int, batch: str, shape: Shape = SMALL,
            timeout: float = 600) -> AtOnce:
    """`count` VMIs of `shape` on `backend` in one `kubectl create` (label LABEL=batch); each pod
    is read as its VMI is seen Running; all are deleted and their pods gone before it returns."""
    names = [f"{batch}-{i}" for i in range(count)]
    objects = [labelled(vmi(n, backend, shape), batch) for n in names]
    result = AtOnce(backend, {}, {}, {}, {})
    watch = cluster.watch("vmi", "-l", f"{LABEL}={batch}", columns=PHASE_COLUMNS)
    try:
        time.sleep(0.5)  # the watch has listed (nothing yet) before the objects appear
        start = time.monotonic()
        _kubectl(cluster, "create", "-f", "-", stdin=cluster.yaml(objects), timeout=timeout)
        deadline = start + timeout
        while len(result.up) < count:
            if time.monotonic() > deadline:
                raise ClusterError(f"{count - len(result.up)} of {count} {backend} VMIs not Running "
                                   f"after {timeout:g} s")
            for name, at in watch.first("Running").items():
                if name not in result.up:
                    pod = cluster.launcher_pod(cluster.json("get", "vmi", name))
                    result.up[name] = at - start
                    result.cpu[name] = pod_cpu_seconds(cluster, pod)
                    result.at_running[name] = compute_memory(cluster, pod)
            time.sleep(0.5)
        for name in names:
            result.later[name] = compute_memory(cluster, cluster.launcher_pod(cluster.json("get", "vmi", name)))
    finally:
        watch.close()
        delete_batch(cluster, Batch("vmi", batch, names, {}), timeout=timeout)
    return result


def kill_launchers(cluster: NodeCluster, names: dict[str, str]) -> dict[str, float]:
    """One VMI of each backend (`names`: backend -> name), Running; SIGKILL of virt-launcher
    (QEMU) and of ch-launcher, one right after the other; the seconds from each kill until the
    VMI is seen Failed. Deletes both afterwards."""
    _kubectl(cluster, "create", "-f", "-", stdin=cluster.yaml([vmi(n, b) for b, n in names.items()]))
    watch = cluster.watch("vmi", columns=PHASE_COLUMNS)
    try:
        pods = {b: cluster.launcher_pod(cluster.wait_for_vmi(n, ready=True)) for b, n in names.items()}
        killed: dict[str, float] = {}
        for backend in (QEMU, CLOUD_HYPERVISOR):
            if backend == QEMU:
                (pid,) = cluster.processes(pods[backend])["virt-launcher"]
            else:
                pid = cluster.ch_launcher(pods[backend])
            os.kill(pid, signal.SIGKILL)
            killed[backend] = time.monotonic()
        cluster.wait_for(lambda: set(names.values()) <= set(watch.first("Failed")), "both VMIs to fail",
                         timeout=180, every=0.5)
        return {b: watch.first("Failed")[names[b]] - killed[b] for b in names}
    finally:
        watch.close()
        cluster.kubectl("delete", "vmi", *names.values(), "--ignore-not-found", "--wait=false")
