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

Reading `/proc/<pid>/mem` needs the ptrace access a process has over its own child of the same
uid (the compute container's model: launcher and VMM both uid 107, the launcher the VMM's
parent). Reading a page the guest never touched maps the kernel's zero page, so sampling does
not grow the VMM's memory (a shared `memfd` guest allocates the sampled holes, 2 MiB per GiB at
most, as QEMU's own sampling does).

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


class DirtyRateError(Exception):
    """The dirty rate could not be measured; `str(self)` says why."""


@dataclass(frozen=True)
class RamRegion:
    """One guest RAM mapping in the VMM's address space: `[start, start + length)`."""

    start: int
    length: int


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
                        regions.append(RamRegion(start, end - start))
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
        for region in regions:
            pages = region.length // PAGE_SIZE
            count = min((region.length * pages_per_gib) >> 30, pages)
            self.addresses += [region.start + rng.randrange(pages) * PAGE_SIZE for _ in range(count)]
        if not self.addresses:
            raise DirtyRateError(f"the guest RAM of cloud-hypervisor (pid {pid}) is too small to sample "
                                 f"({self.ram_bytes} bytes)")
        self._path = f"{proc_root}/{pid}/mem"
        self.hashes = self._hash_all()

    def _hash_all(self) -> list[int]:
        try:
            fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise DirtyRateError(f"cannot read the guest memory of cloud-hypervisor (pid {self.pid}): "
                                 f"{e.strerror or e}") from None
        try:
            hashes = []
            for address in self.addresses:
                page = os.pread(fd, PAGE_SIZE, address)
                if len(page) != PAGE_SIZE:
                    raise OSError(0, "short read")
                hashes.append(zlib.crc32(page))
            return hashes
        except OSError as e:
            raise DirtyRateError(f"reading the guest memory of cloud-hypervisor (pid {self.pid}) failed: "
                                 f"{e.strerror or e}") from None
        finally:
            os.close(fd)

    def changed(self) -> int:
        """How many sampled pages differ from their first reading."""
        return sum(1 for before, after in zip(self.hashes, self._hash_all(), strict=True) if before != after)


def megabytes_per_second(changed: int, sampled: int, ram_bytes: int, seconds: float) -> int:
    """QEMU's `update_dirtyrate`: dirty samples x RAM MiB x 1000 / (samples x ms), an integer."""
    if sampled <= 0 or seconds <= 0:
        raise ValueError("a dirty rate needs samples and a positive period")
    msec = max(int(seconds * 1000), 1)
    return changed * (ram_bytes >> 20) * 1000 // (sampled * msec)
