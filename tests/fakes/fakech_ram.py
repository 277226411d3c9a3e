"""The simulated VMM's guest RAM: mapped as Cloud Hypervisor maps it, so the launcher finds it.

Cloud Hypervisor maps each VM's RAM when the VM is created at boot (`vmm/src/memory_manager.rs@v53.0`
`create_ram_region_raw`: anonymous private `MAP_NORESERVE`, or a `memfd` named `ch_ram` mapped
shared when `memory.shared` or hugepages are set, `MFD_HUGETLB` of the page size for hugepages,
`MAP_NORESERVE` unless `memory.reserve`) and marks it `MADV_DONTDUMP` (`create_userspace_mapping`).
With `memory.prefault` it populates the whole mapping at once (`MADV_POPULATE_WRITE`): hugepages
then come out of the machine's pool at boot, and a pool short of them fails the boot
(`RamFailed`: "Failed to prefault memory: Bad address (os error 14)"), where without
prefault the VMM would be killed by SIGBUS when the guest first touches a page the pool lacks.
With the `VirtioMem` hotplug method the hot-pluggable part lies right after the boot RAM. The
launcher's dirty-rate measurement (`ch_launcher.dirtyrate`) finds the RAM
by those marks in `/proc/<pid>/smaps` and samples it through `/proc/<pid>/mem`; this module gives
the simulated VMM the same mapping. Nothing touches it unless `FAKE_CH_DIRTY_PAGES` asks the
simulated guest to write pages (within its first 64 MiB) or `prefault` populates it, so it costs
no memory otherwise.

Stdlib only.
"""

from __future__ import annotations

import mmap
import os
import random
from typing import Any

WORKING_SET = 64 << 20  # where the simulated guest writes (FAKE_CH_DIRTY_PAGES)
# Python < 3.13 does not name them; the values are Linux's (asm-generic/mman.h on x86 and arm64).
MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)
MFD_HUGE_SHIFT = 26  # memfd_create's page size: log2(size) << MFD_HUGE_SHIFT (linux/memfd.h)
HUGETLBFS = "/dev/hugepages"  # where CH reads the default hugepage size without hugepage_size


class RamFailed(Exception):
    """The MemoryManager could not make the RAM, as CH fails `Vm::new`: `what` is its error's
    Display ("Failed to prefault memory": the hugepage pool is short; "Failed to stat filesystem":
    hugepages without `hugepage_size` and no HUGETLBFS), `error` the io error under it."""

    def __init__(self, what: str, error: OSError) -> None:
        super().__init__(what)
        self.what, self.error = what, error


class GuestRam:
    """One VM's RAM mapping. `dirty(n)` writes `n` random pages (the simulated guest at work)."""

    def __init__(self, size: int, shared: bool, *, hugepages: bool = False, hugepage_size: int = 0,
                 reserve: bool = False, prefault: bool = False) -> None:
        """`hugepage_size` 0 with `hugepages`: the machine's default size. Raises RamFailed,
        OSError (the memfd or the mapping), ValueError."""
        self.size = size
        self._fd = -1
        flags = 0 if reserve else MAP_NORESERVE
        if shared or hugepages:
            huge = 0
            if hugepages:
                huge = os.MFD_HUGETLB | ((hugepage_size.bit_length() - 1) << MFD_HUGE_SHIFT if hugepage_size else 0)
            self._fd = os.memfd_create("ch_ram", os.MFD_CLOEXEC | huge)
            os.ftruncate(self._fd, size)
            self.map = mmap.mmap(self._fd, size, flags=mmap.MAP_SHARED | flags)
        else:
            self.map = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | flags)
        self.map.madvise(mmap.MADV_DONTDUMP)
        if prefault:
            try:
                self.map.madvise(MADV_POPULATE_WRITE)
            except OSError as exc:
                self.close()
                raise RamFailed("Failed to prefault memory", exc) from None
        self._rng = random.Random()
        self._stamp = 0

    @classmethod
    def for_config(cls, config: dict[str, Any]) -> GuestRam | None:
        """The RAM of a VM with this stored config; None when the size is unusable. Raises
        RamFailed as CH fails the boot."""
        memory = config.get("memory") or {}
        size = int(memory.get("size") or 0)
        if memory.get("hotplug_method") == "VirtioMem":
            size += int(memory.get("hotplug_size") or 0)
        if size <= 0:
            return None
        hugepages, hugepage_size = bool(memory.get("hugepages")), int(memory.get("hugepage_size") or 0)
        if hugepages and not hugepage_size:  # memory_zone_get_align_size: the default size, from statfs
            try:
                os.statvfs(HUGETLBFS)
            except OSError as exc:
                raise RamFailed("Failed to stat filesystem", exc) from None
        try:
            return cls(size, bool(memory.get("shared")), hugepages=hugepages, hugepage_size=hugepage_size,
                       reserve=bool(memory.get("reserve")), prefault=bool(memory.get("prefault")))
        except (OSError, ValueError, OverflowError):
            return None

    def dirty(self, pages: int) -> None:
        """Write `pages` random pages of the working set: the first WORKING_SET bytes, as a guest
        keeps rewriting the memory it uses (so the VMM's RSS stays bounded)."""
        pagesize = mmap.PAGESIZE
        count = min(self.size, WORKING_SET) // pagesize
        for _ in range(pages):
            self._stamp += 1
            offset = self._rng.randrange(count) * pagesize
            self.map[offset:offset + 8] = self._stamp.to_bytes(8, "little")

    def close(self) -> None:
        self.map.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
