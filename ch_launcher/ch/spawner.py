"""The VMM spawner: the launcher's `virtqemud` child, which starts every `cloud-hypervisor`.

Why it exists (docs/process-model.md has the whole model and the upstream lines): before a VMI
runs, virt-handler raises the memlock limit of a process named `virtqemud` whose parent is the
launcher (`FindVirtqemudProcess`, kubevirt pkg/hypervisor/common/qemu.go@d923fdb815cd), because
libvirt's virtqemud forks QEMU and QEMU inherits the limit. Cloud Hypervisor pins all guest
memory for VFIO DMA at `vm.boot`, so the VMM must inherit that raised limit the same way: the
spawner is forked by the launcher before the command socket is ready (so it exists when
virt-handler looks), is named `virtqemud`, and forks each VMM afterwards.

Once the VMI runs, virt-handler looks for the VMM as a `qemu-system*` child of the launcher's
*parent* (`GetQEMUProcess`, pkg/hypervisor/kvm/runtime.go@d923fdb815cd). So the spawner forks
twice: the intermediate child exits at once and the VMM is reparented to the nearest
subreaper above it, the monitor (`ch_launcher.monitor`), which is the launcher's parent. The VMM
is executed through a symbolic link named `qemu-system-cloud-hypervisor` (`vmm_alias`): Linux
names a process after the path it was executed by (its `comm`, 15 characters:
`qemu-system-clo`), which is what virt-handler's process search (go-ps `Executable()`) reads;
`/proc/<pid>/exe` and the command line still say `cloud-hypervisor`.

Each VMM: its own session, stdin from /dev/null, stdout/stderr appended to its log file,
default signal dispositions and an empty signal mask, and no file descriptor of the launcher. The spawner hands the launcher a pidfd of the VMM (opened by the VMM's first parent,
so it cannot race with the VMM's exit) for exit notification and race-free signals.

The spawner process is tiny and single-threaded: it reads one JSON request at a time from a
SOCK_SEQPACKET socket pair, and exits when the launcher closes its end (or dies).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import threading
from collections.abc import Mapping, Sequence

from .proctitle import set_cmdline, set_comm

SPAWNER_NAME = "virtqemud"  # the name FindVirtqemudProcess compares with (exactly)
VMM_ALIAS = "qemu-system-cloud-hypervisor"  # GetQEMUProcess: prefix qemu-system (kvm and mshv runtimes)
_MAX_MESSAGE = 1 << 20
_RESET_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


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

    def __init__(self, pid: int, sock: socket.socket) -> None:
        self.pid = pid
        self._sock = sock
        self._lock = threading.Lock()
        self.returncode: int | None = None

    @classmethod
    def start(cls) -> Spawner:
        """Fork the spawner. Raises OSError if the fork fails."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child, which never returns
            code = 1
            try:
                ours.close()
                code = _serve(theirs)
            finally:
                os._exit(code)
        theirs.close()
        return cls(pid, ours)

    def spawn(self, exe: str, argv: Sequence[str], *, env: Mapping[str, str], log_file: str) -> tuple[int, int]:
        """Start `exe` with `argv` (argv[0] included); (pid, pidfd) of the VMM. The VMM's parent
        is the subreaper above the launcher once this returns. Raises SpawnError."""
        request = json.dumps({"exe": exe, "argv": list(argv), "env": dict(env), "log": log_file}).encode()
        with self._lock:
            if self.returncode is not None or self._reap():
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

    def _reap(self) -> bool:
        """True if the spawner has exited (and is now reaped)."""
        if self.returncode is not None:
            return True
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            self.returncode = -1
            return True
        if pid == 0:
            return False
        self.returncode = os.waitstatus_to_exitcode(status)
        return True

    def alive(self) -> bool:
        with self._lock:
            return not self._reap()

    def close(self, timeout: float = 2.0) -> None:
        """Close the spawner's socket (it exits on that) and reap it; SIGKILL after `timeout`."""
        with contextlib.suppress(OSError):
            self._sock.close()
        if self.returncode is not None:
            return
        try:
            pidfd = os.pidfd_open(self.pid)
        except OSError:
            self._reap()
            return
        try:
            import select

            if not select.select([pidfd], [], [], timeout)[0]:
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                _pid, status = os.waitpid(self.pid, 0)
                self.returncode = os.waitstatus_to_exitcode(status)
        finally:
            os.close(pidfd)


