"""What the launcher reads from its pod, and how it gives memory back."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ch_launcher.convert import PodFacts


def release_memory() -> None:
    """Give back what translation and preparation allocated (pydantic validation, ISO
    buffers): collect cycles, then return free heap pages to the kernel (glibc's malloc_trim).
    A launcher idles for the life of its VM, so its resident size is what a node pays for."""
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def read_pod_facts(environ: Mapping[str, str] | None = None, sys_root: str = "/sys") -> PodFacts:
    """What translation needs from the pod: environment, the container's cpuset, link MTUs and
    MACs, and the network-info downward-API file (SR-IOV and vhost-user device info; its path
    can be moved with env CH_NETWORK_INFO, for tests)."""
    from ch_launcher.convert import PodFacts
    from ch_launcher.convert.netinfo import NETWORK_INFO_PATH
    from ch_launcher.stats import parse_cpu_list

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
    with contextlib.suppress(OSError), open(pod_env.get("CH_NETWORK_INFO", NETWORK_INFO_PATH), errors="replace") as f:
        network_info = f.read()
    return PodFacts(environ=pod_env, cpuset=cpuset, link_mtu=mtus, link_mac=macs, network_info=network_info)
