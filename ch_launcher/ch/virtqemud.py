"""The VMM spawner process, the launcher's child that virt-handler knows as `virtqemud`.

Why it exists is in `ch_launcher.ch.spawner` and docs/process-model.md. This is its program,
run by `Spawner.start()` in a small interpreter (`python -I -S`, only the standard library and
this package's `proctitle`), so it costs little more than a bare interpreter. It names itself
`virtqemud`, says "ready", then serves one JSON request at a time on its SOCK_SEQPACKET socket:
`{"exe", "argv", "env", "log"}` -> `{"pid"}` plus the VMM's pidfd (SCM_RIGHTS), or `{"error"}`.
It exits when the launcher closes the socket (or dies).

Each VMM is forked twice (the intermediate child exits at once, so the VMM is reparented to the
subreaper above the launcher, the monitor) and executed with its own session, stdin from
/dev/null, stdout/stderr appended to its log file, default signal dispositions, an empty signal
mask and no other file descriptor. Its first parent opens its pidfd (no race with its exit) and
waits for the exec to succeed or fail (a CLOEXEC pipe) before reporting.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys

from ch_launcher.ch.proctitle import set_cmdline, set_comm

SPAWNER_NAME = "virtqemud"  # the name FindVirtqemudProcess compares with (exactly)
_MAX_MESSAGE = 1 << 20
_RESET_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def main(fd: int) -> None:
    """The spawner process: serve the launcher on socket `fd` until it closes it."""
    sys.exit(_serve(socket.socket(fileno=fd)))


def _serve(sock: socket.socket) -> int:
    set_comm(SPAWNER_NAME)
    set_cmdline(f"{SPAWNER_NAME}: the VMM spawner of ch-launcher (pid {os.getppid()})")
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)  # it ends when the launcher closes the socket
    try:
        sock.send(b"ready")  # named: virt-handler may look now
    except OSError:
        return 0
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
        reply: dict[str, object]
        try:
            req = json.loads(data)
            reply, pidfd = _spawn(req["exe"], req["argv"], req["env"], req["log"])
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


def _spawn(exe: str, argv: list[str], env: dict[str, str], log: str) -> tuple[dict[str, object], int | None]:
    """Fork twice; the grandchild executes the VMM. (reply, pidfd of the VMM or None)."""
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
                  out: int) -> None:
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
