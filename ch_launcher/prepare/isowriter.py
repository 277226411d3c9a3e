"""An ISO 9660 image writer for the few small files of a cloud-init data source or config volume.

What KubeVirt's `xorrisofs -joliet -rock` makes of them, written in-process in about a
millisecond (a child process running pycdlib took 100-600 ms of every such VM's first Sync,
bench/real_vmm.py): an ISO 9660 directory tree with interchange-level-2 names (the upper-cased
name reduced to `A-Z0-9_`, made unique), Rock Ridge (RRIP 1.09: the real names and POSIX modes,
what Linux shows) on it, and a Joliet tree (UCS-2 names, what Windows shows) over the same file
data, unless a name or the label is too long for Joliet (64 characters per name, 16 for the
label). Both trees have their path tables. `write_image` writes a staging file and renames it into
place.

Layout (ECMA-119; 2048-byte sectors): 16 empty sectors; the primary and the Joliet volume
descriptors and the set terminator; the four path tables (primary L and M, Joliet L and M); the
primary directories; the Joliet directories; the Rock Ridge continuation areas (the root's
extension reference, and the entries of a record whose names do not fit in it); the files;
PAD_SECTORS zero sectors.
Standard library only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

SECTOR = 2048
JOLIET_MAX_NAME = 64  # UCS-2 characters per Joliet name component
JOLIET_MAX_LABEL = 16  # the volume identifier's 32 bytes hold 16 UCS-2 characters
ISO_MAX_NAME = 30  # interchange level 2: a file identifier's name, "." and extension
# zero sectors after the files, counted in the volume, as mkisofs and xorrisofs pad by default: the
# volume probes of busybox (`findfs LABEL=cidata`, `blkid`) read 0x11000 bytes and find nothing on
# a shorter device, so a small guest's init never found the cloud-init disk of a 28-sector image
PAD_SECTORS = 150
DIR_MODE, FILE_MODE = 0o40555, 0o100444
_D_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
# RRIP 1.09's extension reference, as the Rock Ridge documents give it
_RR_ID = b"RRIP_1991A"
_RR_DESCRIPTION = b"THE ROCK RIDGE INTERCHANGE PROTOCOL PROVIDES SUPPORT FOR POSIX FILE SYSTEM SEMANTICS"
_RR_SOURCE = (b"PLEASE CONTACT DISC PUBLISHER FOR SPECIFICATION SOURCE.  SEE PUBLISHER IDENTIFIER IN PRIMARY "
              b"VOLUME DESCRIPTOR FOR CONTACT INFORMATION.")


def write_image(path: str, label: str, files: Iterable[tuple[str, bytes]]) -> None:
    """Write an ISO with `label` holding `files` (relative path, content), atomically. Raises
    OSError, or ValueError for a path that is empty, absolute or has an empty component."""
    image = build_image(label, files)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    staging = f"{path}.staging"
    try:
        with open(staging, "wb") as f:
            f.write(image)
        os.chmod(staging, 0o640)
        os.replace(staging, path)
    except BaseException:
        if os.path.lexists(staging):
            os.unlink(staging)
        raise


def build_image(label: str, files: Iterable[tuple[str, bytes]]) -> bytes:
    """The image's bytes (see the module docstring)."""
    root = _Dir("")
    for rel, data in sorted(files):
        parts = rel.split("/")
        if not rel or rel.startswith("/") or "" in parts:
            raise ValueError(f"not a relative file path: {rel!r}")
        node = root
        for part in parts[:-1]:
            node = node.subdir(part)
        node.files[parts[-1]] = data
    dirs = root.walk()
    joliet = len(label) <= JOLIET_MAX_LABEL and all(
        len(n) <= JOLIET_MAX_NAME for d in dirs for n in (d.name, *d.files))
    return _Layout(label, dirs, joliet, time.gmtime()).image()


