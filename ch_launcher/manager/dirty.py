"""The dirty-rate measurement as virt-launcher serves it: one second of page sampling, the result
kept for three seconds, concurrent callers sharing one measurement (kubevirt
`pkg/virt-launcher/virtwrap/manager.go` `GetDomainDirtyRateStats`@d923fdb815cd: a
`TimeDefinedCache` of 3 s over a 1 s calculation)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from ch_launcher.dirtyrate import CACHE_SECONDS, PERIOD_SECONDS, DirtyRateError, Sample, guest_ram, megabytes_per_second
from ch_launcher.manager.settings import CommandFailed


class DirtyRateMeter:
    """`await measure()` -> MiB/s of the VM that `vmm_pid()` names (None: no running VM).

    Raises CommandFailed with the reason when there is no running VM or its memory cannot be
    read; a failure is not cached, so the next scrape tries again. `sleep` waits out the period
    (tests pass one that acts during it)."""

    def __init__(self, vmm_pid: Callable[[], int | None], *, period: float = PERIOD_SECONDS,
                 keep: float = CACHE_SECONDS, proc_root: str = "/proc",
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._vmm_pid = vmm_pid
        self._sleep = sleep
        self._period = period
        self._keep = keep
        self._proc_root = proc_root
        self._last: tuple[float, int, int] | None = None  # (monotonic time, pid, MiB/s)
        self._running: asyncio.Task[int] | None = None

    async def measure(self) -> int:
        pid = self._vmm_pid()
        if pid is None:
            raise CommandFailed("the dirty rate cannot be measured: the VM is not running")
        last = self._last
        if last is not None and last[1] == pid and time.monotonic() - last[0] < self._keep:
            return last[2]
        if self._running is None or self._running.done():
            self._running = asyncio.ensure_future(self._measure(pid))
        try:
            return await asyncio.shield(self._running)
        except DirtyRateError as e:
            raise CommandFailed(f"the dirty rate cannot be measured: {e}") from None

    async def _measure(self, pid: int) -> int:
        loop = asyncio.get_running_loop()

        def first() -> Sample:
            return Sample(pid, guest_ram(pid, self._proc_root), proc_root=self._proc_root)

        sample = await asyncio.to_thread(first)
        started = loop.time()
        await self._sleep(self._period)
        changed = await asyncio.to_thread(sample.changed)
        rate = megabytes_per_second(changed, len(sample.addresses), sample.ram_bytes, loop.time() - started)
        self._last = (time.monotonic(), pid, rate)
        return rate
