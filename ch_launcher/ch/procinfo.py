"""What /proc says about the pod's processes: names, parents, limits, capabilities, threads.

Used to check the process model virt-handler relies on (docs/process-model.md) and to tune the
VMM's threads (dedicated CPUs, realtime). Reading another process's entries needs the same uid
(or root), which is the case for every process of the launcher pod. Every function answers
None / False / an empty list rather than raising when a process is gone.
"""

from __future__ import annotations

import contextlib
import os
import resource

CAP_IPC_LOCK = 14  # include/uapi/linux/capability.h


def comm(pid: int) -> str | None:
    """The process's name as /proc/<pid>/stat shows it (what go-ps `Executable()` reads)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.find("(") + 1 : data.rfind(")")]


def parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def memlock(pid: int) -> int | None:
    """The soft RLIMIT_MEMLOCK of `pid` in bytes; -1 for unlimited; None if unknown."""
    try:
        soft, _hard = resource.prlimit(pid, resource.RLIMIT_MEMLOCK)
    except (OSError, ValueError):
        return None
    return -1 if soft == resource.RLIM_INFINITY else soft


def has_capability(pid: int, cap: int) -> bool:
    """Whether `cap` is in the process's effective set (CapEff of /proc/<pid>/status)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> cap & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def can_lock(pid: int, size: int) -> bool:
    """Whether `pid` may lock (pin) `size` bytes: CAP_IPC_LOCK, or a soft memlock limit at least
    that large (the test vfio_iommu_type1 and mlock make, mm/mlock.c `can_do_mlock`)."""
    if has_capability(pid, CAP_IPC_LOCK):
        return True
    limit = memlock(pid)
    return limit is not None and (limit == -1 or limit >= size)


def describe_memlock(pid: int) -> str:
    limit = memlock(pid)
    text = "unknown" if limit is None else "unlimited" if limit == -1 else f"{limit} bytes"
    return text + (" (CAP_IPC_LOCK)" if has_capability(pid, CAP_IPC_LOCK) else "")


def threads(pid: int) -> list[tuple[int, str]]:
    """(tid, comm) of every thread of `pid`."""
    out = []
    with contextlib.suppress(OSError):
        for name in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/task/{name}/comm") as f:
                out.append((int(name), f.read().strip()))
    return sorted(out)


def affinity(tid: int) -> set[int]:
    try:
        return os.sched_getaffinity(tid)
    except OSError:
        return set()
