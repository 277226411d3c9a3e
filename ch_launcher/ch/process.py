"""Supervision of one `cloud-hypervisor` process: spawn, readiness, polite then forceful stop.

Start-up follows Kata's `clh.go@7c6ba40c54ea` (cloud-hypervisor.md §1.2): after spawning, poll
`vmm.ping` every ~10 ms, checking before each attempt that the child is still alive, so a VMM
that dies during start-up is reported at once with its exit status and the tail of its log
instead of after a timeout.

Stopping escalates: `PUT vmm.shutdown` (CH deletes the VM, answers 200 and exits 0), then
SIGTERM (CH handles it like vmm.shutdown), then SIGKILL; the child is always reaped.

The child runs in its own session (so a terminal's Ctrl-C reaches only the launcher), with stdin
from /dev/null and stdout/stderr appended to the log file: messages CH prints before it opens
`--log-file` (a bad flag, a socket in use) land there too and show up in `VmmStartError`. The log
file is emptied at each spawn (as CH itself truncates it when it opens it), so it holds one VMM's
words only, whatever the VMM does with it: `failure()` reads them.

Two ways to start it. Given a `VmmSpawning` (the launcher in its pod process model,
docs/process-model.md), the `virtqemud` spawner starts it through the `qemu-system-cloud-hypervisor`
alias and the monitor becomes its parent: its exit status then comes from the monitor's reports
(`ExitReports`) and signals go through its pidfd. Without one (tests of this module, tools), it
is an ordinary child (`subprocess.Popen`). Both behave the same through this class.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import stat
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .api import ChApiError, CloudHypervisorClient
from .exits import ExitReports
from .spawner import VMM_ALIAS, Spawner, SpawnError, vmm_alias
from .vmconfig import VmmPingResponse
from .vmmlog import failure_in_file

READY_POLL_INTERVAL = 0.01
UNKNOWN_EXIT = 255  # an adopted VMM's exit status when nobody could collect it
LOG_TAIL_LINES = 20


class VmmStartError(RuntimeError):
    """The VMM did not become ready. The message says why (exit code, signal, or timeout) and
    ends with the tail of its log. The process may still be running after a timeout: call
    `VmmProcess.terminate()`."""


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"


@dataclass(frozen=True)
class VmmSpawning:
    """How VMMs are started in the pod's process model: by `spawner` (the `virtqemud` child),
    reparented to the monitor `monitor_pid`, whose reports arrive through `exits`."""

    spawner: Spawner
    exits: ExitReports
    monitor_pid: int
    subreaper: bool = True


class _Adopted:
    """A VMM that is not our child, with the part of `subprocess.Popen`'s interface we use."""

    def __init__(self, pid: int, pidfd: int, exits: ExitReports) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self._exits = exits
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._exits.returncode(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        code = self.poll()
        if code is None:
            code = self._exits.wait(self.pid, timeout)
            # The monitor has gone (killed): nobody reports; wait for the exit itself.
            if (code is None and self._exits.closed and self.pidfd >= 0
                    and select.select([self.pidfd], [], [], timeout)[0]):
                code = UNKNOWN_EXIT
            if code is None:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            self.returncode = code
        return code

    def send_signal(self, sig: int) -> None:
        if self.pidfd >= 0 and self.poll() is None:
            with contextlib.suppress(ProcessLookupError, OSError):
                signal.pidfd_send_signal(self.pidfd, sig)

    def release(self) -> None:
        self.pidfd = -1  # closed by VmmProcess.close(); the report stays for a thread still waiting


class VmmProcess:
    """One running (or finished) VMM process. Create it with `VmmProcess.spawn`."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes] | _Adopted,
        *,
        api_socket: str,
        event_monitor: str,
        log_file: str,
        argv: list[str],
    ) -> None:
        self._popen = popen
        self.api_socket = api_socket
        self.event_monitor = event_monitor
        self.log_file = log_file
        self.argv = argv
        self.client = CloudHypervisorClient(api_socket)
        self.adopted = isinstance(popen, _Adopted)
        self.pidfd: int | None
        if isinstance(popen, _Adopted):
            self.pidfd = popen.pidfd
        else:
            try:
                self.pidfd = os.pidfd_open(popen.pid)
            except (AttributeError, OSError):  # kernels before 5.3: callers fall back to polling
                self.pidfd = None

    # --- start ------------------------------------------------------------------------------

    @classmethod
    def spawn(
        cls,
        binary: str,
        *,
        api_socket: str,
        event_monitor: str,
        log_file: str,
        verbose: bool = True,
        no_shutdown: bool = False,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        spawning: VmmSpawning | None = None,
    ) -> VmmProcess:
        """Starts `binary --api-socket path=.. --event-monitor path=.. --log-file .. [-v] [--no-shutdown]`.

        A stale file at `api_socket` is unlinked first (CH <= v52 refuses to bind over it). If
        `event_monitor` is a FIFO, its reader must already be open (`open_event_fifo`), because
        CH blocks at start-up until one is. `env=None` inherits this process's environment.
        With `spawning`, the spawner starts it (see the module docstring).
        Raises `VmmStartError` (nothing started) if the stale socket cannot be removed, the log
        file cannot be opened, or the binary cannot be executed.
        """
        _unlink_stale_socket(api_socket)
        argv = [
            str(binary),
            "--api-socket",
            f"path={api_socket}",
            "--event-monitor",
            f"path={event_monitor}",
            "--log-file",
            str(log_file),
        ]
        if verbose:
            argv.append("-v")
        if no_shutdown:
            argv.append("--no-shutdown")
        argv.extend(extra_args)
        if spawning is not None:
            return cls._spawn_through(spawning, argv, api_socket=str(api_socket), event_monitor=str(event_monitor),
                                      log_file=str(log_file), env=env)
        try:
            out = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise VmmStartError(f"cannot open the VMM log file {log_file}: {exc.strerror}") from exc
        try:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env=None if env is None else dict(env),
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            raise VmmStartError(f"cannot execute {binary}: {exc}") from exc
        finally:
            os.close(out)
        return cls(popen, api_socket=str(api_socket), event_monitor=str(event_monitor), log_file=str(log_file),
                   argv=argv)

    @classmethod
    def _spawn_through(cls, spawning: VmmSpawning, argv: list[str], *, api_socket: str, event_monitor: str,
                       log_file: str, env: Mapping[str, str] | None) -> VmmProcess:
        try:
            exe = vmm_alias(argv[0], os.path.dirname(api_socket))
        except (OSError, SpawnError) as exc:
            raise VmmStartError(f"cannot make the alias {VMM_ALIAS} of {argv[0]}: {exc}") from exc
        argv = [os.path.realpath(exe), *argv[1:]]  # ps shows cloud-hypervisor; comm is the alias
        try:
            pid, pidfd = spawning.spawner.spawn(exe, argv, env=dict(os.environ if env is None else env),
                                                log_file=log_file)
        except SpawnError as exc:
            raise VmmStartError(str(exc)) from exc
        return cls(_Adopted(pid, pidfd, spawning.exits), api_socket=api_socket, event_monitor=event_monitor,
                   log_file=log_file, argv=argv)

    def wait_ready(self, timeout: float = 10.0) -> VmmPingResponse:
        """Waits until `vmm.ping` answers; returns it (its version is then `self.version`).

        Raises `VmmStartError` when the process exits first (with its code or signal), or when
        the socket did not answer within `timeout` seconds (the process is left running).
        """
        deadline = time.monotonic() + timeout
        last_error = "the API socket never appeared"
        while True:
            code = self.poll()
            if code is not None:
                raise VmmStartError(
                    f"VMM (pid {self.pid}) {_describe_exit(code)} during start-up"
                    f" before its API socket {self.api_socket} answered{self._tail()}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise VmmStartError(
                    f"VMM (pid {self.pid}) is running but its API socket {self.api_socket} never"
                    f" answered vmm.ping within {timeout:g} s ({last_error}){self._tail()}"
                )
            if os.path.exists(self.api_socket):
                try:
                    pong = self.client.ping(timeout=max(0.05, min(1.0, remaining)))
                except ChApiError as exc:
                    last_error = f"last attempt: {exc}"
                else:
                    return pong
            time.sleep(min(READY_POLL_INTERVAL, max(0.0, deadline - time.monotonic())))

    # --- state ------------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def version(self) -> str | None:
        """The VMM's version (e.g. "53.0.0") from its last `vmm.ping`; None before `wait_ready`."""
        return self.client.version

    @property
    def returncode(self) -> int | None:
        """Exit status once reaped: >= 0 exit code, < 0 killed by that signal; else None."""
        return self._popen.returncode

    def poll(self) -> int | None:
        """Reaps the child if it exited; returns its status (see `returncode`) or None."""
        return self._popen.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        """Waits up to `timeout` seconds (forever if None); the status, or None if still running."""
        try:
            return self._popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last `lines` lines of the VMM log ("" if unreadable)."""
        try:
            with open(self.log_file, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - 16384))
                data = f.read()
        except OSError:
            return ""
        return "\n".join(data.decode("utf-8", errors="replace").splitlines()[-lines:])

    def failure(self) -> str | None:
        """The internal failure this VMM's log reports (a vCPU error, a thread that panicked:
        `vmmlog.failure_in`), which CH ends like a guest poweroff; None when it reports none."""
        return failure_in_file(self.log_file)

    def _tail(self) -> str:
        tail = self.log_tail()
        return f"; last lines of {self.log_file}:\n{tail}" if tail else f"; {self.log_file} is empty"

    # --- stop -------------------------------------------------------------------------------

    def terminate(self, shutdown_timeout: float = 3.0, term_timeout: float = 3.0) -> int:
        """Stops the VMM and reaps it; returns its exit status (see `returncode`).

        `PUT vmm.shutdown` and wait up to `shutdown_timeout`; then SIGTERM and wait up to
        `term_timeout`; then SIGKILL (to its whole process group). Safe to call again, and after
        the child has exited on its own.
        """
        code = self.poll()
        if code is not None:
            return code
        start = time.monotonic()
        delivered = True
        try:
            self.client.shutdown_vmm(timeout=shutdown_timeout)
        except ChApiError:
            delivered = False  # hung, already exiting, or never listened: escalate below
        remaining = max(0.0, shutdown_timeout - (time.monotonic() - start))
        # Undelivered, the VMM is not going to act on it: give one already on its way out (a
        # connection reset by its exit) a moment, not the whole wait, before SIGTERM.
        code = self.wait(remaining if delivered else min(remaining, 0.5))
        if code is not None:
            return code
        self._signal(signal.SIGTERM)
        code = self.wait(term_timeout)
        if code is not None:
            return code
        if self.adopted:
            self._signal(signal.SIGKILL)  # through its pidfd: never another process
        else:
            try:
                os.killpg(self.pid, signal.SIGKILL)  # the leader is unreaped, so the group id is ours
            except (ProcessLookupError, PermissionError):
                self._signal(signal.SIGKILL)
        return self._popen.wait()

    def kill(self) -> int:
        """SIGKILL (its process group) and reap; its exit status. For a VMM whose API is held
        (a receiving VMM answers nothing until the migration ends and ignores SIGTERM)."""
        code = self.poll()
        if code is not None:
            return code
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            self._signal(signal.SIGKILL)
        return self._popen.wait()

    def _signal(self, sig: int) -> None:
        if self._popen.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._popen.send_signal(sig)

    def close(self) -> None:
        """Releases the pidfd and the client; does not stop the process (use `terminate`)."""
        if self.pidfd is not None:
            if isinstance(self._popen, _Adopted):
                self._popen.release()
            with contextlib.suppress(OSError):
                os.close(self.pidfd)
            self.pidfd = None
        self.client.close()

    def __enter__(self) -> VmmProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.terminate()
        finally:
            self.close()


def _unlink_stale_socket(path: str) -> None:
    """Removes a leftover socket (or file) at `path`; refuses to remove a directory."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        raise VmmStartError(f"API socket path {path} is a directory")
    try:
        os.unlink(path)
    except OSError as exc:
        raise VmmStartError(f"cannot remove the stale API socket {path}: {exc.strerror}") from exc
