"""The monitor: the first `ch-launcher` process, the container's command, parent of the launcher.

It plays virt-launcher-monitor's part (kubevirt cmd/virt-launcher-monitor@d923fdb815cd: the
compute container's command, which runs virt-launcher as its child, forwards signals to it,
exits when it exits and stops what it left), for two reasons (docs/process-model.md):

- when the launcher dies, something in the pod must outlive it, to stop its VMM and tell
  virt-handler that the VM is gone (`ch_launcher.epitaph`): a container's first process takes
  every other process of the container with it when it dies, so the launcher is not that one;
- virt-handler's KVM runtime finds the VMM among the children of the launcher's parent
  (`GetQEMUProcess`, pkg/hypervisor/kvm/runtime.go), so with `--kubevirt-runtime-processes`
  the VMM is this process's child (the `virtqemud` spawner's double fork hands it over).

`run(launcher, context)` makes this process a child subreaper (PID 1 of the container is one
anyway; in tests and under kubevirt-probe it is not; the setting survives `execve`), forks the
launcher, and then re-executes itself as a small interpreter running only `serve()` (`python -I
-S`, with nothing but built-in modules: `_signal`, not `signal`, which imports `enum`, and no
`json`), so the monitor keeps no copy of the launcher's start-up memory. `serve`:

- reaps every child; the launcher's exit ends the monitor, every other exit (the VMM under the
  spawner, orphans) is reported to the launcher through a pipe, one line `"<pid> <wait
  status>\\n"` per process (read by `ch_launcher.ch.exits.ExitReports`; a launcher that does not
  read them closed its end, and they are dropped);
- forwards SIGTERM, SIGINT, SIGQUIT and SIGHUP to the launcher (PID 1 ignores signals it has no
  handler for; the launcher runs the graceful shutdown);
- once the launcher has exited: it stops what the launcher left behind (SIGKILL at once after a
  crash, which leaves a VMM without anyone to drive it; after a clean exit SIGTERM, and SIGKILL
  after `LEFTOVER_GRACE` seconds, as the stock monitor gives QEMU 10 s), sends virt-handler
  the epitaph if the launcher left one, and, as the stock monitor does, removes the
  containerDisk containers' sockets (`<container-disk-dir>/*.sock`), on which each of them ends
  (kubevirt cmd/container-disk-v2alpha), so the pod ends with it;
- exits with the launcher's status (128 + n if a signal n ended it).

Signals stay blocked from before the fork until `serve` waits for them (the mask survives
`execve`), so none is lost in between. This module imports nothing beyond built-in modules at
its top, because the re-executed monitor runs it without the package's dependencies.
"""

from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False  # typing and dataclasses stay out of the re-executed monitor
if TYPE_CHECKING:
    import signal as _signal  # `_signal` is `signal` without its enums, and has no stubs of its own
    from collections.abc import Callable
    from typing import ClassVar
else:
    import _signal

PR_SET_CHILD_SUBREAPER = 36
LEFTOVER_GRACE = 10.0
EPITAPH_TIMEOUT = 5.0  # each Notify call of the epitaph
_NAMES: dict[int, str] = {_signal.SIGTERM: "SIGTERM", _signal.SIGINT: "SIGINT", _signal.SIGQUIT: "SIGQUIT",
                          _signal.SIGHUP: "SIGHUP"}
FORWARDED = tuple(_NAMES)
_BLOCKED = {_signal.SIGCHLD, *FORWARDED}
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); from ch_launcher.monitor import _main; _main(sys.argv[2:])")


class MonitorContext:
    """What the monitor knows of the pod: the VMI (for its log lines and the epitaph's event),
    where the launcher leaves its epitaph, where virt-handler's Notify socket is, and the
    directory of the containerDisk containers' sockets ("": none to remove)."""

    __slots__ = ("container_disks", "epitaph", "name", "namespace", "notify_socket", "uid")

    def __init__(self, *, namespace: str = "", name: str = "", uid: str = "", epitaph: str = "",
                 notify_socket: str = "", container_disks: str = "") -> None:
        self.namespace, self.name, self.uid = namespace, name, uid
        self.epitaph, self.notify_socket, self.container_disks = epitaph, notify_socket, container_disks

    def args(self) -> list[str]:
        return [self.namespace, self.name, self.uid, self.epitaph, self.notify_socket, self.container_disks]

    @classmethod
    def from_args(cls, args: list[str]) -> MonitorContext:
        namespace, name, uid, epitaph, notify_socket, container_disks = args
        return cls(namespace=namespace, name=name, uid=uid, epitaph=epitaph, notify_socket=notify_socket,
                   container_disks=container_disks)


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


