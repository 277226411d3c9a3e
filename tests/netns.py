"""Network namespaces the tests create, and sweeping what killed test processes left of them.

The pod sandbox (tests/functional/pod_sandbox.py) and the control plane (tests/apiserver/cluster.py)
each name their namespaces with the creating pid in the name, so a later run can tell a leftover
(its creator is gone: SIGKILL, a killed pytest) from a namespace another live run is using.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time


def pid_alive(pid: int) -> bool:
    """Whether a process `pid` exists (one of another user counts: EPERM)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def kill_processes_in(netns: str, timeout: float = 5.0) -> None:
    """SIGKILL every process whose network namespace is `netns` (they are ours: nobody else knows
    the name), and wait up to `timeout` until they are gone. A namespace that does not exist
    holds nothing."""
    try:
        target = os.stat(f"/run/netns/{netns}").st_ino
    except OSError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError):
                    if os.stat(f"/proc/{entry}/ns/net").st_ino == target:
                        found.append(int(entry))
        if not found:
            return
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


def sweep_stale_namespaces(name: re.Pattern[str]) -> None:
    """Delete the namespaces whose name `name` matches and whose creator (the pattern's first
    group, a pid) is gone, after killing what still runs in them. Nothing else is touched."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=20, check=False).stdout
    for line in listed.splitlines():
        netns = line.split(" ", 1)[0]
        match = name.match(netns)
        if match and not pid_alive(int(match.group(1))):
            kill_processes_in(netns)
            subprocess.run(["ip", "netns", "delete", netns], capture_output=True, timeout=20, check=False)
