"""The monitor: the first `ch-launcher` process, parent of the launcher and of the VMM.

It plays virt-launcher-monitor's part (kubevirt cmd/virt-launcher-monitor@d923fdb815cd: the
compute container's command, which runs virt-launcher as its child and to which QEMU is
reparented) for the reason given in docs/process-model.md: virt-handler finds the VMM among the
children of the launcher's parent (`GetQEMUProcess`, pkg/hypervisor/kvm/runtime.go), so the
launcher cannot be the container's first process, and something above it must collect the VMM.

`run(launcher)` makes this process a child subreaper (PID 1 of the container is one anyway; in
tests and under kubevirt-probe it is not), forks the launcher, and then only:

- reaps every child; the launcher's exit ends the monitor, every other exit (the VMM, orphans)
  is reported to the launcher through the pipe of `ch_launcher.ch.exits`;
- forwards SIGTERM, SIGINT, SIGQUIT and SIGHUP to the launcher (PID 1 ignores signals it has no
  handler for; the launcher runs the graceful shutdown);
- once the launcher has exited, stops what it left behind (a VMM after a launcher crash):
  SIGTERM, then SIGKILL after `LEFTOVER_GRACE` seconds, as the stock monitor gives QEMU 10 s;
- exits with the launcher's status (128 + n if a signal n ended it).

It never imports anything heavy and never runs threads: its memory is what the interpreter had
when it forked (shared with the launcher until the launcher writes to it).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from ch_launcher.ch.exits import encode

log = logging.getLogger("ch_launcher.monitor")

PR_SET_CHILD_SUBREAPER = 36
LEFTOVER_GRACE = 10.0
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)
_BLOCKED = {signal.SIGCHLD, *FORWARDED}


@dataclass(frozen=True)
class MonitorLink:
    """What the launcher (the monitor's child) gets: the monitor's pid, the read end of the
    exit-report pipe, and whether the monitor could become the subreaper."""

    monitor_pid: int
    exit_reports_fd: int
    subreaper: bool


def become_subreaper() -> bool:
    """prctl(PR_SET_CHILD_SUBREAPER): orphans below this process are reparented to it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def run(launcher: Callable[[MonitorLink], int]) -> int:
    """Fork `launcher` (called in the child with the link; its return value is the child's exit
    status) and monitor it; the exit status of this process."""
    subreaper = os.getpid() == 1 or become_subreaper()
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _BLOCKED)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(write_end)
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
            code = launcher(MonitorLink(os.getppid(), read_end, subreaper))
        except KeyboardInterrupt:
            code = 130
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            log.exception("ch-launcher failed")
        finally:
            logging.shutdown()
            os._exit(code)
    os.close(read_end)
    os.set_blocking(write_end, False)
    if not subreaper:
        log.error("cannot become a child subreaper: virt-handler will not find the VMM under the launcher's parent")
    status = _watch(pid, write_end)
    os.close(write_end)
    _stop_leftovers()
    return _exit_code(status)


def _watch(launcher: int, reports: int) -> int:
    """Reap and forward until the launcher exits; its wait status."""
    while True:
        info = signal.sigwaitinfo(_BLOCKED)
        if info.si_signo != signal.SIGCHLD:
            with contextlib.suppress(ProcessLookupError):
                os.kill(launcher, info.si_signo)
            continue
        for child, status in _reap():
            if child == launcher:
                return status
            try:
                os.write(reports, encode(child, status))
            except OSError:  # the launcher is not reading (gone, or a full pipe): nothing to tell
                pass


def _reap() -> list[tuple[int, int]]:
    reaped = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped.append((pid, status))


def _children() -> list[int]:
    pids: list[int] = []
    with contextlib.suppress(OSError):
        for tid in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError, ValueError), open(f"/proc/self/task/{tid}/children") as f:
                pids.extend(int(p) for p in f.read().split())
    return pids


def _stop_leftovers() -> None:
    """SIGTERM what is still running below us, SIGKILL it after LEFTOVER_GRACE seconds."""
    left = _children()
    if not left:
        _reap()
        return
    log.info("stopping %d process(es) the launcher left behind: %s", len(left), left)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + LEFTOVER_GRACE
    while _children():
        _reap()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        signal.sigtimedwait({signal.SIGCHLD}, min(remaining, 1.0))
    for pid in _children():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    while _children():
        signal.sigtimedwait({signal.SIGCHLD}, 1.0)
        _reap()
    _reap()


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code