def run(launcher: Callable[[MonitorLink], int], context: MonitorContext | None = None) -> int:
    """Fork `launcher` (called in the child with the link; its return value is the child's exit
    status), then become the monitor; the exit status of this process (only returned when the
    re-execution fails and this process monitors itself)."""
    import logging

    log = logging.getLogger("ch_launcher.monitor")
    context = context or MonitorContext()
    subreaper = os.getpid() == 1 or become_subreaper()
    if context.epitaph:  # one a previous launcher of this pod left is not this one's
        try:
            os.unlink(context.epitaph)
        except FileNotFoundError:
            pass
    read_end, write_end = os.pipe()
    os.set_inheritable(read_end, False)
    os.set_inheritable(write_end, True)  # for the re-executed monitor
    old_mask = _signal.pthread_sigmask(_signal.SIG_BLOCK, _BLOCKED)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(write_end)
            _signal.pthread_sigmask(_signal.SIG_SETMASK, old_mask)
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
    logging.shutdown()
    try:
        os.execv(sys.executable, [sys.executable, "-I", "-S", "-c", _BOOT, _PACKAGE_PARENT, str(pid), str(write_end),
                                  *context.args()])
    except OSError as e:  # monitor from this (larger) process instead
        log.warning("cannot re-execute the monitor (%s): monitoring in place", e)
    return serve(pid, write_end, context)


def _main(args: list[str]) -> None:
    """The re-executed monitor: `<launcher pid> <report fd> <MonitorContext.args()>`."""
    sys.exit(serve(int(args[0]), int(args[1]), MonitorContext.from_args(args[2:])))


def serve(launcher: int, reports: int, context: MonitorContext) -> int:
    """Monitor `launcher` until it exits, then see to what it left (module docstring); the exit
    status to end with."""
    _Log.context = context
    _name("ch-launcher", f"ch-launcher: the monitor of {context.namespace}/{context.name} (launcher pid {launcher})")
    os.set_blocking(reports, False)
    status = _watch(launcher, reports)
    os.close(reports)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        _Log.line("error", f"dirty ch-launcher shutdown: exit status {code}")
    # After a crash the VM is lost with its launcher: its VMM goes at once, as it went with a
    # launcher that was the container's first process. After a clean exit, what is left gets a grace.
    left = _signal_children(_signal.SIGKILL if code != 0 else _signal.SIGTERM)
    if left:
        _Log.line("info", f"stopping {len(left)} process(es) the launcher left behind: {left}")
    if context.epitaph:
        _last_word(context, launcher, code)
    if left:
        _stop_leftovers(time.monotonic() + LEFTOVER_GRACE)
    _reap()
    if context.container_disks:
        _remove_sockets(context.container_disks)
    return 128 - code if code < 0 else code


def _remove_sockets(directory: str) -> None:
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if name.endswith(".sock"):
            try:
                os.unlink(os.path.join(directory, name))
            except OSError as e:
                _Log.line("error", f"could not remove {name} from {directory}: {e.strerror}")


def _last_word(context: MonitorContext, launcher: int, code: int) -> None:
    """The launcher's epitaph to virt-handler, if it left one (`ch_launcher.epitaph`)."""
    from ch_launcher.epitaph import deliver

    how = f"(pid {launcher}) " + (f"was killed by signal {-code}" if code < 0 else f"exited with status {code}")
    said = deliver(context.epitaph, context.notify_socket, namespace=context.namespace, name=context.name,
                   uid=context.uid, how=how, timeout=EPITAPH_TIMEOUT)
    if said is not None:
        _Log.line("info", f"the launcher died while its VM ran: {said}")


def _watch(launcher: int, reports: int) -> int:
    """Reap and forward until the launcher exits; its wait status."""
    while True:
        info = _signal.sigwaitinfo(_BLOCKED)
        if info.si_signo != _signal.SIGCHLD:
            _Log.line("info", f"signalling the launcher: {_NAMES.get(info.si_signo, info.si_signo)}")
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
            except OSError:  # the launcher is not reading (gone, closed, or a full pipe): nothing to tell
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


def _signal_children(sig: int) -> list[int]:
    """Send `sig` to every child still running; their pids."""
    _reap()
    left = _children()
    for pid in left:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    return left


def _stop_leftovers(deadline: float) -> None:
    """Wait for the children (SIGTERMed) until `deadline`, then SIGKILL and wait for what is left."""
    while _children():
        _reap()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        _signal.sigtimedwait({_signal.SIGCHLD}, min(remaining, 1.0))
    while _signal_children(_signal.SIGKILL):
        _signal.sigtimedwait({_signal.SIGCHLD}, 1.0)


def _name(comm: str, cmdline: str) -> None:
    try:
        from ch_launcher.ch.proctitle import set_cmdline, set_comm

        set_comm(comm)
        set_cmdline(cmdline)
    except ImportError:
        pass


class _Log:
    """KubeVirt's JSON log lines (`ch_launcher.kubevirt.logline`), about the context's VMI."""

    context: ClassVar[MonitorContext] = MonitorContext()

    @classmethod
    def line(cls, level: str, msg: str) -> None:
        from ch_launcher.kubevirt.logline import line

        c = cls.context
        text = line("ch-launcher", level, msg, "monitor.py:0", name=c.name, namespace=c.namespace, uid=c.uid,
                    subcomponent="monitor")
        try:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
