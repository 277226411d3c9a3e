"""The migration relay: forwards one Cloud Hypervisor migration stream between a VMM and
virt-handler's migration proxy, following the protocol (docs/migration.md §3.1).

Why a relay, not the proxy socket handed to the VMM directly: it knows where the migration is
(bytes, iterations, whether `Complete` went through and was acknowledged: the point of no
return), it can cut the stream before that point (cancel, progress timeout), it limits the
bandwidth (Cloud Hypervisor cannot), and it sees a peer vanish (a v53.0 receiver whose sender
disappears inside a memory range spins for ever instead of failing).

The protocol (`cloud-hypervisor vm-migration/src/protocol.rs@v53.0`) is lock-step: the sender
writes a 16-byte request (`u16` command, 6 header bytes, `u64` payload length, little-endian)
and its payload (for `Memory`: a table of `{gpa: u64, length: u64}` ranges, then the ranges'
contents), then reads a 16-byte response (`u16` status, 1 = Ok). The relay reads exactly that,
forwards the bulk with splice(2) (no copy through Python), and the response back.

Threading: one daemon thread per relay, blocking sockets. `cut()` may be called from any
thread: it shuts both sockets down, which ends the thread's blocking calls. `on_end(outcome,
detail)` is called once, from the relay's thread, when the stream ends; then the relay closes
its sockets, unless `close_on_end` is False: a receiving VMM must be killed *before* its stream
is closed (it would spin), so the receive relay leaves that to its owner (`close()`).

Outcomes: `completed` (`Complete`/`CompletePaused` acknowledged Ok), `cut`, `sender-closed`
(the sending side ended the stream or broke it), `receiver-closed`, `refused` (the receiver
answered Error; the sender aborts), `error` (anything else, e.g. a local-mode request carrying
file descriptors, which no proxy can carry).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

HEADER = struct.Struct("<H6sQ")
RANGE = struct.Struct("<QQ")
START, CONFIG, STATE, MEMORY, COMPLETE, ABANDON, MEMORY_FD, COMPLETE_PAUSED = 1, 2, 3, 4, 5, 6, 7, 8
COMMANDS = {START: "Start", CONFIG: "Config", STATE: "State", MEMORY: "Memory", COMPLETE: "Complete",
            ABANDON: "Abandon", MEMORY_FD: "MemoryFd", COMPLETE_PAUSED: "CompletePaused"}
STATUS_OK = 1
CHUNK = 1 << 20
PIPE_SIZE = 1 << 20
MAX_TABLE = 64 << 20  # a range table larger than this is not Cloud Hypervisor's
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


class _Ended(Exception):
    def __init__(self, outcome: str, detail: str) -> None:
        super().__init__(detail)
        self.outcome, self.detail = outcome, detail


@dataclass(frozen=True)
class Progress:
    """A snapshot of the relay's counters (read from any thread)."""

    phase: str                 # waiting | Start | Config | Memory | State | Complete | ended
    bytes_forwarded: int       # from the sender, everything
    memory_bytes: int          # guest memory contents forwarded
    iterations: int            # Memory requests forwarded (pre-copy iterations and the final one)
    last_progress: float       # time.monotonic() of the last byte forwarded (0: none yet)
    bytes_per_second: float    # over the last second or so
    complete_forwarded: bool   # `Complete` went to the receiver: too late to cut
    complete_acked: bool       # the receiver answered Ok to it: the VM runs there


