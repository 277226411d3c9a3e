"""The launcher's handle on its VMM spawner, the `virtqemud` child that starts every VMM.

Why it exists (docs/process-model.md has the whole model and the upstream lines): before a VMI
runs, virt-handler raises the memlock limit of a process named `virtqemud` whose parent is the
launcher (`FindVirtqemudProcess`, kubevirt pkg/hypervisor/common/qemu.go@d923fdb815cd), because
libvirt's virtqemud forks QEMU and QEMU inherits the limit. Cloud Hypervisor pins all guest
memory for VFIO DMA at `vm.boot`, so the VMM must inherit that raised limit the same way: the
spawner is started by the launcher before the command socket is ready (so it exists when
virt-handler looks), is named `virtqemud`, and forks each VMM afterwards (its program:
`ch_launcher.ch.virtqemud`).

Once the VMI runs, virt-handler looks for the VMM as a `qemu-system*` child of the launcher's
*parent* (`GetQEMUProcess`, pkg/hypervisor/kvm/runtime.go@d923fdb815cd). So the spawner forks
twice: the intermediate child exits at once and the VMM is reparented to the nearest
subreaper above it, the monitor (`ch_launcher.monitor`), which is the launcher's parent. The VMM
is executed through a symbolic link named `qemu-system-cloud-hypervisor` (`vmm_alias`): Linux
names a process after the path it was executed by (its `comm`, 15 characters:
`qemu-system-clo`), which is what virt-handler's process search (go-ps `Executable()`) reads;
`/proc/<pid>/exe` and the command line still say `cloud-hypervisor`.

`Spawner.spawn` returns the VMM's pid and a pidfd (opened by the VMM's first parent, so it
cannot race with the VMM's exit) for exit notification and race-free signals.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence

from .virtqemud import SPAWNER_NAME

VMM_ALIAS = "qemu-system-cloud-hypervisor"  # GetQEMUProcess: prefix qemu-system (kvm and mshv runtimes)
_MAX_MESSAGE = 1 << 20
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from ch_launcher.ch.virtqemud import main; main(int(sys.argv[2]))"


class SpawnError(RuntimeError):
    """The VMM could not be started; the message says why (nothing is left running)."""


def vmm_alias(binary: str, directory: str) -> str:
    """A symbolic link `<directory>/qemu-system-cloud-hypervisor` to `binary` (resolved), made
    or refreshed atomically; its path. Raises OSError if it cannot be made, SpawnError if
    `binary` is not found."""
    found = binary if os.sep in binary else shutil.which(binary)
    if not found:
        raise SpawnError(f"cannot find {binary}")
    target = os.path.realpath(found)
    link = os.path.join(directory, VMM_ALIAS)
    with contextlib.suppress(OSError):
        if os.readlink(link) == target:
            return link
    os.makedirs(directory, mode=0o700, exist_ok=True)
    tmp = f"{link}.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)
    return link


class Spawner:
    """The launcher's handle on its spawner child. Start it with `Spawner.start()` before the
    launcher starts any thread (it forks)."""

    def __init__(self, proc: subprocess.Popen[bytes], sock: socket.socket) -> None:
        self._proc = proc
        self.pid = proc.pid
        self._sock = sock
        self._lock = threading.Lock()

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    @classmethod
    def start(cls, timeout: float = 10.0) -> Spawner:
        """Start the spawner (`ch_launcher.ch.virtqemud` in a small interpreter: `python -I -S`,
        nothing but the standard library) and wait until it has taken its name. Raises
        SpawnError if it cannot be started or does not answer within `timeout` seconds."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _BOOT, _PACKAGE_PARENT, str(theirs.fileno())],
                stdin=subprocess.DEVNULL, pass_fds=[theirs.fileno()], close_fds=True)
        except OSError as exc:
            raise SpawnError(f"cannot start the VMM spawner: {exc}") from exc
        finally:
            theirs.close()
        spawner = cls(proc, ours)
        ours.settimeout(timeout)
        try:
            hello = ours.recv(64)
        except OSError as exc:
            spawner.close()
            raise SpawnError(f"the VMM spawner (pid {proc.pid}) did not start: {exc}") from exc
        ours.settimeout(None)
        if hello != b"ready":
            spawner.close()
            raise SpawnError(f"the VMM spawner (pid {proc.pid}) did not start (exit status {proc.poll()})")
        return spawner

    def spawn(self, exe: str, argv: Sequence[str], *, env: Mapping[str, str], log_file: str) -> tuple[int, int]:
        """Start `exe` with `argv` (argv[0] included); (pid, pidfd) of the VMM. The VMM's parent
        is the subreaper above the launcher once this returns. Raises SpawnError."""
        request = json.dumps({"exe": exe, "argv": list(argv), "env": dict(env), "log": log_file}).encode()
        with self._lock:
            if self._proc.poll() is not None:
                raise SpawnError(f"the VMM spawner ({SPAWNER_NAME}, pid {self.pid}) is gone "
                                 f"(exit status {self.returncode})")
            try:
                self._sock.sendall(request)
                data, fds, _flags, _addr = socket.recv_fds(self._sock, _MAX_MESSAGE, 1)
            except OSError as exc:
                raise SpawnError(f"the VMM spawner ({SPAWNER_NAME}, pid {self.pid}) did not answer: {exc}") from exc
        if not data:
            for fd in fds:
                os.close(fd)
            raise SpawnError(f"the VMM spawner ({SPAWNER_NAME}, pid {self.pid}) exited")
        reply = json.loads(data)
        if "error" in reply:
            for fd in fds:
                os.close(fd)
            raise SpawnError(reply["error"])
        if len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise SpawnError(f"the VMM spawner returned no pidfd for pid {reply.get('pid')}")
        return int(reply["pid"]), fds[0]

    def alive(self) -> bool:
        return self._proc.poll() is None

    def close(self, timeout: float = 2.0) -> None:
        """Close the spawner's socket (it exits on that) and reap it; SIGKILL after `timeout`."""
        with contextlib.suppress(OSError):
            self._sock.close()
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
