"""KubeVirt version ranges: `">=1.8.0, <1.10.0"` against `status.observedKubeVirtVersion`.

Pure. Versions are compared on (major, minor, patch) only: a pre-release or development build
counts as its release (`v1.9.0-beta.0-1264-gd923fdb815cd` is 1.9.0), so `<1.10.0` also excludes
1.10 release candidates. Malformed input raises `ValueError` naming the offending text.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

Version = tuple[int, int, int]

_VERSION = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:[-+].*)?$")
_CONSTRAINT = re.compile(r"^(>=|<=|==|!=|>|<|=)?\s*(\S+)$")
_OPS: dict[str, Callable[[Version, Version], bool]] = {
    ">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt,
    "==": operator.eq, "=": operator.eq, "!=": operator.ne,
}


def parse_version(text: str) -> Version:
    """`v1.9.0`, `1.9`, `1.9.0-rc.1` -> (1, 9, 0). Raises ValueError on anything else."""
    m = _VERSION.match(text.strip()) if isinstance(text, str) else None
    if not m:
        raise ValueError(f"not a version: {text!r} (expected e.g. v1.9.0)")
    major, minor, patch = (int(g or 0) for g in m.groups())
    return major, minor, patch


@dataclass(frozen=True)
class VersionRange:
    """A conjunction of constraints, e.g. `>=1.8.0, <1.10.0`. Empty text accepts every version."""

    text: str
    constraints: tuple[tuple[str, Version], ...]

    @classmethod
    def parse(cls, text: str) -> VersionRange:
        if not isinstance(text, str):
            raise ValueError(f"a version range must be a string like '>=1.8.0, <1.10.0', got {text!r}")
        constraints = []
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            m = _CONSTRAINT.match(part)
            if not m:
                raise ValueError(f"bad version constraint {part!r} in {text!r}")
            op, version = m.group(1) or "==", m.group(2)
            try:
                constraints.append((op, parse_version(version)))
            except ValueError as e:
                raise ValueError(f"bad version constraint {part!r} in {text!r}: {e}") from None
        return cls(text.strip(), tuple(constraints))

    def contains(self, version: str | Version) -> bool:
        """True when `version` satisfies every constraint. Raises ValueError if it does not parse."""
        v = parse_version(version) if isinstance(version, str) else version
        return all(_OPS[op](v, bound) for op, bound in self.constraints)

    def __str__(self) -> str:
        return self.text or "any"
