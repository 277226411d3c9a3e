"""The raw disk of the cluster's containerDisk: 1 MiB whose first sector is `bootsector.S`, built with
Debian's binutils (as tests/guest is), once per source version.

`boot_disk()` returns the path of the disk, rebuilt when bootsector.S changes; it lives under the
repository's build/ (ignored by git), keyed by the source's hash, written whole or not at all.
Raises RuntimeError with the assembler's or linker's message when the build fails, or when the
sector is not 512 bytes ending in the boot signature.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "bootsector.S"
BUILD = HERE.parents[1] / "build" / "bootdisk"
DISK_SIZE = 1 << 20
READY = "KCH-BOOT-SECTOR-READY"  # printed at every boot (bootsector.S)
POWER_BUTTON = "KCH-BOOT-SECTOR-POWER-BUTTON"  # printed when the ACPI power button is pressed, before S5


def boot_sector() -> bytes:
    """The assembled sector (512 bytes, 0x55 0xaa last)."""
    with tempfile.TemporaryDirectory() as tmp:
        obj, flat = os.path.join(tmp, "boot.o"), os.path.join(tmp, "boot.bin")
        for argv in (["as", "--32", "-o", obj, str(SOURCE)],
                     ["ld", "-m", "elf_i386", "-nostdlib", "-Ttext=0x7c00", "-e", "_start", "--oformat=binary",
                      "-o", flat, obj]):
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"{argv[0]} failed: {done.stderr.strip()}")
        sector = Path(flat).read_bytes()
    if len(sector) != 512 or sector[-2:] != b"\x55\xaa":
        raise RuntimeError(f"{SOURCE.name} assembled to {len(sector)} bytes, not a 512-byte boot sector")
    return sector


def boot_disk() -> Path:
    """The disk image: the boot sector, then zeros up to DISK_SIZE."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    out = BUILD / f"disk-{digest}.img"
    if out.exists():
        return out
    BUILD.mkdir(parents=True, exist_ok=True)
    sector = boot_sector()
    with tempfile.NamedTemporaryFile(dir=BUILD, delete=False) as f:
        f.write(sector)
        f.truncate(DISK_SIZE)
    os.replace(f.name, out)
    return out
