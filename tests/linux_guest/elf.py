"""What a dynamically linked x86-64 program needs to run: its loader (PT_INTERP) and the libraries
it names (DT_NEEDED), read from the ELF file itself (pure; no loader run, nothing installed).

Only 64-bit little-endian ELF files are read; anything else raises ValueError, as does a file
whose headers point outside it.
"""

from __future__ import annotations

import struct

_PT_LOAD, _PT_DYNAMIC, _PT_INTERP = 1, 2, 3
_DT_NULL, _DT_NEEDED, _DT_STRTAB = 0, 1, 5
_PHDR = struct.Struct("<IIQQQQQQ")  # type, flags, offset, vaddr, paddr, filesz, memsz, align
_DYN = struct.Struct("<qQ")


def _segments(data: bytes) -> list[tuple[int, int, int, int]]:
    """(type, offset, vaddr, filesz) of each program header."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    out = []
    for i in range(phnum):
        kind, _, offset, vaddr, _, filesz, _, _ = _PHDR.unpack_from(data, phoff + i * phentsize)
        if offset + filesz > len(data):
            raise ValueError("a program header points outside the file")
        out.append((kind, offset, vaddr, filesz))
    return out


def interpreter(data: bytes) -> str | None:
    """The loader the kernel starts for this program (`/lib64/ld-linux-x86-64.so.2`), or None."""
    for kind, offset, _, size in _segments(data):
        if kind == _PT_INTERP:
            return data[offset:offset + size].split(b"\0", 1)[0].decode()
    return None


def needed(data: bytes) -> list[str]:
    """The sonames of DT_NEEDED, in order (empty for a static program)."""
    segments = _segments(data)
    dynamic = next(((offset, size) for kind, offset, _, size in segments if kind == _PT_DYNAMIC), None)
    if dynamic is None:
        return []
    entries = [_DYN.unpack_from(data, at) for at in range(dynamic[0], dynamic[0] + dynamic[1], _DYN.size)]
    strtab = next((value for tag, value in entries if tag == _DT_STRTAB), None)
    if strtab is None:
        raise ValueError("a dynamic section without a string table")
    base = next((offset + strtab - vaddr for kind, offset, vaddr, size in segments
                 if kind == _PT_LOAD and vaddr <= strtab < vaddr + size), None)
    if base is None:
        raise ValueError("the string table is in no loaded segment")
    names = []
    for tag, value in entries:
        if tag == _DT_NULL:
            break
        if tag == _DT_NEEDED:
            names.append(data[base + value:data.index(b"\0", base + value)].decode())
    return names
