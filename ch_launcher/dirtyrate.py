"""GetDomainDirtyRateStats: the guest's dirty-page rate, measured by page sampling as QEMU does.

virt-handler's `DomainDirtyRateStatsCollector` asks every Running VMI's launcher for its dirty
rate on each /metrics scrape and logs `failed to scrape metrics` at error level when the call
fails (kubevirt `pkg/monitoring/metrics/virt-handler/domainstats/dirty_rate_scrapper.go`
@d923fdb815cd); virt-launcher answers with libvirt's `page-sampling` measurement over one second,
cached for three (`virtwrap/manager.go` `GetDomainDirtyRateStats`, `cli/libvirt.go`
`GetDomainDirtyRate`). Cloud Hypervisor has no such call, but the guest's RAM is ordinary memory
of the VMM process, so the launcher measures it the way QEMU does (qemu `migration/dirtyrate.c`,
page-sampling mode):

- the guest RAM regions are the VMM's read-write anonymous (or `/memfd:ch_ram`) mappings that
  carry `dd` in `/proc/<pid>/smaps` `VmFlags`: Cloud Hypervisor marks every guest RAM mapping
  `MADV_DONTDUMP` (`vmm/src/memory_manager.rs@v53.0` `create_userspace_mapping`);
- 512 random 4 KiB pages per GiB of each region (QEMU's `DIRTYRATE_DEFAULT_SAMPLE_PAGES`) are
  hashed, read through `/proc/<pid>/mem`, and hashed again after the period;
- the rate, in MiB/s as libvirt reports `dirtyrate.megabytes_per_second`, is
  `changed / sampled x RAM MiB / seconds` (QEMU's `update_dirtyrate`).

Reading `/proc/<pid>/mem` and `/proc/<pid>/pagemap` needs the ptrace access a process has over
its own child of the same uid (the compute container's model: launcher and VMM both uid 107, the
launcher the VMM's parent). A page of private anonymous RAM that `pagemap` shows neither present
nor swapped is one the guest never touched: it reads as zeros and is hashed as such without
being read, because reading it would make the kernel map the zero page into the VMM and give it
the page table to hold it, 4 KiB per 2 MiB sampled, charged to the pod's memory (8 MiB on a VM
of 1 GiB with `maxGuest: 4Gi`, whose hot-pluggable 3 GiB the guest never touches; measured on a
real node). A shared `memfd` guest is read as it stands (another process, such as a vhost-user
backend, may have written a page the VMM has not mapped): there the sampled holes are allocated,
2 MiB per GiB at most, as QEMU's own sampling does.

Failure behaviour: every problem raises `DirtyRateError` with a message saying what could not be
read (no RAM mapping, the VMM gone, access refused); nothing is invented. A paused guest dirties
nothing, so it measures 0, as under libvirt.
"""

from __future__ import annotations

import os
import random
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

PAGE_SIZE = 4096
SAMPLE_PAGES_PER_GIB = 512  # qemu migration/dirtyrate.h DIRTYRATE_DEFAULT_SAMPLE_PAGES
PERIOD_SECONDS = 1.0        # virt-launcher's dirtyRateCalculationTime (cmd-server/server.go)
CACHE_SECONDS = 3.0         # virt-launcher's domainDirtyRateStatsCache (virtwrap/manager.go)
_RAM_NAMES = ("", "/memfd:ch_ram", "/memfd:ch_ram (deleted)")
_PAGEMAP_PRESENT = 1 << 63  # Documentation/admin-guide/mm/pagemap.rst
_PAGEMAP_SWAPPED = 1 << 62
_UNTOUCHED_HASH = zlib.crc32(bytes(PAGE_SIZE))


class DirtyRateError(Exception):
    """The dirty rate could not be measured; `str(self)` says why."""


@dataclass(frozen=True)
class RamRegion:
    """One guest RAM mapping in the VMM's address space: `[start, start + length)`; `shared`:
    a `memfd` mapped shared (else private anonymous memory)."""

    start: int
    length: int
    shared: bool = False


