"""Exit statuses of processes the launcher started but does not parent: the VMM.

In the pod's process model (docs/process-model.md) the VMM is a child of the monitor (the
launcher's parent), not of the launcher, because that is where virt-handler looks for it. Only a
parent can collect a child's exit status, so the monitor reaps the VMM and reports its status to
the launcher over a pipe, one line per process: `"<pid> <wait status>\\n"` (the raw `waitpid()`
status, written with a single `write()` shorter than PIPE_BUF, so lines never interleave).

`ExitReports` is the launcher's end. It is safe to use from several threads (the event loop
watches the VMM's pidfd; the REST worker thread waits for a VMM it is stopping).
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time


def encode(pid: int, status: int) -> bytes:
    """One report line (the monitor's side)."""
    return f"{pid} {status}\n".encode()


class ExitReports:
    """Reads the monitor's reports from `fd` (the read end of the pipe; made non-blocking).

    `returncode(pid)` is the exit status of a reported process in `subprocess.Popen`'s
    convention (>= 0 exit code, < 0 killed by that signal), or None while none was reported.
    A report is kept (one line per VMM the launcher ever started), so every thread that asks
    gets the same answer. One waiting
    thread at a time sleeps in `select()` on the pipe; the others wait for it to read.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_blocking(fd, False)
        self._cond = threading.Condition()
        self._buffer = b""
        self._codes: dict[int, int] = {}
        self._selecting = False
        # Wakes the selecting thread when another thread has read the pipe first (else it would
        # sleep on a pipe whose report is already taken).
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.closed = False  # the monitor has gone (EOF): no report will ever come

    def _drain(self) -> None:
        """Read what is there (caller holds the condition's lock)."""
        got = False
        while not self.closed:
            try:
                data = os.read(self.fd, 4096)
            except BlockingIOError:
                break
            except OSError:
                self.closed = True
                break
            if not data:
                self.closed = True
                break
            self._buffer += data
            got = True
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            with contextlib.suppress(ValueError):
                pid, status = (int(x) for x in line.split())
                self._codes[pid] = os.waitstatus_to_exitcode(status)
        if got or self.closed:
            self._cond.notify_all()
            if self._selecting:
                with contextlib.suppress(OSError):
                    os.write(self._wake_w, b"!")

    def returncode(self, pid: int) -> int | None:
        with self._cond:
            self._drain()
            return self._codes.get(pid)

    def wait(self, pid: int, timeout: float | None = None) -> int | None:
        """The status of `pid` once reported; None after `timeout` seconds (forever if None),
        or at once if the monitor has gone without reporting it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                self._drain()
                code = self._codes.get(pid)
                if code is not None or self.closed:
                    return code
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                if self._selecting:
                    self._cond.wait(remaining)  # the selecting thread reads and notifies
                    continue
                self._selecting = True
                self._cond.release()
                try:
                    with contextlib.suppress(OSError, ValueError):
                        select.select([self.fd, self._wake_r], [], [], remaining)
                finally:
                    self._cond.acquire()
                    self._selecting = False
                    with contextlib.suppress(OSError):
                        os.read(self._wake_r, 64)
                    self._cond.notify_all()
