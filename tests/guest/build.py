"""Builds the tiny guest (guest.S) with Debian's binutils, once per source version.

`guest_payload()` returns the path of the ELF, rebuilt when guest.S or guest.ld change. The
build lives under the repository's build/ (ignored by git), keyed by the sources' hash, so
concurrent test runs never see a half-written file.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import subprocess
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
BUILD = HERE.parents[1] / "build" / "guest"
SOURCES = (HERE / "guest.S", HERE / "guest.ld")


def missing_tools() -> str | None:
    """None when `as` and `ld` are on PATH, else what is missing (Debian package binutils)."""
    absent = [tool for tool in ("as", "ld") if shutil.which(tool) is None]
    return f"{' and '.join(absent)} not found (Debian package binutils)" if absent else None


def guest_payload() -> pathlib.Path:
    """The built guest; raises RuntimeError with the assembler's or linker's message on failure."""
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in SOURCES)).hexdigest()[:16]
    out = BUILD / f"guest-{digest}.elf"
    if out.exists():
        return out
    BUILD.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=BUILD) as tmp:
        obj = os.path.join(tmp, "guest.o")
        elf = os.path.join(tmp, "guest.elf")
        for argv in (
            ["as", "--64", "-o", obj, str(SOURCES[0])],
            ["ld", "-m", "elf_x86_64", "-nostdlib", "--no-warn-rwx-segments", "-T", str(SOURCES[1]), "-o", elf, obj],
        ):
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"{argv[0]} failed: {done.stderr.strip()}")
        os.replace(elf, out)
    return out
