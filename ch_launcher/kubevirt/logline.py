"""One KubeVirt JSON log line (`ch_launcher.kubevirt.log`'s format: the keys sorted, a UTC
timestamp with microseconds) without `logging` or `json`, for the pod's small processes that
import built-in modules only: the monitor and `virt-freezer`."""

from __future__ import annotations

import time
from _json import encode_basestring_ascii as _quoted


def timestamp(now: float) -> str:
    secs = int(now)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{int((now - secs) * 1_000_000):06d}Z"


def line(component: str, level: str, msg: str, pos: str, *, name: str = "", namespace: str = "", uid: str = "",
         **more: str) -> str:
    """The line (no newline): `kind`/`name`/`namespace` when `name` is given, `uid` always."""
    record = {"component": component, "level": level, "msg": msg, "pos": pos, "timestamp": timestamp(time.time()),
              "uid": uid, **more}
    if name:
        record.update(kind="VirtualMachineInstance", name=name, namespace=namespace)
    return "{" + ",".join(f"{_quoted(k)}:{_quoted(v)}" for k, v in sorted(record.items())) + "}"
