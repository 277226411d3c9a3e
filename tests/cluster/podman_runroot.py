"""podman's run root (its locks and transient state) for a storage of the suite's own."""

from __future__ import annotations

import hashlib
from pathlib import Path


def short_runroot(storage: Path) -> Path:
    """podman's `--runroot` for the storage at `storage`: under /tmp whatever the checkout's path
    (podman: "the specified runroot is longer than 50 characters"), and always the same one for
    one storage (podman records it in the storage's database and refuses another)."""
    return Path("/tmp") / f"kvch-podman-{hashlib.sha256(str(storage.resolve()).encode()).hexdigest()[:12]}"
