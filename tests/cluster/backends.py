"""The same VMI on either backend of the real node, and what its launcher pod costs there: for the
stories of tests/cluster/test_beside_qemu.py and the side-by-side figures of bench/cluster.py.

A VMI of one `Shape` differs between the backends only where this node or Cloud Hypervisor
requires it: the add-on's annotation (Cloud Hypervisor) or none (KubeVirt runs it on QEMU), and,
with a NIC, its model: virtio for Cloud Hypervisor (the only model it has), `e1000e` for QEMU (this
node has no `/dev/vhost-net`, so a virtio NIC keeps a QEMU pod Pending). Both boot the
containerDisk of `images.py` (QEMU's SeaBIOS boots its boot sector, Cloud Hypervisor the tiny
guest as firmware), one vCPU, no display. A VMI with a NIC sets `dnsPolicy: None` and the
`dnsConfig` a cluster's kubelet would write (the node's kubelet has no cluster DNS and writes
`search .`, on which virt-launcher's DHCP server panics).

The cgroup readings are cgroup v1 (this machine): `memory.usage_in_bytes` and
`memory.max_usage_in_bytes` of the `compute` container's memory cgroup, `cpuacct.usage` of the
pod's cpuacct cgroup (every container's CPU, init containers included).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ch_launcher.kubevirt.quantity import quantity_bytes
from tests.cluster.images import DISK_IMAGE, LAUNCHER_IMAGE
from tests.cluster.node import NodeCluster
from tests.cluster.objects import CH

CLOUD_HYPERVISOR, QEMU = "cloud-hypervisor", "qemu"
BACKENDS = (CLOUD_HYPERVISOR, QEMU)
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