def parse_smaps(text: str) -> list[RamRegion]:
    """The guest RAM regions of a `/proc/<pid>/smaps` text (see the module doc), in address order."""
    regions: list[RamRegion] = []
    head: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("VmFlags:"):
            flags = line.split()[1:]
            if head is not None and "dd" in flags:
                span, perms, name = head[0], head[1], " ".join(head[5:])
                lo, _, hi = span.partition("-")
                if perms.startswith("rw") and name in _RAM_NAMES:
                    start, end = int(lo, 16), int(hi, 16)
                    if end > start:
                        regions.append(RamRegion(start, end - start, shared=name != ""))
            head = None
        elif line[:1] in "0123456789abcdef" and "-" in line.split(" ", 1)[0]:
            fields = line.split()
            head = fields if len(fields) >= 5 else None
    return regions


def guest_ram(pid: int, proc_root: str = "/proc") -> list[RamRegion]:
    """The guest RAM regions of VMM `pid`. Raises DirtyRateError when smaps cannot be read or
    shows no guest RAM."""
    try:
        with open(f"{proc_root}/{pid}/smaps", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError as e:
        raise DirtyRateError(f"cannot read the memory map of cloud-hypervisor (pid {pid}): "
                             f"{e.strerror or e}") from None
    regions = parse_smaps(text)
    if not regions:
        raise DirtyRateError(f"cloud-hypervisor (pid {pid}) maps no guest RAM (no VM is running)")
    return regions


class Sample:
    """Hashes of randomly chosen pages of the guest RAM, taken once at creation.

    `changed()` re-reads the same pages and counts those whose content differs. Both raise
    DirtyRateError when the VMM's memory cannot be read (the VMM exited, access refused, a
    region unmapped in between).
    """

    def __init__(self, pid: int, regions: Sequence[RamRegion], *, pages_per_gib: int = SAMPLE_PAGES_PER_GIB,
                 rng: random.Random | None = None, proc_root: str = "/proc") -> None:
        self.pid = pid
        self.ram_bytes = sum(r.length for r in regions)
        rng = rng or random.Random()
        self.addresses: list[int] = []
        self._private: list[bool] = []  # per address: in private anonymous RAM (see the module doc)
        for region in regions:
            pages = region.length // PAGE_SIZE
            count = min((region.length * pages_per_gib) >> 30, pages)
            self.addresses += [region.start + rng.randrange(pages) * PAGE_SIZE for _ in range(count)]
            self._private += [not region.shared] * count
        if not self.addresses:
            raise DirtyRateError(f"the guest RAM of cloud-hypervisor (pid {pid}) is too small to sample "
                                 f"({self.ram_bytes} bytes)")
        self._proc = f"{proc_root}/{pid}"
        self.hashes = self._hash_all()

    def _hash_all(self) -> list[int]:
        mem = self._open("mem")
        try:
            pagemap = self._open("pagemap")
        except DirtyRateError:
            os.close(mem)
            raise
        try:
            hashes = []
            for address, private in zip(self.addresses, self._private, strict=True):
                if private:
                    entry = os.pread(pagemap, 8, address // PAGE_SIZE * 8)
                    if len(entry) != 8:
                        raise OSError(0, "short read of the page map")
                    if not int.from_bytes(entry, "little") & (_PAGEMAP_PRESENT | _PAGEMAP_SWAPPED):
                        hashes.append(_UNTOUCHED_HASH)
                        continue
                page = os.pread(mem, PAGE_SIZE, address)
                if len(page) != PAGE_SIZE:
                    raise OSError(0, "short read")
                hashes.append(zlib.crc32(page))
            return hashes
        except OSError as e:
            raise DirtyRateError(f"reading the guest memory of cloud-hypervisor (pid {self.pid}) failed: "
                                 f"{e.strerror or e}") from None
        finally:
            os.close(mem)
            os.close(pagemap)

    def _open(self, name: str) -> int:
        try:
            return os.open(f"{self._proc}/{name}", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise DirtyRateError(f"cannot read the guest memory of cloud-hypervisor (pid {self.pid}): "
                                 f"{e.strerror or e}") from None

    def changed(self) -> int:
        """How many sampled pages differ from their first reading."""
        return sum(1 for before, after in zip(self.hashes, self._hash_all(), strict=True) if before != after)


def megabytes_per_second(changed: int, sampled: int, ram_bytes: int, seconds: float) -> int:
    """QEMU's `update_dirtyrate`: dirty samples x RAM MiB x 1000 / (samples x ms), an integer."""
    if sampled <= 0 or seconds <= 0:
        raise ValueError("a dirty rate needs samples and a positive period")
    msec = max(int(seconds * 1000), 1)
    return changed * (ram_bytes >> 20) * 1000 // (sampled * msec)