class Relay:
    """One relay: listens on `listen_path` (unix), accepts one connection (the sender's side of
    the stream for a send relay, virt-handler's proxy for a receive relay), dials
    `upstream_path` for it and forwards. `bandwidth` limits the sender → receiver direction
    (bytes/s, 0 = unlimited)."""

    def __init__(self, listen_path: str, upstream_path: str, *, name: str, bandwidth: int = 0,
                 on_end: Callable[[str, str], None] | None = None, close_on_end: bool = True) -> None:
        self.listen_path = listen_path
        self.upstream_path = upstream_path
        self.name = name
        self.bandwidth = max(0, int(bandwidth))
        self.on_end = on_end
        self.close_on_end = close_on_end
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._a: socket.socket | None = None  # the sender's side
        self._b: socket.socket | None = None  # the receiver's side
        self._thread: threading.Thread | None = None
        self._cut = False
        self._closed = False
        self._ended = False
        self._phase = "waiting"
        self._bytes = 0
        self._memory = 0
        self._iterations = 0
        self._last = 0.0
        self._rate_mark = (0.0, 0)
        self._rate = 0.0
        self._complete_forwarded = False
        self._complete_acked = False
        self._bulk_started = 0.0
        self._bulk_sent = 0
        self.outcome: str | None = None
        self.detail = ""

    # --- life --------------------------------------------------------------------------------

    def start(self) -> None:
        """Bind and listen (a stale socket file is replaced), then serve in a thread. Raises
        OSError when the socket cannot be bound."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.listen_path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            listener.bind(self.listen_path)
            listener.listen(4)
        except OSError:
            listener.close()
            raise
        self._listener = listener
        self._thread = threading.Thread(target=self._serve, name=f"relay-{self.name}", daemon=True)
        self._thread.start()

    def progress(self) -> Progress:
        with self._lock:
            now = time.monotonic()
            mark_t, mark_b = self._rate_mark
            rate = self._rate
            if mark_t and now - mark_t >= 1.0:
                rate = (self._bytes - mark_b) / (now - mark_t)
            return Progress(self._phase, self._bytes, self._memory, self._iterations, self._last, rate,
                            self._complete_forwarded, self._complete_acked)

    def cut(self) -> bool:
        """Cut the stream, unless `Complete` has been forwarded (then False: too late). The
        sender sees its stream break and fails its migration; the receiver sees its end."""
        with self._lock:
            if self._complete_forwarded:
                return False
            self._cut = True
            sockets = [s for s in (self._a, self._b, self._listener) if s is not None]
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        return True

    def close(self) -> None:
        """Close everything (idempotent); the socket file is removed."""
        with self._lock:
            self._closed = True
            sockets = [s for s in (self._a, self._b, self._listener) if s is not None]
            self._a = self._b = self._listener = None
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        with contextlib.suppress(OSError):
            os.unlink(self.listen_path)

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    # --- the thread ----------------------------------------------------------------------------

    def _serve(self) -> None:
        outcome, detail = "error", ""
        try:
            self._accept()
            self._forward()
            outcome, detail = "completed", "the receiver acknowledged Complete"
        except _Ended as e:
            outcome, detail = e.outcome, e.detail
        except Exception as e:  # a bug must end the relay, not leave it hanging
            log.exception("migration relay %s failed", self.name)
            outcome, detail = "error", f"relay failure: {e!r}"
        with self._lock:
            if self._cut and outcome != "completed":
                outcome, detail = "cut", "the launcher cut the stream"
            self._phase = "ended"
            self._ended = True
            self.outcome, self.detail = outcome, detail
        log.info("migration relay %s ended: %s (%s); %d bytes, %d memory iterations", self.name, outcome, detail,
                 self._bytes, self._iterations)
        if self.on_end is not None:
            self.on_end(outcome, detail)
        if self.close_on_end:
            self.close()  # both ends see the stream end: the sending VMM fails its migration at once

    def _accept(self) -> None:
        listener = self._listener
        assert listener is not None
        try:
            a, _ = listener.accept()
        except OSError as e:
            raise _Ended("cut" if self._cut else "error", f"accept on {self.listen_path}: {e}") from None
        b = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            b.connect(self.upstream_path)
        except OSError as e:
            a.close()
            b.close()
            raise _Ended("receiver-closed", f"cannot connect to {self.upstream_path}: {e.strerror or e}") from None
        with self._lock:
            if self._cut or self._closed:
                a.close()
                b.close()
                raise _Ended("cut", "cut before the stream began")
            self._a, self._b = a, b
        # A later connection (nothing else should come) is refused at once.
        threading.Thread(target=self._refuse_more, name=f"relay-{self.name}-refuse", daemon=True).start()

    def _refuse_more(self) -> None:
        while True:
            listener = self._listener
            if listener is None:
                return
            try:
                extra, _ = listener.accept()
            except OSError:
                return
            log.warning("migration relay %s: a second connection, refused", self.name)
            extra.close()

    def _forward(self) -> None:
        a, b = self._a, self._b
        assert a is not None and b is not None
        pipe_r, pipe_w = os.pipe2(os.O_CLOEXEC)
        with contextlib.suppress(OSError):
            fcntl.fcntl(pipe_w, F_SETPIPE_SZ, PIPE_SIZE)
        try:
            while True:
                head = self._read(a, HEADER.size, "sender-closed", at_boundary=True)
                command, _, length = HEADER.unpack(head)
                name = COMMANDS.get(command, f"command {command}")
                if command == MEMORY_FD:
                    raise _Ended("error", "the sender passes memory file descriptors (local mode), which no "
                                          "migration proxy can carry")
                if command in (COMPLETE, COMPLETE_PAUSED):
                    with self._lock:
                        if self._cut:
                            raise _Ended("cut", "cut before Complete")
                        self._complete_forwarded = True
                with self._lock:
                    self._phase = name
                self._write(b, head)
                if command == MEMORY:
                    if length % RANGE.size or length > MAX_TABLE:
                        raise _Ended("error", f"a Memory request with a {length}-byte range table")
                    table = self._read(a, length, "sender-closed")
                    self._write(b, table)
                    total = sum(RANGE.unpack_from(table, i)[1] for i in range(0, length, RANGE.size))
                    self._bulk(a, b, total, pipe_r, pipe_w, memory=True)
                    with self._lock:
                        self._iterations += 1
                elif length:
                    self._bulk(a, b, length, pipe_r, pipe_w, memory=False)
                reply = self._read(b, HEADER.size, "receiver-closed", at_boundary=True)
                status = struct.unpack_from("<H", reply)[0]
                acked = status == STATUS_OK and command in (COMPLETE, COMPLETE_PAUSED)
                if acked:  # the VM runs there: known before the sender can act on (or miss) the answer
                    with self._lock:
                        self._complete_acked = True
                self._write(a, reply, to_sender=True)
                if status != STATUS_OK:
                    raise _Ended("refused", f"the receiver answered Error to {name}")
                if acked:
                    return
                if command == ABANDON:
                    raise _Ended("sender-closed", "the sender abandoned the migration")
        finally:
            os.close(pipe_r)
            os.close(pipe_w)

    # --- I/O -----------------------------------------------------------------------------------

    def _read(self, s: socket.socket, n: int, outcome: str, at_boundary: bool = False) -> bytes:
        data = bytearray()
        while len(data) < n:
            try:
                chunk = s.recv(n - len(data))
            except OSError as e:
                raise _Ended(outcome, f"read failed: {e.strerror or e}") from None
            if not chunk:
                where = "between requests" if at_boundary and not data else "inside a request"
                raise _Ended(outcome, f"the stream ended {where}")
            data += chunk
        self._count(len(data) if s is self._a else 0, memory=0)
        return bytes(data)

    def _write(self, s: socket.socket, data: bytes | memoryview, to_sender: bool = False) -> None:
        try:
            s.sendall(data)
        except OSError as e:
            who = "sender-closed" if to_sender else "receiver-closed"
            raise _Ended(who, f"write failed: {e.strerror or e}") from None

    def _bulk(self, a: socket.socket, b: socket.socket, total: int, pipe_r: int, pipe_w: int, *, memory: bool) -> None:
        """Forward `total` bytes from `a` to `b` through the pipe, at most `bandwidth` bytes/s."""
        left = total
        while left:
            want = min(left, CHUNK)
            try:
                got = os.splice(a.fileno(), pipe_w, want)
            except OSError as e:
                if e.errno in (errno.EINVAL, errno.ENOSYS):
                    self._copy(a, b, left, memory=memory)
                    return
                raise _Ended("sender-closed", f"read failed: {e.strerror or e}") from None
            if got == 0:
                raise _Ended("sender-closed", "the stream ended inside a request")
            moved = 0
            while moved < got:
                try:
                    moved += os.splice(pipe_r, b.fileno(), got - moved)
                except OSError as e:
                    raise _Ended("receiver-closed", f"write failed: {e.strerror or e}") from None
            left -= got
            self._count(got, memory=got if memory else 0)
            self._throttle(got)

    def _copy(self, a: socket.socket, b: socket.socket, total: int, *, memory: bool) -> None:
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        left = total
        while left:
            try:
                got = a.recv_into(view[:min(left, CHUNK)])
            except OSError as e:
                raise _Ended("sender-closed", f"read failed: {e.strerror or e}") from None
            if got == 0:
                raise _Ended("sender-closed", "the stream ended inside a request")
            self._write(b, view[:got])
            left -= got
            self._count(got, memory=got if memory else 0)
            self._throttle(got)

    def _count(self, n: int, *, memory: int) -> None:
        if not n:
            return
        with self._lock:
            now = time.monotonic()
            self._bytes += n
            self._memory += memory
            self._last = now
            mark_t, mark_b = self._rate_mark
            if not mark_t:
                self._rate_mark = (now, self._bytes)
            elif now - mark_t >= 1.0:
                self._rate = (self._bytes - mark_b) / (now - mark_t)
                self._rate_mark = (now, self._bytes)

    def _throttle(self, n: int) -> None:
        """Sleep as long as it takes to stay under `bandwidth` bytes/s (the relay's own thread)."""
        if not self.bandwidth:
            return
        now = time.monotonic()
        if not self._bulk_started:
            self._bulk_started = now
        self._bulk_sent += n
        ahead = self._bulk_sent / self.bandwidth - (now - self._bulk_started)
        if ahead > 0:
            time.sleep(ahead)
