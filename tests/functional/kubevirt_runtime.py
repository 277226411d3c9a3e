"""virt-handler's view of a launcher pod's processes, as its KVM runtime computes it.

A Python rendering of the lookups (not of what they then do), for assertions in our tests;
kubevirt-probe's `runtime` scenario runs KubeVirt's own Go code. Every function cites the lines
it follows (kubevirt/kubevirt @d923fdb815cd):

- `socket_owner`: pkg/virt-handler/isolation/detector.go `getPid` (SO_PEERCRED of a connection
  to launcher-sock) and `getPPid` (go-ps `PPid()` of that pid);
- `find_virtqemud`: pkg/hypervisor/common/qemu.go `FindVirtqemudProcess` (a process whose parent
  is the socket owner and whose `Executable()` is exactly `virtqemud`);
- `find_qemu`: pkg/hypervisor/kvm/runtime.go `GetQEMUProcess` -> common `FindIsolatedQemuProcess`
  (a child of the socket owner's parent whose `Executable()` starts with `qemu-system`, else
  `qemu-kvm`).

go-ps reads `Executable()` from `/proc/<pid>/stat` (the `comm` in parentheses) and `PPid()` from
the same line (github.com/mitchellh/go-ps process_unix.go).
"""

from __future__ import annotations

import os
import socket
import struct

QEMU_PREFIXES = ("qemu-system", "qemu-kvm")


def stat(pid: int) -> tuple[str, int]:
    """(comm, ppid) of `pid` from /proc/<pid>/stat, as go-ps parses it."""
    with open(f"/proc/{pid}/stat") as f:
        data = f.read()
    comm = data[data.index("(") + 1 : data.rindex(")")]
    ppid = int(data[data.rindex(")") + 2 :].split()[1])
    return comm, ppid


def processes() -> list[tuple[int, str, int]]:
    """(pid, comm, ppid) of every process (go-ps `Processes()`)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                comm, ppid = stat(int(name))
            except (OSError, ValueError):
                continue
            out.append((int(name), comm, ppid))
    return out


def socket_owner(cmd_socket: str) -> tuple[int, int]:
    """(pid, ppid) of the process that owns launcher-sock, as the isolation detector finds it."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(cmd_socket)
        creds = s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, _uid, _gid = struct.unpack("3i", creds)
    assert pid != 0, "the detected PID is 0"
    return pid, stat(pid)[1]


def find_virtqemud(launcher_pid: int) -> int | None:
    for pid, comm, ppid in processes():
        if ppid == launcher_pid and comm == "virtqemud":
            return pid
    return None


def find_qemu(ppid: int) -> int:
    children = [(pid, comm) for pid, comm, parent in processes() if parent == ppid]
    for prefix in QEMU_PREFIXES:
        for pid, comm in children:
            if comm.startswith(prefix):
                return pid
    raise LookupError(f"no QEMU process found under process {ppid} child processes")


def memlock(pid: int) -> tuple[str, str]:
    """(soft, hard) 'Max locked memory' of `pid` as /proc/<pid>/limits shows it."""
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max locked memory"):
                soft, hard = line.split()[3:5]
                return soft, hard
    raise LookupError(f"no memlock line for {pid}")


def can_raise_memlock_to_unlimited() -> bool:
    """Whether this process may do what virt-handler's AdjustResources does: raise another
    process's memlock limit to unlimited (needs CAP_SYS_RESOURCE unless the hard limit already
    is unlimited). Sandboxes without CAP_SYS_RESOURCE cannot; a node's virt-handler can."""
    import resource
    import subprocess

    child = subprocess.Popen(["sleep", "30"])
    try:
        resource.prlimit(child.pid, resource.RLIMIT_MEMLOCK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        return True
    except PermissionError:
        return False
    finally:
        child.kill()
        child.wait()


def adjust_resources(pid: int) -> None:
    """virt-handler's `common.SetProcessMemoryLockUnlimited(pid)` (pkg/hypervisor/common/
    process.go): prlimit(RLIMIT_MEMLOCK) soft and hard to unlimited. Where that is not
    permitted here (see `can_raise_memlock_to_unlimited`), the soft limit is raised to the
    hard one instead, by a process of the target's own uid (without CAP_SYS_RESOURCE even root
    may not touch another uid's limits): the same inheritance to show, with a smaller figure."""
    import resource
    import subprocess

    try:
        resource.prlimit(pid, resource.RLIMIT_MEMLOCK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        return
    except PermissionError:
        pass
    hard = memlock(pid)[1]
    uid = os.stat(f"/proc/{pid}").st_uid
    subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "prlimit", f"--pid={pid}",
                    f"--memlock={hard}:{hard}"], check=True)
