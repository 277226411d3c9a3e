"""The VMM's vCPU threads, as the contract tests read them from /proc."""

from __future__ import annotations

import os


def vcpu_threads(pid: int) -> list[str]:
    names = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue  # the thread ended meanwhile
        if comm.startswith("vcpu"):
            names.append(comm)
    return sorted(names)
