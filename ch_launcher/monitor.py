"""The monitor: the first `ch-launcher` process, parent of the launcher and of the VMM.

It plays virt-launcher-monitor's part (kubevirt cmd/virt-launcher-monitor@d923fdb815cd: the
compute container's command, which runs virt-launcher as its child and to which QEMU is
reparented) for the reason given in docs/process-model.md: virt-handler finds the VMM among the
children of the launcher's parent (`GetQEMUProcess`, pkg/hypervisor/kvm/runtime.go), so the
launcher cannot be the container's first process, and something above it must collect the VMM.

`run(launcher)` makes this process a child subreaper (PID 1 of the container is one anyway; in
tests and under kubevirt-probe it is not; the setting survives `execve`), forks the launcher,
and then re-executes itself as a small interpreter running only `serve()` (`python -I -S`, no
site-packages, nothing but `os`, `signal`, `time` and `json`), so the monitor does not keep a
copy of the launcher's start-up memory. `serve`:

- reaps every child; the launcher's exit ends the monitor, every other exit (the VMM, orphans)
  is reported to the launcher through a pipe, one line `"<pid> <wait status>\\n"` per process
  (read by `ch_launcher.ch.exits.ExitReports`);
- forwards SIGTERM, SIGINT, SIGQUIT and SIGHUP to the launcher (PID 1 ignores signals it has no
  handler for; the launcher runs the graceful shutdown);
- once the launcher has exited, stops what it left behind (a VMM after a launcher crash):
  SIGTERM, then SIGKILL after `LEFTOVER_GRACE` seconds, as the stock monitor gives QEMU 10 s;
- exits with the launcher's status (128 + n if a signal n ended it).

Signals stay blocked from before the fork until `serve` waits for them (the mask survives
`execve`), so none is lost in between. This module imports nothing beyond the standard library
at its top, because the re-executed monitor runs it without the package's dependencies.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

TYPE_CHECKING = False  # typing and dataclasses stay out of the re-executed monitor
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import ClassVar

PR_SET_CHILD_SUBREAPER = 36
LEFTOVER_GRACE = 10.0
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)
_BLOCKED = {signal.SIGCHLD, *FORWARDED}
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); from ch_launcher.monitor import _main; _main(sys.argv[2:])")


class MonitorLink:
    """What the launcher (the monitor's child) gets: the monitor's pid, the read end of the
    exit-report pipe, and whether the monitor could become the subreaper."""

    __slots__ = ("exit_reports_fd", "monitor_pid", "subreaper")

    def __init__(self, monitor_pid: int, exit_reports_fd: int, subreaper: bool) -> None:
        self.monitor_pid = monitor_pid
        self.exit_reports_fd = exit_reports_fd
        self.subreaper = subreaper


def become_subreaper() -> bool:
    """prctl(PR_SET_CHILD_SUBREAPER): orphans below this process are reparented to it."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0  # ctypes: c_int, untyped
    except (OSError, AttributeError):
        return False


def run(launcher: Callable[[MonitorLink], int], *, log_context: dict[str, str] | None = None) -> int:
    """Fork `launcher` (called in the child with the link; its return value is the child's exit
    status), then become the monitor; the exit status of this process (only returned when the
    re-execution fails and this process monitors itself)."""
    import logging

    log = logging.getLogger("ch_launcher.monitor")
    subreaper = os.getpid() == 1 or become_subreaper()
    read_end, write_end = os.pipe()
    os.set_inheritable(read_end, False)
    os.set_inheritable(write_end, True)  # for the re-executed monitor
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
    if not subreaper:
        log.error("cannot become a child subreaper: virt-handler will not find the VMM under the launcher's parent")
    context = json.dumps(log_context or {})
    logging.shutdown()
    try:
        os.execv(sys.executable, [sys.executable, "-I", "-S", "-c", _BOOT, _PACKAGE_PARENT, str(pid), str(write_end),
                                  context])
    except OSError as e:  # monitor from this (larger) process instead
        log.warning("cannot re-execute the monitor (%s): monitoring in place", e)
    return serve(pid, write_end, context)


def _main(args: list[str]) -> None:
    """The re-executed monitor: `<launcher pid> <report fd> <log context JSON>`."""
    sys.exit(serve(int(args[0]), int(args[1]), args[2]))


def serve(launcher: int, reports: int, context: str = "{}") -> int:
    """Monitor `launcher` until it exits (module docstring); the exit status to end with."""
    _Log.context = json.loads(context or "{}")
    _name("ch-launcher", f"ch-launcher: the monitor of {_Log.context.get('namespace', '')}/"
                         f"{_Log.context.get('name', '')} (launcher pid {launcher})")
    os.set_blocking(reports, False)
    status = _watch(launcher, reports)
    os.close(reports)
    _stop_leftovers()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        _Log.line("error", f"dirty ch-launcher shutdown: exit status {code}")
    return 128 - code if code < 0 else code


def _watch(launcher: int, reports: int) -> int:
    """Reap and forward until the launcher exits; its wait status."""
    while True:
        info = signal.sigwaitinfo(_BLOCKED)
        if info.si_signo != signal.SIGCHLD:
            _Log.line("info", f"signalling the launcher: {signal.Signals(info.si_signo).name}")
            try:
                os.kill(launcher, info.si_signo)
            except ProcessLookupError:
                pass
            continue
        for child, status in _reap():
            if child == launcher:
                return status
            try:
                os.write(reports, f"{child} {status}\n".encode())  # ch_launcher/ch/exits.py reads it
            except OSError:  # the launcher is not reading (gone, or a full pipe): nothing to tell
                pass


def _reap() -> list[tuple[int, int]]:
    reaped: list[tuple[int, int]] = []
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
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return pids
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                pids.extend(int(p) for p in f.read().split())
        except (OSError, ValueError):
            pass
    return pids


def _stop_leftovers() -> None:
    """SIGTERM what is still running below us, SIGKILL it after LEFTOVER_GRACE seconds."""
    left = _children()
    if not left:
        _reap()
        return
    _Log.line("info", f"stopping {len(left)} process(es) the launcher left behind: {left}")
    for sig, wait in ((signal.SIGTERM, LEFTOVER_GRACE), (signal.SIGKILL, None)):
        for pid in _children():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = None if wait is None else time.monotonic() + wait
        while _children():
            _reap()
            remaining = 1.0 if deadline is None else min(deadline - time.monotonic(), 1.0)
            if remaining <= 0:
                break
            signal.sigtimedwait({signal.SIGCHLD}, remaining)
    _reap()


def _name(comm: str, cmdline: str) -> None:
    try:
        from ch_launcher.ch.proctitle import set_cmdline, set_comm

        set_comm(comm)
        set_cmdline(cmdline)
    except ImportError:
        pass


class _Log:
    """KubeVirt's JSON log lines (ch_launcher/kubevirt/log.py's format), without `logging`."""

    context: ClassVar[dict[str, str]] = {}

    @classmethod
    def line(cls, level: str, msg: str) -> None:
        now = time.time()
        record = {"component": "ch-launcher", "level": level, "msg": msg, "pos": "monitor.py:0",
                  "subcomponent": "monitor",
                  "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"}
        if cls.context.get("name"):
            record.update(kind="VirtualMachineInstance", name=cls.context["name"],
                          namespace=cls.context.get("namespace", ""))
        record["uid"] = cls.context.get("uid", "")
        try:
            sys.stderr.write(json.dumps(dict(sorted(record.items())), separators=(",", ":")) + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
