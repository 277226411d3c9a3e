"""tests/linux_guest/elf.py against the loader's own view of real binaries of this machine."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.linux_guest import elf

LS = Path(shutil.which("ls") or "/bin/ls")


def test_a_dynamic_programs_loader_and_libraries_are_what_ldd_resolves() -> None:
    """The program's DT_NEEDED, and theirs in turn, are the libraries ldd lists (ldd lists the
    whole closure, direct ones first)."""
    data = LS.read_bytes()
    assert elf.interpreter(data) == "/lib64/ld-linux-x86-64.so.2"
    listed = subprocess.run(["ldd", str(LS)], capture_output=True, text=True, check=True, timeout=30).stdout
    by_ldd = {line.split()[0]: line.split()[2] for line in listed.splitlines() if "=>" in line}
    direct = elf.needed(data)
    assert direct == list(by_ldd)[:len(direct)] and "libc.so.6" in direct
    closure, todo = set(), list(direct)
    while todo:
        name = todo.pop()
        if name != "ld-linux-x86-64.so.2" and name not in closure:  # libc names the loader: ldd lists it apart
            closure.add(name)
            todo += elf.needed(Path(by_ldd[name]).read_bytes())
    assert closure == set(by_ldd)


def test_a_static_program_needs_nothing() -> None:
    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.skip("busybox is not installed (Debian package busybox)")
    data = Path(busybox).read_bytes()
    if elf.interpreter(data) is not None:  # Debian's `busybox` is dynamic; busybox-static is not
        assert "libc.so.6" in elf.needed(data)
    else:
        assert elf.needed(data) == []


@pytest.mark.parametrize("data", [b"#!/bin/sh\n", b"\x7fELF\x01\x01" + bytes(58)])
def test_what_is_not_a_64_bit_elf_file_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError, match="64-bit little-endian ELF"):
        elf.needed(data)
