"""Which cloud-hypervisor versions this launcher drives: v53 (>= 53.0.0, < 54.0.0).

The version is the `version` field of `vmm.ping` ("53.0.0"; its `build_version`, `git describe`,
is "v53.0.0" on the release binary), read wherever it stands in the text: "v53.0",
"53.0.0-dirty" and "cloud-hypervisor v53.0.0-dirty" (what `-V` prints) all name v53. v53 is the release whose REST API,
error bodies and statuses the client (`api.py`), the translator and the tests were checked
against, on the real binary (../shared/vmm) and on the simulated one. Older releases lack what
the launcher relies on (the 404 for a missing VM, the buffered serial socket, the stale-socket
lock of v53); a later one may change what the client maps (main already answers 400/404/409
where v53 answers 500), so it is refused until it has been checked and this range widened.
"""

from __future__ import annotations

import re

MINIMUM = (53, 0, 0)   # inclusive
BELOW = (54, 0, 0)     # exclusive
SUPPORTED = ">= 53.0.0, < 54.0.0"

# The first "[v]MAJOR.MINOR[.PATCH]" that does not continue a word ("rc1.2" names none).
_VERSION = re.compile(r"(?<![\w.])v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse(text: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of "53.0.0", "v53.0", "53.0.0-dirty" or "cloud-hypervisor v53.0.0-dirty";
    None if the text names no version."""
    match = _VERSION.search(text)
    if match is None:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def reported(version: str, build_version: str = "") -> str:
    """The version a `vmm.ping` answer names: its `version`, or its `build_version` when
    `version` names none (missing, empty, or a bare build name) and `build_version` does."""
    if parse(version) is None and parse(build_version) is not None:
        return build_version
    return version


def refusal(version: str) -> str | None:
    """None when `version` is supported, else why not: a message naming it and the range."""
    parsed = parse(version)
    if parsed is not None and MINIMUM <= parsed < BELOW:
        return None
    return (f"cloud-hypervisor {version or '(no version)'} is not supported: this ch-launcher "
            f"drives cloud-hypervisor {SUPPORTED}")