@dataclass
class _Dir:
    name: str
    parent: _Dir | None = None
    dirs: dict[str, _Dir] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    number: int = 0  # in the path tables' order, from 1

    def subdir(self, name: str) -> _Dir:
        if name not in self.dirs:
            self.dirs[name] = _Dir(name, self)
        return self.dirs[name]

    def walk(self) -> list[_Dir]:
        """This directory and those below it breadth first, each level in the path tables'
        order (by parent, then name); numbered."""
        order, level = [self], [self]
        while level:
            level = [child for d in level for _, child in sorted(d.dirs.items())]
            order.extend(level)
        for number, d in enumerate(order, 1):
            d.number = number
        return order


@dataclass
class _Record:
    """One directory record of a tree (its location filled in once sectors are allotted)."""

    identifier: bytes
    is_dir: bool
    target: _Dir | None = None  # the directory it names (".", "..", a subdirectory)
    data: bytes | None = None  # the file it names
    system_use: bytes = b""
    continuation: bytes = b""  # Rock Ridge entries placed in a continuation area (the CE entry's)

    def length(self) -> int:
        n = 33 + len(self.identifier) + (1 - len(self.identifier) % 2) + len(self.system_use)
        return n + n % 2


class _Layout:
    def __init__(self, label: str, dirs: list[_Dir], joliet: bool, now: time.struct_time) -> None:
        self.label, self.dirs, self.joliet, self.now = label, dirs, joliet, now
        self.iso_names = {id(d): _iso_names(d) for d in dirs}
        self.trees: dict[str, dict[int, list[_Record]]] = {"iso": {}, "joliet": {}}
        for d in dirs:
            self.trees["iso"][id(d)] = self._records(d, rock=True)
            if joliet:
                self.trees["joliet"][id(d)] = self._records(d, rock=False)
        self.location: dict[tuple[str, int], int] = {}  # (tree, directory) -> first sector
        self.size: dict[tuple[str, int], int] = {}  # (tree, directory) -> bytes, whole sectors
        self.file_at: dict[int, int] = {}  # id(data) -> first sector
        self.continuations: list[tuple[_Record, int, int]] = []  # record, sector, offset

    # --- records -------------------------------------------------------------------------------

    def _records(self, d: _Dir, *, rock: bool) -> list[_Record]:
        parent = d.parent or d
        records = [_Record(b"\0", True, d), _Record(b"\1", True, parent)]
        names = self.iso_names[id(d)]
        for name, sub in sorted(d.dirs.items()):
            records.append(_Record(names[name] if rock else _ucs2(name), True, sub))
        for name, data in sorted(d.files.items()):
            records.append(_Record(names[name] if rock else _ucs2(name), False, data=data))
        real = ["", "", *sorted(d.dirs), *sorted(d.files)]
        if rock:
            for record, name in zip(records, real, strict=True):
                self._rock_ridge(record, name, root_dot=d.parent is None and record.identifier == b"\0")
        records[2:] = sorted(records[2:], key=lambda r: r.identifier)
        return records

    def _rock_ridge(self, record: _Record, name: str, *, root_dot: bool) -> None:
        links = 2 + len(record.target.dirs) if record.target is not None else 1
        px = _entry(b"PX", _both32(DIR_MODE if record.is_dir else FILE_MODE) + _both32(links) + _both32(0) * 2)
        nm = b"".join(_entry(b"NM", bytes((1 if i + 250 < len(raw) else 0,)) + raw[i:i + 250])
                      for raw in (name.encode(),) for i in range(0, len(raw), 250)) if name else b""
        flags = 0x01 | (0x08 if nm else 0)  # RRIP 1.09 "RR": which entries follow (PX, NM)
        entries = _entry(b"RR", bytes((flags,))) + px + nm
        head = _entry(b"SP", b"\xbe\xef\0") if root_dot else b""
        tail = _entry(b"ER", bytes((len(_RR_ID), len(_RR_DESCRIPTION), len(_RR_SOURCE), 1)) + _RR_ID
                      + _RR_DESCRIPTION + _RR_SOURCE) if root_dot else b""
        record.system_use = head + entries + tail
        if record.length() > 255 or root_dot:  # the rest goes to a continuation area, behind a CE entry
            record.system_use = head + _entry(b"CE", bytes(24))  # filled in once its place is known
            record.continuation = entries + tail

    # --- sectors ---------------------------------------------------------------------------------

    def image(self) -> bytes:
        table_size = {tree: len(self._path_table(tree, little=True)) for tree in self._trees()}  # before places
        table_sectors = {tree: _sectors(size) for tree, size in table_size.items()}
        next_sector = 16 + (2 if self.joliet else 1) + 1
        tables: dict[tuple[str, bool], int] = {}
        for tree in self._trees():
            for little in (True, False):
                tables[tree, little] = next_sector
                next_sector += table_sectors[tree]
        for tree in self._trees():
            for d in self.dirs:
                size = _directory_size(self.trees[tree][id(d)])
                self.location[tree, id(d)], self.size[tree, id(d)] = next_sector, size
                next_sector += size // SECTOR
        sector, offset = -1, SECTOR  # continuation areas, packed, none across a sector's end
        for d in self.dirs:
            for record in self.trees["iso"][id(d)]:
                if record.continuation:
                    if offset + len(record.continuation) > SECTOR:
                        sector, offset, next_sector = next_sector, 0, next_sector + 1
                    self.continuations.append((record, sector, offset))
                    offset += len(record.continuation)
        for d in self.dirs:
            for data in d.files.values():
                self.file_at[id(data)] = next_sector
                next_sector += _sectors(len(data))
        total = next_sector + PAD_SECTORS
        out = bytearray(total * SECTOR)
        for record, sector, at in self.continuations:  # CE: where, and how long
            record.system_use = record.system_use[:-24] + _both32(sector) + _both32(at) + _both32(
                len(record.continuation))
            out[sector * SECTOR + at:sector * SECTOR + at + len(record.continuation)] = record.continuation
        descriptors = [self._descriptor("iso", 1, total, table_size["iso"], tables["iso", True], tables["iso", False])]
        if self.joliet:
            descriptors.append(self._descriptor("joliet", 2, total, table_size["joliet"], tables["joliet", True],
                                                tables["joliet", False]))
        descriptors.append(b"\xffCD001\x01".ljust(SECTOR, b"\0"))
        for n, descriptor in enumerate(descriptors):
            out[(16 + n) * SECTOR:(17 + n) * SECTOR] = descriptor
        for tree in self._trees():
            for little in (True, False):
                table = self._path_table(tree, little=little)
                out[tables[tree, little] * SECTOR:tables[tree, little] * SECTOR + len(table)] = table
            for d in self.dirs:
                extent = self._directory(tree, d)
                out[self.location[tree, id(d)] * SECTOR:self.location[tree, id(d)] * SECTOR + len(extent)] = extent
        for d in self.dirs:
            for data in d.files.values():
                at = self.file_at[id(data)] * SECTOR
                out[at:at + len(data)] = data
        return bytes(out)

    def _trees(self) -> tuple[str, ...]:
        return ("iso", "joliet") if self.joliet else ("iso",)

    def _directory(self, tree: str, d: _Dir) -> bytes:
        out = bytearray()
        for record in self.trees[tree][id(d)]:
            raw = self._record(tree, record)
            if len(out) % SECTOR + len(raw) > SECTOR:  # no record across a sector's end
                out += bytes(SECTOR - len(out) % SECTOR)
            out += raw
        return bytes(out)

    def _record(self, tree: str, record: _Record) -> bytes:
        if record.target is not None:
            where, size = self.location[tree, id(record.target)], self.size[tree, id(record.target)]
        else:
            assert record.data is not None
            where, size = self.file_at[id(record.data)], len(record.data)
        body = (bytes((0,)) + _both32(where) + _both32(size) + _date7(self.now)
                + bytes((0x02 if record.is_dir else 0, 0, 0)) + _both16(1) + bytes((len(record.identifier),))
                + record.identifier + (b"\0" if len(record.identifier) % 2 == 0 else b"") + record.system_use)
        raw = bytes((len(body) + 1 + (len(body) + 1) % 2,)) + body
        return raw.ljust(raw[0], b"\0")

    def _path_table(self, tree: str, *, little: bool) -> bytes:
        order: Literal["little", "big"] = "little" if little else "big"
        out = bytearray()
        for d in self.dirs:
            if d.parent is None:
                identifier = b"\0"
            elif tree == "iso":
                identifier = self.iso_names[id(d.parent)][d.name]
            else:
                identifier = _ucs2(d.name)
            location = self.location.get((tree, id(d)), 0)
            out += (bytes((len(identifier), 0)) + location.to_bytes(4, order)
                    + (d.parent or d).number.to_bytes(2, order) + identifier + b"\0" * (len(identifier) % 2))
        return bytes(out)

    def _descriptor(self, tree: str, kind: int, total: int, table_size: int, l_table: int, m_table: int) -> bytes:
        joliet = tree == "joliet"

        def text(value: str, size: int) -> bytes:
            return (_ucs2(value) + b"\0 " * size)[:size] if joliet else value.encode().ljust(size, b" ")[:size]

        root = self._record(tree, _Record(b"\0", True, self.dirs[0]))
        stamp = time.strftime("%Y%m%d%H%M%S", self.now).encode() + b"00\0"
        out = (bytes((kind,)) + b"CD001\x01\0" + text("LINUX", 32) + text(self.label, 32) + bytes(8)
               + _both32(total) + (b"%/E".ljust(32, b"\0") if joliet else bytes(32)) + _both16(1) + _both16(1)
               + _both16(SECTOR) + _both32(table_size) + l_table.to_bytes(4, "little") + bytes(4)
               + m_table.to_bytes(4, "big") + bytes(4) + root + text("", 128) * 4 + text("", 37) * 3
               + stamp + stamp + b"0" * 16 + b"\0" + stamp + b"\x01\0")
        return out.ljust(SECTOR, b"\0")


