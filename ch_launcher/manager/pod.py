"""What the launcher reads from its pod, and how it gives memory back."""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ch_launcher.manager import features

if TYPE_CHECKING:
    from ch_launcher.convert import PodFacts
    from ch_launcher.convert.topology import HostTopology


MADV_PAGEOUT = 21  # linux/mman.h (Linux 5.4+): reclaim these pages now


def release_memory(maps_path: str = "/proc/self/maps") -> int:
    """Give back what start-up, translation and preparation left resident, once the VM has
    booted: collect cycles, move every object left (modules, models, the plan) to the garbage
    collector's permanent generation (gc.freeze: later collections never walk them again, so a
    full collection no longer pauses the event loop for tens of milliseconds in the middle of a
    GetDomain), return free heap pages to the kernel (glibc's malloc_trim), and ask
    the kernel to reclaim the file pages the launcher has mapped (MADV_PAGEOUT on each
    file-backed mapping: the interpreter, gRPC's and protobuf's shared objects, ...). Start-up
    touched far more of them than serving a running VM does; the pages still in use fault
    straight back in, the rest leave the launcher's resident set (and the page cache, when no
    other process maps them). Anonymous memory is never touched. A launcher idles for the life
    of its VM, so its resident size is what a node pays for; bench/footprint.py measures it.

    Returns the number of mappings advised; never raises (an old kernel without MADV_PAGEOUT
    only loses the last step)."""
    ctypes = features.ctypes
    gc.collect()
    gc.freeze()
    advised = 0
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.malloc_trim(0)
        libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        with open(maps_path) as f:
            for line in f:
                fields = line.split(maxsplit=5)
                path = fields[5].strip() if len(fields) > 5 else ""
                if not path.startswith("/") or path.startswith("/dev/") or path.endswith("(deleted)"):
                    continue  # anonymous, [heap]/[stack]/[vdso], devices: not file pages to reclaim
                start, end = (int(x, 16) for x in fields[0].split("-"))
                if libc.madvise(start, end - start, MADV_PAGEOUT) == 0:
                    advised += 1
    return advised


def read_pod_facts(environ: Mapping[str, str] | None = None, sys_root: str = "/sys") -> PodFacts:
    """What translation needs from the pod: environment, the container's cpuset and memory
    nodes, the host's CPU topology, link MTUs and MACs, and the network-info downward-API file
    (SR-IOV and vhost-user device info; its path can be moved with env CH_NETWORK_INFO, for
    tests). Env CH_HOST_ROOT (tests) prefixes the host paths checked for VFIO devices."""
    convert, parse_cpu_list = features.convert, features.stats.parse_cpu_list
    cpuset: tuple[int, ...] = ()
    for path in (f"{sys_root}/fs/cgroup/cpuset.cpus.effective", f"{sys_root}/fs/cgroup/cpuset/cpuset.cpus"):
        try:
            with open(path) as f:
                cpuset = parse_cpu_list(f.read())
            break
        except (OSError, ValueError):
            continue
    if not cpuset:
        with contextlib.suppress(AttributeError, OSError):
            cpuset = tuple(sorted(os.sched_getaffinity(0)))
    memory_nodes: tuple[int, ...] = ()
    for path in (f"{sys_root}/fs/cgroup/cpuset.mems.effective", f"{sys_root}/fs/cgroup/cpuset/cpuset.mems"):
        try:
            with open(path) as f:
                memory_nodes = parse_cpu_list(f.read())
            break
        except (OSError, ValueError):
            continue
    mtus: dict[str, int] = {}
    macs: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for link in os.listdir(f"{sys_root}/class/net"):
            with contextlib.suppress(OSError, ValueError), open(f"{sys_root}/class/net/{link}/mtu") as f:
                mtus[link] = int(f.read().strip())
            with contextlib.suppress(OSError), open(f"{sys_root}/class/net/{link}/address") as f:
                macs[link] = f.read().strip()
    pod_env = dict(os.environ if environ is None else environ)
    network_info = None
    with contextlib.suppress(OSError), open(pod_env.get("CH_NETWORK_INFO", convert.netinfo.NETWORK_INFO_PATH),
                                                errors="replace") as f:
        network_info = f.read()
    return convert.PodFacts(environ=pod_env, cpuset=cpuset, link_mtu=mtus, link_mac=macs, network_info=network_info,
                    memory_nodes=memory_nodes, topology=read_host_topology(sys_root),
                    host_root=pod_env.get("CH_HOST_ROOT", ""))


def read_host_topology(sys_root: str = "/sys") -> HostTopology | None:
    """NUMA cells (`devices/system/node/node<N>/cpulist`, `distance`) and each CPU's core
    siblings (`devices/system/cpu/cpu<N>/topology/thread_siblings_list`); None if unreadable."""
    topology, parse_cpu_list = features.convert.topology, features.stats.parse_cpu_list
    node_dir = f"{sys_root}/devices/system/node"
    try:
        nodes = sorted(int(n[4:]) for n in os.listdir(node_dir) if n.startswith("node") and n[4:].isdigit())
    except OSError:
        return None

    def siblings(cpu: int) -> tuple[int, ...]:
        try:
            with open(f"{sys_root}/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
                return parse_cpu_list(f.read())
        except (OSError, ValueError):
            return ()

    cells = []
    for node in nodes:
        try:
            with open(f"{node_dir}/node{node}/cpulist") as f:
                cpus = parse_cpu_list(f.read())
        except (OSError, ValueError):
            return None
        distances: tuple[tuple[int, int], ...] = ()
        with contextlib.suppress(OSError, ValueError), open(f"{node_dir}/node{node}/distance") as f:
            distances = tuple(zip(nodes, (int(d) for d in f.read().split()), strict=False))
        cells.append(topology.HostCell(node, tuple(topology.HostCpu(c, siblings(c)) for c in cpus), distances))
    return topology.HostTopology(tuple(cells)) if cells else None
