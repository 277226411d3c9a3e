"""The `newc` cpio format, the one Linux unpacks as an initramfs (pure; no cpio binary needed).

Each entry is a 110-byte ASCII header (magic `070701`, then thirteen 8-digit hexadecimal
fields), its NUL-terminated name and its data, each padded to 4 bytes; a `TRAILER!!!` entry
ends the archive (Linux `Documentation/driver-api/early-userspace/buffer-format.rst`,
`init/initramfs.c`). Entries are written in the order given, with owner root, a fixed time and
inode numbers counted from 1, so the same input gives the same bytes.
"""

from __future__ import annotations

import stat
from collections.abc import Iterable
from dataclasses import dataclass

MAGIC = b"070701"
TRAILER = "TRAILER!!!"


@dataclass(frozen=True)
class Entry:
    """One member: `path` relative to the root (no leading `/`), `mode` with its file type bits
    (`stat.S_IFREG | 0o755`, ...), `data` (a regular file's content or a symlink's target) and,
    for a device node, its `rdev` (major, minor)."""

    path: str
    mode: int
    data: bytes = b""
    rdev: tuple[int, int] = (0, 0)

    def __post_init__(self) -> None:
        if not self.path or self.path.startswith("/") or "\0" in self.path:
            raise ValueError(f"cpio member {self.path!r}: the path must be relative and non-empty")
        kind = stat.S_IFMT(self.mode)
        if kind not in (stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK, stat.S_IFCHR, stat.S_IFBLK):
            raise ValueError(f"cpio member {self.path!r}: file type {oct(kind)} is not written here")
        if self.data and kind not in (stat.S_IFREG, stat.S_IFLNK):
            raise ValueError(f"cpio member {self.path!r}: only files and symlinks carry data")


def directory(path: str, mode: int = 0o755) -> Entry:
    return Entry(path, stat.S_IFDIR | mode)


def file(path: str, data: bytes, mode: int = 0o644) -> Entry:
    return Entry(path, stat.S_IFREG | mode, data)


def symlink(path: str, target: str) -> Entry:
    return Entry(path, stat.S_IFLNK | 0o777, target.encode())


def char_device(path: str, major: int, minor: int, mode: int = 0o600) -> Entry:
    return Entry(path, stat.S_IFCHR | mode, rdev=(major, minor))


def _pad(n: int) -> bytes:
    return b"\0" * (-n % 4)


def _header(ino: int, mode: int, nlink: int, size: int, rdev: tuple[int, int], namesize: int) -> bytes:
    fields = (ino, mode, 0, 0, nlink, 0, size, 0, 0, rdev[0], rdev[1], namesize, 0)
    return MAGIC + b"".join(f"{value:08x}".encode() for value in fields)


def archive(entries: Iterable[Entry]) -> bytes:
    """The archive of `entries`. A directory must come before what it holds (Linux creates
    each member as it reads it); ValueError on a path given twice."""
    out = bytearray()
    seen: set[str] = set()
    for ino, entry in enumerate(entries, start=1):
        if entry.path in seen:
            raise ValueError(f"cpio member {entry.path!r} is given twice")
        seen.add(entry.path)
        name = entry.path.encode() + b"\0"
        nlink = 2 if stat.S_ISDIR(entry.mode) else 1
        head = _header(ino, entry.mode, nlink, len(entry.data), entry.rdev, len(name))
        out += head + name + _pad(len(head) + len(name))
        out += entry.data + _pad(len(entry.data))
    name = TRAILER.encode() + b"\0"
    head = _header(0, 0, 1, 0, (0, 0), len(name))
    out += head + name + _pad(len(head) + len(name))
    return bytes(out)
