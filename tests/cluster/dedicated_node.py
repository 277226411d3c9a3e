"""node03: a worker started for dedicated CPUs and hugepages (tests/cluster/test_dedicated_node.py).

Its kubelet runs the static CPU manager (`STATIC_CPU_MANAGER`, node-up.sh's KUBELET_CONFIG_EXTRA:
CPU 0 stays in the shared pool, CPU 1 can go to one Guaranteed pod, allocatable CPU 1.9) and
offers `hugepages-2Mi` from a pool of POOL pages raised on the machine just before it starts
(kubelet reads the pool once, at start). The KubeVirt CR has the CPUManager gate on
(tests/cluster/node.py), so virt-handler labels it `cpumanager=true`. It gets the cluster's
launcher images and the containerDisk, not the add-on's server image.

Why not node01: the static CPU manager and the pool are settings a kubelet takes at start, and
the pool is the machine's (`vm.nr_hugepages`): held for the whole cluster suite it would keep
the hugepage lock (tests/hugepages.py) from every other story that needs it for as long. node03
lives for its module only, and the pool with it (`running()`).

Failure behaviour: `running()` stops the node and puts the pool back whatever happens; a script
that fails raises ClusterError with its output (SecondNode).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.apiserver.cluster import ClusterError
from tests.cluster.images import Archive, Images
from tests.cluster.node import NodeCluster
from tests.cluster.two_nodes import SecondNode
from tests.hugepages import hugepage_pool

NAME = "node03"
STATIC_CPU_MANAGER = "cpuManagerPolicy: static\nkubeReserved: {cpu: 100m}"
POOL = 64  # 2 MiB pages: 128 MiB of hugepages-2Mi


def _images(images: Images) -> tuple[Archive, ...]:
    return (images.launcher, images.virt_launcher, images.disk)


class DedicatedNode:
    """node03 of the cluster (module docstring)."""

    def __init__(self, cluster: NodeCluster) -> None:
        self.cluster = cluster
        self.node = SecondNode(cluster, NAME, "10.250.0.3", "10.244.3.0/24", kubelet_config=STATIC_CPU_MANAGER,
                               archives=_images)

    @contextlib.contextmanager
    def running(self) -> Iterator[DedicatedNode]:
        """The pool raised, node03 up with the images; afterwards its pods gone (60 s at most),
        the node stopped, the pool back."""
        with hugepage_pool(POOL):
            self.node.start()
            try:
                yield self
                with contextlib.suppress(ClusterError):
                    self.cluster.wait_for(lambda: not self.node.pods(), f"the pods on {NAME} to go", timeout=60,
                                          every=1)
            finally:
                self.node.stop()

    @property
    def name(self) -> str:
        return self.node.name

    def cpu_manager_state(self) -> dict[str, Any]:
        """kubelet's `cpu_manager_state` checkpoint: its policy, the shared pool and each
        container's exclusive CPUs."""
        state: dict[str, Any] = json.loads((self.node.dir / "kubelet" / "cpu_manager_state").read_text())
        return state

    def cgroup(self, pod: dict[str, Any], container: str, hierarchy: str) -> Path:
        """The cgroup (v1, `hierarchy`: cpuset, hugetlb, ...) kubelet made for `container` of `pod`."""
        status = next(s for s in pod["status"]["containerStatuses"] if s["name"] == container)
        container_id = status["containerID"].split("://", 1)[1]
        root = Path("/sys/fs/cgroup") / hierarchy / (self.node.dir / "cgroup-root").read_text().strip()
        found = list(root.glob(f"kubepods*/**/pod{pod['metadata']['uid']}/{container_id}"))
        if len(found) != 1:
            raise ClusterError(f"no single {hierarchy} cgroup for {container} of {pod['metadata']['name']}: {found}")
        return found[0]

    def processes(self, pod: dict[str, Any], container: str = "compute") -> dict[int, tuple[str, int]]:
        """The processes of `container` of `pod` (host PIDs): their comm and their parent's PID."""
        found: dict[int, tuple[str, int]] = {}
        for pid in self.cgroup(pod, container, "cpuset").joinpath("cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{pid}/stat").read_text()
                comm = stat[stat.index("(") + 1:stat.rindex(")")]
                found[int(pid)] = (comm, int(stat[stat.rindex(")") + 2:].split()[1]))
        return found


def threads(pid: int) -> list[tuple[str, str]]:
    """Each thread of process `pid`: its name and `Cpus_allowed_list` (/proc/PID/task/TID/status),
    where the kernel lets it run (its affinity within its cpuset)."""
    found = []
    for task in sorted(Path(f"/proc/{pid}/task").iterdir(), key=lambda t: int(t.name)):
        with contextlib.suppress(OSError):
            status = dict(line.split(":\t", 1) for line in (task / "status").read_text().splitlines() if ":\t" in line)
            found.append((status["Name"], status["Cpus_allowed_list"]))
    return found
