"""Cloud Hypervisor's event-monitor stream: parsing, and the FIFO the launcher reads it from.

CH writes every event as `serde_json::to_string_pretty` output followed by a blank line
(`event_monitor/src/lib.rs@v53.0`), for example::

    {
      "timestamp": {
        "secs": 0,
        "nanos": 29228206
      },
      "source": "vm",
      "event": "booted",
      "properties": null
    }

Reads of a FIFO return arbitrary slices of that stream, so the parser buffers bytes, cuts them at
blank lines (a blank line never occurs inside pretty-printed JSON: newlines in strings are
escaped) and decodes each piece. A piece that is not a valid event is logged and dropped; the
next blank line resynchronises the stream, so one bad object never hides the following ones.

With `--event-monitor path=<fifo>` CH opens the FIFO write-only at start-up and blocks until a
reader exists, and it writes non-blocking, dropping events when the pipe is full
(cloud-hypervisor.md §6). `open_event_fifo` therefore creates the FIFO and opens the read end
*before* the VMM is spawned, and keeps a write end of its own open so the read end never reports
end-of-file when CH exits or has not opened it yet (no busy EOF loop in an event loop).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import stat
from dataclasses import dataclass

log = logging.getLogger(__name__)

# A stream that never produces a blank line is broken; do not let it eat memory.
MAX_PENDING_BYTES = 1 << 20

_SEPARATOR = b"\n\n"


@dataclass(frozen=True)
class Event:
    """One event of the stream.

    `timestamp` is seconds since the VMM process started (CH's serde `Duration`), not wall-clock
    time. `properties` is `None` when CH wrote `null`, else a string-to-string mapping (e.g.
    `{"id": "_disk0"}` for `virtio-device:activated`).
    """

    source: str
    event: str
    properties: dict[str, str] | None
    timestamp: float

    @property
    def name(self) -> str:
        """`"<source>:<event>"`, e.g. `"vm:booted"`: the spelling used in CH's docs and ours."""
        return f"{self.source}:{self.event}"


def event_from_json(obj: object) -> Event:
    """Builds an `Event` from one decoded JSON object; `ValueError` if it is not an event."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    source, name = obj.get("source"), obj.get("event")
    if not isinstance(source, str) or not isinstance(name, str):
        raise ValueError("'source' and 'event' must be strings")
    props = obj.get("properties")
    if props is not None:
        if not isinstance(props, dict):
            raise ValueError("'properties' must be null or an object")
        props = {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in props.items()}
    ts = obj.get("timestamp")
    if isinstance(ts, dict):
        secs, nanos = ts.get("secs", 0), ts.get("nanos", 0)
        if not isinstance(secs, int) or not isinstance(nanos, int):
            raise ValueError("'timestamp' must hold integer 'secs' and 'nanos'")
        timestamp = secs + nanos / 1e9
    elif isinstance(ts, (int, float)) and not isinstance(ts, bool):
        timestamp = float(ts)
    elif ts is None:
        timestamp = 0.0
    else:
        raise ValueError("'timestamp' must be {secs, nanos}")
    return Event(source=source, event=name, properties=props, timestamp=timestamp)


class EventStreamParser:
    """Incremental parser of the event-monitor byte stream.

    `feed()` accepts any slice of the stream and returns the events completed by it, in order.
    It never raises on bad data: a malformed object is logged at WARNING and skipped.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._decoder = json.JSONDecoder()
        self.skipped = 0  # malformed objects dropped so far (for tests and diagnostics)

    def feed(self, data: bytes) -> list[Event]:
        self._buf += data
        events: list[Event] = []
        while True:
            cut = self._buf.find(_SEPARATOR)
            if cut < 0:
                break
            piece = bytes(self._buf[:cut])
            del self._buf[: cut + len(_SEPARATOR)]
            events.extend(self._decode(piece))
        if self._buf.strip():
            # Objects may be complete before their blank line arrives: decode them now so the
            # launcher learns of `vm:shutdown` without waiting for the next event, also when a
            # writer of compact JSON without blank lines has begun the next one. An incomplete
            # object simply stays buffered.
            events.extend(self._complete_objects_of_tail())
            if len(self._buf) > MAX_PENDING_BYTES:
                log.warning("event stream: %d bytes without a blank line, dropped", len(self._buf))
                self._buf.clear()
                self.skipped += 1
        else:
            self._buf.clear()
        return events

    def _complete_objects_of_tail(self) -> list[Event]:
        """The complete JSON values at the start of the buffer (which holds no blank line),
        taken out of it; what follows them (an incomplete value) stays."""
        text = bytes(self._buf).decode("utf-8", errors="surrogateescape")  # byte-exact round trip
        objs: list[object] = []
        pos, end = 0, len(text)
        while True:
            while pos < end and text[pos] in " \t\r\n":
                pos += 1
            if pos >= end:
                break
            try:
                obj, after = self._decoder.raw_decode(text, pos)
            except ValueError:
                break
            objs.append(obj)
            pos = after
        if pos:
            del self._buf[: len(text[:pos].encode("utf-8", errors="surrogateescape"))]
            if not self._buf.strip():
                self._buf.clear()
        return [e for e in (self._to_event(o, text) for o in objs) if e is not None]

    def _decode(self, piece: bytes) -> list[Event]:
        """The events in `piece` (its blank line has come); JSON that does not parse is skipped (logged)."""
        text = piece.decode("utf-8", errors="replace")
        try:
            objs = self._decode_all(text)
        except ValueError as exc:
            self.skipped += 1
            log.warning("event stream: skipped a malformed object (%s): %.200r", exc, text)
            return []
        return [e for e in (self._to_event(o, text) for o in objs) if e is not None]

    def _decode_all(self, text: str) -> list[object]:
        """All JSON values in `text` (several compact objects may share one piece)."""
        objs: list[object] = []
        pos, end = 0, len(text)
        while True:
            while pos < end and text[pos] in " \t\r\n":
                pos += 1
            if pos >= end:
                return objs
            obj, pos = self._decoder.raw_decode(text, pos)
            objs.append(obj)

    def _to_event(self, obj: object, text: str) -> Event | None:
        try:
            return event_from_json(obj)
        except ValueError as exc:
            self.skipped += 1
            log.warning("event stream: skipped an object that is not an event (%s): %.200r", exc, text)
            return None


class EventFifo:
    """The read side of the event-monitor FIFO (see module docstring).

    `read_fd` is non-blocking: register it with a selector or `loop.add_reader`, then call
    `read_available()` when it is readable. Because this object also holds a write end, the read
    end never signals end-of-file; the VMM's exit is learnt from its process (pidfd), not here.
    """

    def __init__(self, path: str, read_fd: int, write_fd: int) -> None:
        self.path = path
        self.read_fd = read_fd
        self._write_fd = write_fd

    def fileno(self) -> int:
        return self.read_fd

    def read_available(self) -> bytes:
        """Everything currently in the pipe, possibly `b""`; never blocks. `OSError` once closed."""
        if self.read_fd < 0:
            raise OSError(errno.EBADF, f"event FIFO {self.path} is closed")
        chunks = []
        while True:
            try:
                chunk = os.read(self.read_fd, 65536)
            except BlockingIOError:
                break
            if not chunk:  # cannot happen while we hold a write end; be safe anyway
                break
            chunks.append(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        """Closes both ends; idempotent. The FIFO file itself is left for the caller to remove."""
        for attr in ("read_fd", "_write_fd"):
            fd = getattr(self, attr)
            if fd >= 0:
                setattr(self, attr, -1)
                with contextlib.suppress(OSError):
                    os.close(fd)

    def __enter__(self) -> EventFifo:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_event_fifo(path: str) -> EventFifo:
    """Creates (mode 0600) or reuses the FIFO at `path` and opens it for reading.

    A stale regular file at `path` (a previous run with `--event-monitor` pointing at a file) is
    replaced by a FIFO. Anything else there (a directory, a socket) raises `OSError` naming the
    path, rather than being deleted.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISFIFO(st.st_mode):
        if stat.S_ISREG(st.st_mode):
            os.unlink(path)
            st = None
        else:
            raise OSError(errno.EEXIST, f"{path} exists and is not a FIFO")
    if st is None:
        os.mkfifo(path, 0o600)
    # O_RDONLY|O_NONBLOCK succeeds without a writer; then our own writer cannot block either.
    read_fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        write_fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        os.close(read_fd)
        raise
    return EventFifo(path, read_fd, write_fd)
