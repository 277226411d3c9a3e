"""Where the real cloud-hypervisor and a guest for it come from, for every test and benchmark.

The binary: `CH_BINARY` when set, else `../shared/vmm/cloud-hypervisor` beside the checkout (a
v53.0 build, see its README). The guest: `CH_FIRMWARE` (a firmware or PVH ELF) or `CH_KERNEL`
(with `CH_CMDLINE`) when set, else the tiny guest of `tests/guest/`, built from source with
binutils. `unavailable()` says why a real VMM cannot run here (None when it can); tests skip
with that reason, and tests/conftest.py turns such a skip into a failure when `../shared` is
beside the checkout (CI), so the real-VMM tests cannot silently stop running.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

from tests.guest.build import guest_payload, missing_tools

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SHARED_CH = SHARED / "vmm" / "cloud-hypervisor"


def binary() -> str:
    """The real binary's path ("" when there is none)."""
    if os.environ.get("CH_BINARY"):
        return os.environ["CH_BINARY"]
    return str(SHARED_CH) if SHARED_CH.exists() else ""


def unavailable(*, tiny_guest: bool = False) -> str | None:
    """None when the real VMM and a guest can run here, else the reason they cannot.

    `tiny_guest`: the test drives the tiny guest's console commands, so it always runs the tiny
    guest (CH_FIRMWARE/CH_KERNEL choose the guest only for tests any guest passes)."""
    path = binary()
    if not path:
        return "no real cloud-hypervisor: ../shared/vmm is not beside this checkout and CH_BINARY is not set"
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return f"{path} is not an executable file (CH_BINARY or ../shared/vmm/cloud-hypervisor)"
    try:
        os.close(os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC))
    except OSError as exc:
        return f"/dev/kvm is not usable: {exc.strerror}"
    own = os.environ.get("CH_FIRMWARE") or os.environ.get("CH_KERNEL")
    if own and not tiny_guest:
        return None if os.path.isfile(own) else f"guest payload {own} (CH_FIRMWARE or CH_KERNEL) does not exist"
    return missing_tools()


def payload() -> dict[str, Any]:
    """A `PayloadConfig` that boots on the real VMM: the user's guest, else the tiny guest."""
    if os.environ.get("CH_FIRMWARE"):
        return {"firmware": os.environ["CH_FIRMWARE"]}
    if os.environ.get("CH_KERNEL"):
        out = {"kernel": os.environ["CH_KERNEL"]}
        if os.environ.get("CH_CMDLINE"):
            out["cmdline"] = os.environ["CH_CMDLINE"]
        return out
    return {"firmware": str(guest_payload())}


def firmware_file(*, tiny_guest: bool = False) -> pathlib.Path:
    """A file the launcher can use as its `hypervisor-fw`: CH_FIRMWARE (unless `tiny_guest`),
    else the tiny guest."""
    if os.environ.get("CH_FIRMWARE") and not tiny_guest:
        return pathlib.Path(os.environ["CH_FIRMWARE"])
    return guest_payload()
