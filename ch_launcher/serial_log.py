"""The guest's serial log (`virt-serial0-log`), kept at a bounded size as virtlogd keeps it for
virt-launcher.

KubeVirt has QEMU's serial port log to this file through libvirt's virtlogd, which rotates it
(kubevirt community design-proposals/vm-console-logs.md: "rotated by virtlogd exactly as for
libvirt logs"), with virtlogd's defaults (libvirt src/logging/log_daemon_config.c: `max_size`
2 MiB, `max_backups` 3). `guest-console-log` (KubeVirt's virt-tail) follows the file by name and
reopens it when it is replaced. Written without a bound, a guest printing without pause fills
the node's disk: the pod's `private` emptyDir has no size limit.

`RotatingLog` rolls over as virtlogd does (libvirt src/util/virrotatingfile.c): a write that
would take the file past `max_size` is cut there, or after the last newline within the 80 bytes
before that point so that lines stay whole; then `LOG.1` becomes `LOG.2`, `LOG.0` becomes `LOG.1`,
`LOG` becomes `LOG.0` (the oldest backup is replaced), and a new empty `LOG` is opened. A file
already larger than `max_size` when opened is rolled over before the first write.
"""

from __future__ import annotations

import contextlib
import itertools
import os

MAX_SIZE = 2 * 1024 * 1024  # virtlogd's max_size
BACKUPS = 3  # virtlogd's max_backups: LOG.0, LOG.1, LOG.2
LINE_SEARCH = 80  # how far back from the limit a newline is looked for


class RotatingLog:
    """An append-only file at `path` that never grows past `max_size`, with `backups` older
    files beside it. One owner writes it. `open()` and `write()` raise OSError."""

    def __init__(self, path: str, max_size: int = MAX_SIZE, backups: int = BACKUPS) -> None:
        if max_size <= 0 or backups < 0:
            raise ValueError(f"max_size must be positive and backups not negative: {max_size}, {backups}")
        self.path = path
        self.max_size = max_size
        self.backups = backups
        self._fd: int | None = None
        self._size = 0

    def open(self) -> None:
        """Open (create) the file for appending; an existing file is kept and continued."""
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self._size = os.fstat(self._fd).st_size

    def write(self, data: bytes) -> None:
        """Append `data`, rolling over as often as it needs (module docstring)."""
        if self._fd is None:
            raise OSError(f"the serial log {self.path} is not open")
        view = memoryview(data)
        while view:
            take, roll = len(view), False
            if self._size > self.max_size:
                take, roll = 0, True
            elif self._size + take > self.max_size:
                take = self.max_size - self._size
                for back in range(min(take, LINE_SEARCH)):
                    if view[take - back - 1] == ord("\n"):
                        take, roll = take - back, True
                        break
            written = 0
            while written < take:
                written += os.write(self._fd, view[written:take])
            self._size += take
            view = view[take:]
            if roll or (self._size == self.max_size and view):
                self._roll_over()

    def _roll_over(self) -> None:
        assert self._fd is not None
        os.close(self._fd)
        self._fd = None
        if self.backups == 0:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
        else:
            names = [self.path] + [f"{self.path}.{i}" for i in range(self.backups)]
            for older, newer in reversed(list(itertools.pairwise(names))):
                with contextlib.suppress(FileNotFoundError):
                    os.rename(older, newer)
        self.open()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
