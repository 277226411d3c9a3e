"""Fixtures for the executors: qemu-img (Debian's qemu-utils, installed by `make test`) to judge
the qcow2 files we write."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest


@pytest.fixture
def qemu_img() -> Any:
    """`qemu_img(*args)` runs qemu-img and returns its decoded JSON output (or text)."""
    binary = shutil.which("qemu-img")
    if binary is None:
        pytest.skip("qemu-img is missing: `make test` installs qemu-utils when run as root")

    def run(*args: str) -> Any:
        out = subprocess.run([binary, *args], check=True, capture_output=True, text=True, timeout=30).stdout
        return json.loads(out) if "--output=json" in args else out

    return run
