"""KubeVirt's JSON log lines on stderr, so `kubectl logs` reads like virt-launcher.

KubeVirt's logger (`staging/src/kubevirt.io/client-go/log/log.go@d923fdb815cd`) writes one JSON
object per line through go-kit's JSON logger, which encodes a map: keys come out sorted.
Fields: `component`, `level` (`info`, `warning`, `error`, `fatal`), `msg`, `pos` (`file.go:123`,
base name of the file), `timestamp` (UTC, `2006-01-02T15:04:05.000000Z`: microseconds, literal
`Z`), plus `kind`/`name`/`namespace`/`uid` for the object the line is about and `reason` for
an error. We print the same keys, sorted, e.g.

    {"component":"ch-launcher","kind":"VirtualMachineInstance","level":"info","msg":"...",
     "name":"testvmi","namespace":"default","pos":"manager.py:88",
     "timestamp":"2026-08-22T10:00:00.123456Z","uid":"..."}

Verbosity follows KubeVirt's `V(n)`: info lines have verbosity 2 unless a record says
otherwise (`extra={"v": 3}`); Python DEBUG records count as V(4). A record is printed when its
level is warning or above, or its verbosity is at most the configured one (default 2).

Cost: the parts that never change (component, object fields) are JSON-encoded once at setup;
each line is one f-string around `json.dumps` of the message.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import traceback
from typing import IO

COMPONENT = "ch-launcher"
DEBUG_VERBOSITY = 4  # Python DEBUG records count as KubeVirt's V(4)
INFO_VERBOSITY = 2  # KubeVirt's default verbosity for info lines

_LEVEL_NAMES = {logging.CRITICAL: "fatal", logging.ERROR: "error", logging.WARNING: "warning"}

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _timestamp(created: float) -> str:
    secs = int(created)
    micros = int((created - secs) * 1_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{micros:06d}Z"


class KubeVirtFormatter(logging.Formatter):
    """Formats a record as one KubeVirt JSON log line (no trailing newline).

    Per-record overrides through `extra=`: `object` (a dict with `kind`, `name`, `namespace`,
    `uid`: a line about another object), `subcomponent` (e.g. `cloud-hypervisor` for the VMM's own log), `reason`.
    An exception attached to the record becomes `reason` (its message) and `stack`.
    """

    def __init__(self, *, component: str = COMPONENT, uid: str = "", name: str = "",
                 namespace: str = "") -> None:
        super().__init__()
        self.component = _dumps(component)
        self.uid = _dumps(uid)
        # kind/name/namespace only when known, as KubeVirt's log.Object() adds them.
        self.obj_head = ',"kind":"VirtualMachineInstance"' if name else ""
        self.obj_mid = f',"name":{_dumps(name)}' if name else ""
        self.obj_mid += f',"namespace":{_dumps(namespace)}' if namespace else ""

    def format(self, record: logging.LogRecord) -> str:
        level = _LEVEL_NAMES.get(record.levelno, "info") if record.levelno >= logging.WARNING else "info"
        msg = record.getMessage()
        d = record.__dict__
        head, mid, uid = self.obj_head, self.obj_mid, self.uid
        obj = d.get("object")
        if obj:  # a line about another object than the launcher's VMI
            head = f',"kind":{_dumps(obj["kind"])}' if obj.get("kind") else ""
            mid = f',"name":{_dumps(obj["name"])}' if obj.get("name") else ""
            mid += f',"namespace":{_dumps(obj["namespace"])}' if obj.get("namespace") else ""
            uid = _dumps(obj.get("uid", ""))
        reason = d.get("reason")
        stack = ""
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            reason = reason or (str(exc) or type(exc).__name__)
            stack = f',"stack":{_dumps("".join(traceback.format_exception(exc)).rstrip())}'
        tail = f',"reason":{_dumps(str(reason))}' if reason else ""
        tail += stack
        sub = d.get("subcomponent")
        sub_part = f',"subcomponent":{_dumps(sub)}' if sub else ""
        # Keys in sorted order, as go-kit's JSON logger prints them.
        return (f'{{"component":{self.component}{head},"level":"{level}","msg":{_dumps(msg)}'
                f'{mid},"pos":"{record.filename}:{record.lineno}"{tail}{sub_part}'
                f',"timestamp":"{_timestamp(record.created)}","uid":{uid}}}')


class _VerbosityFilter(logging.Filter):
    def __init__(self, verbosity: int) -> None:
        super().__init__()
        self.verbosity = verbosity

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        v = record.__dict__.get("v")
        if v is None:
            v = DEBUG_VERBOSITY if record.levelno < logging.INFO else INFO_VERBOSITY
        return v <= self.verbosity


class KubeVirtHandler(logging.StreamHandler[IO[str]]):
    """Writes each line with one write() call, so lines from threads never interleave."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + "\n"
            self.stream.write(line)
            self.stream.flush()
        except Exception:  # noqa: BLE001 - logging must never take the launcher down
            self.handleError(record)


def setup_logging(*, uid: str = "", name: str = "", namespace: str = "", verbosity: int = 2,
                  stream: IO[str] | None = None, component: str = COMPONENT) -> logging.Handler:
    """Route every Python log record to KubeVirt JSON lines on stderr (or `stream`).

    Idempotent: a second call replaces the handler of the first (e.g. once the VMI is known).
    Returns the handler. Raises ValueError for a negative verbosity, as KubeVirt does.
    """
    if verbosity < 0:
        raise ValueError("Verbosity setting must not be negative")
    root = logging.getLogger()
    for h in list(root.handlers):
        if isinstance(h, KubeVirtHandler):
            root.removeHandler(h)
    handler = KubeVirtHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(KubeVirtFormatter(component=component, uid=uid, name=name, namespace=namespace))
    handler.addFilter(_VerbosityFilter(verbosity))
    root.addHandler(handler)
    # Let DEBUG records be created only when they can be printed: cheap when quiet.
    root.setLevel(logging.DEBUG if verbosity >= DEBUG_VERBOSITY else logging.INFO)
    logging.captureWarnings(True)
    return handler


def log_subcomponent_line(logger: logging.Logger, subcomponent: str, line: str,
                          level: int = logging.INFO) -> None:
    """Log one line of a child's own log (e.g. `cloud-hypervisor`) with `subcomponent` set,
    as virt-launcher does for libvirt and QEMU lines. Blank lines are dropped."""
    line = line.rstrip()
    if line.strip():
        logger.log(level, "%s", line, extra={"subcomponent": subcomponent}, stacklevel=2)
