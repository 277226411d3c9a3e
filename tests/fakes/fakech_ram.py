"""The simulated VMM's guest RAM: mapped as Cloud Hypervisor maps it, so the launcher finds it.

Cloud Hypervisor maps each VM's RAM when the VM is created at boot (`vmm/src/memory_manager.rs@v53.0`
`create_ram_region_raw`: anonymous private `MAP_NORESERVE`, or a `memfd` named `ch_ram` mapped
shared when `memory.shared` or hugepages are set) and marks it `MADV_DONTDUMP`
(`create_userspace_mapping`). With the `VirtioMem` hotplug method the hot-pluggable part lies right
after the boot RAM. The launcher's dirty-rate measurement (`ch_launcher.dirtyrate`) finds the RAM
by those marks in `/proc/<pid>/smaps` and samples it through `/proc/<pid>/mem`; this module gives
the simulated VMM the same mapping. Nothing touches it unless `FAKE_CH_DIRTY_PAGES` asks the
simulated guest to write pages (within its first 64 MiB), so it costs no memory.

Stdlib only.
"""

from __future__ import annotations

import mmap
import os
import random
from typing import Any

WORKING_SET = 64 << 20  # where the simulated guest writes (FAKE_CH_DIRTY_PAGES)
# Python < 3.13 does not name it; the value is Linux's (asm-generic/mman.h on x86 and arm64).
MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)


class GuestRam:
    """One VM's RAM mapping. `dirty(n)` writes `n` random pages (the simulated guest at work)."""

    def __init__(self, size: int, shared: bool) -> None:
        self.size = size
        self._fd = -1
        if shared:
            self._fd = os.memfd_create("ch_ram", os.MFD_CLOEXEC)
            os.ftruncate(self._fd, size)
            self.map = mmap.mmap(self._fd, size, flags=mmap.MAP_SHARED | MAP_NORESERVE)
        else:
            self.map = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | MAP_NORESERVE)
        self.map.madvise(mmap.MADV_DONTDUMP)
        self._rng = random.Random()
        self._stamp = 0

    @classmethod
    def for_config(cls, config: dict[str, Any]) -> GuestRam | None:
        """The RAM of a VM with this stored config; None when the size is unusable."""
        memory = config.get("memory") or {}
        size = int(memory.get("size") or 0)
        if memory.get("hotplug_method") == "VirtioMem":
            size += int(memory.get("hotplug_size") or 0)
        if size <= 0:
            return None
        try:
            return cls(size, bool(memory.get("shared")) or bool(memory.get("hugepages")))
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