# --- the spawner process ------------------------------------------------------------------------


def _serve(sock: socket.socket) -> int:  # pragma: no cover - child process (tested through Spawner)
    set_comm(SPAWNER_NAME)
    set_cmdline(f"{SPAWNER_NAME}: the VMM spawner of ch-launcher (pid {os.getppid()})")
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)  # it ends when the launcher closes the socket
    keep = {0, 1, 2, sock.fileno()}
    for fd in _open_fds():
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)
    while True:
        try:
            data = sock.recv(_MAX_MESSAGE)
        except InterruptedError:
            continue
        except OSError:
            return 0
        if not data:
            return 0
        pidfd = None
        try:
            reply, pidfd = _spawn(json.loads(data))
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the launcher
            reply = {"error": f"cannot start the VMM: {exc}"}
        try:
            socket.send_fds(sock, [json.dumps(reply).encode()], [] if pidfd is None else [pidfd])
        except OSError:
            return 0
        finally:
            if pidfd is not None:
                os.close(pidfd)


def _open_fds() -> list[int]:
    try:
        return [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:
        return []


def _spawn(req: dict) -> tuple[dict, int | None]:  # pragma: no cover - child process
    """Fork twice; the grandchild executes the VMM. (reply, pidfd of the VMM or None)."""
    exe, argv, env, log = req["exe"], req["argv"], req["env"], req["log"]
    # Emptied at each spawn, as VmmProcess.spawn does: the log holds this VMM's words only.
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        up, down = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        first = os.fork()
        if first == 0:
            code = 0
            try:
                up.close()
                _intermediate(down, exe, argv, env, out)
            except BaseException:  # noqa: BLE001
                code = 1
            finally:
                os._exit(code)
        down.close()
        try:
            msg, fds, _flags, _addr = socket.recv_fds(up, 65536, 1)
        finally:
            up.close()
            with contextlib.suppress(ChildProcessError):
                os.waitpid(first, 0)
    finally:
        os.close(out)
    if not msg:
        for fd in fds:
            os.close(fd)
        return {"error": "the VMM's first parent exited before reporting"}, None
    result = json.loads(msg)
    pidfd = fds[0] if fds else None
    if result.get("error"):
        if pidfd is not None:
            os.close(pidfd)
        # the grandchild exits 127; the monitor reaps it
        return {"error": f"cannot execute {argv[0]} (as {exe}): {result['error']}", "pid": result.get("pid")}, None
    return {"pid": result["pid"]}, pidfd


def _intermediate(down: socket.socket, exe: str, argv: list[str], env: dict[str, str],
                  out: int) -> None:  # pragma: no cover - child process
    """The VMM's first parent: fork it, open its pidfd, wait until it executed (or failed to),
    report both, and exit (the VMM is then reparented to the subreaper above the launcher)."""
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    vmm = os.fork()
    if vmm == 0:
        try:
            os.close(err_r)
            down.close()
            os.setsid()
            for sig in _RESET_SIGNALS:
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out, 1)
            os.dup2(out, 2)
            for fd in _open_fds():
                if fd > 2 and fd != err_w:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            os.execve(exe, argv, env)
        except BaseException as exc:  # noqa: BLE001
            with contextlib.suppress(OSError):
                os.write(err_w, str(exc).encode()[:4000])
        finally:
            os._exit(127)
    os.close(err_w)
    pidfd = None
    with contextlib.suppress(OSError):
        pidfd = os.pidfd_open(vmm)  # our child: it cannot be reaped by anyone else yet
    error = b""
    while True:
        chunk = os.read(err_r, 4096)  # EOF once exec succeeded (CLOEXEC) or the child exited
        if not chunk:
            break
        error += chunk
    os.close(err_r)
    reply = json.dumps({"pid": vmm, "error": error.decode(errors="replace")}).encode()
    socket.send_fds(down, [reply], [] if pidfd is None else [pidfd])