def _iso_names(d: _Dir) -> dict[str, bytes]:
    """Level-2 file identifiers for the names in `d`, unique in it (directories: no "." or ";1")."""
    taken: set[bytes] = set()
    out: dict[str, bytes] = {}
    for name, is_dir in [(n, True) for n in sorted(d.dirs)] + [(n, False) for n in sorted(d.files)]:
        stem, _, ext = name.upper().rpartition(".") if not is_dir and "." in name else (name.upper(), "", "")
        stem, ext = _d_chars(stem) or "_", _d_chars(ext)[:8]
        base = stem[:ISO_MAX_NAME - (len(ext) + 1 if not is_dir else -1)]
        for n in range(len(taken) + 1):
            suffix = f"_{n}" if n else ""
            candidate = base[:len(base) - len(suffix)] + suffix if suffix else base
            identifier = (candidate if is_dir else f"{candidate}.{ext};1").encode()
            if identifier not in taken:
                break
        taken.add(identifier)
        out[name] = identifier
    return out


def _d_chars(text: str) -> str:
    return "".join(c if c in _D_CHARS else "_" for c in text)


def _entry(signature: bytes, body: bytes) -> bytes:
    """A SUSP entry: signature, length, version 1, body."""
    return signature + bytes((4 + len(body), 1)) + body


def _directory_size(records: list[_Record]) -> int:
    used = 0
    for record in records:
        n = record.length()
        if used % SECTOR + n > SECTOR:
            used += SECTOR - used % SECTOR
        used += n
    return _sectors(used) * SECTOR


def _sectors(size: int) -> int:
    return max(1, -(-size // SECTOR))


def _ucs2(text: str) -> bytes:
    return text.encode("utf-16-be")


def _both16(value: int) -> bytes:
    return value.to_bytes(2, "little") + value.to_bytes(2, "big")


def _both32(value: int) -> bytes:
    return value.to_bytes(4, "little") + value.to_bytes(4, "big")


def _date7(t: time.struct_time) -> bytes:
    return bytes((t.tm_year - 1900, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, 0))
