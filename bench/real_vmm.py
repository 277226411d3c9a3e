#!/usr/bin/env python3
"""ch-launcher on the real cloud-hypervisor (../shared/vmm or CH_BINARY) with the tiny guest of
tests/guest/ as its firmware, all measured in one run:

- Sync -> Running event through ch-launcher (translate, prepare the disks and ISOs, vm.create,
  vm.boot, the Domain event to virt-handler's stand-in), the launcher's VMM already up and
  virt-handler's first call (CmdInfo.Info) made, as they are before virt-handler's first Sync;
- the baseline: the bare REST `vm.create` + `vm.boot` of the same VmConfig (the one the launcher
  made, read back from `vm.info`) over the same API socket, after `vm.delete`, with a raw
  HTTP/1.1 request per call; and the ratio of the two, per round and at the median; for the test
  VMI (containerDisk, emptyDisk, cloud-init) and for the same with its containerDisk only (what
  the difference costs: making the empty disk image and the cloud-init ISO);
- the launcher's RSS and PSS after a Sync with the real VMM and its guest running beside it (the
  VMM's own figures printed too, excluded from the launcher's).

    python bench/real_vmm.py [--rounds N]

Timings depend on the machine's load; the figures are for comparison within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.footprint import rollup  # noqa: E402
from tests import real_vmm  # noqa: E402
from tests.framework import CmdClient, LauncherLayout, LauncherProcess, NotifyRecorder, container_disk_images  # noqa: E402
from tests.functional.harness import make_vmi  # noqa: E402
from tests.functional.pod_probes import api  # noqa: E402
from tests.guest.build import guest_payload  # noqa: E402


class Round:
    """One launcher on the real VMM with the virt-handler stand-in, in a short temporary root."""

    def __init__(self, binary: str, *, minimal: bool = False) -> None:
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="kcr", dir="/tmp"))
        self.layout = LauncherLayout(self.root).create()
        self.vmi = make_vmi()
        if minimal:  # the containerDisk only: no emptyDisk image, no cloud-init ISO to make
            self.vmi["spec"]["domain"]["devices"]["disks"] = self.vmi["spec"]["domain"]["devices"]["disks"][:1]
            self.vmi["spec"]["volumes"] = self.vmi["spec"]["volumes"][:1]
        shutil.copyfile(guest_payload(), self.layout.firmware_dir / "hypervisor-fw")
        container_disk_images(self.vmi, self.layout, size=1 << 20)
        self.recorder = NotifyRecorder(self.layout.notify_socket)
        meta = self.vmi["metadata"]
        self.launcher = LauncherProcess(self.layout, name=meta["name"], namespace=meta["namespace"],
                                        uid=meta["uid"], ch_binary=binary)
        self.api = str(self.layout.private_dir / "ch" / "api.sock")
        self.client: CmdClient | None = None

    async def start(self) -> None:
        await self.recorder.start()
        self.launcher.start()
        await self.launcher.wait_ready(15.0)
        self.client = CmdClient(self.layout.cmd_socket)
        await self.client.info()  # virt-handler's first call (then it injects the notify pipe)
        deadline = time.monotonic() + 15
        while True:  # the launcher starts its VMM in the background: wait until it answers
            try:
                if api(self.api, "GET", "vmm.ping")[0] == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the launcher's VMM did not answer within 15 s:\n{self.launcher.log_text()}")
            await asyncio.sleep(0.01)

    async def sync_to_running(self) -> float:
        assert self.client is not None
        started = time.monotonic()
        await self.client.sync(self.vmi)
        event = await self.recorder.wait_for_status("Running", timeout=60)
        return event.at - started

    def bare_create_and_boot(self) -> float:
        """The launcher's VmConfig again, by hand: vm.delete, then timed vm.create + vm.boot."""
        status, info = api(self.api, "GET", "vm.info")
        assert status == 200, info
        config = info["config"]
        status, answer = api(self.api, "PUT", "vm.delete")
        assert status == 204, answer
        started = time.monotonic()
        for endpoint, body in (("vm.create", config), ("vm.boot", None)):
            status, answer = api(self.api, "PUT", endpoint, body)
            assert status == 204, f"{endpoint}: {status} {answer!r}"
        return time.monotonic() - started

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
        self.launcher.kill()
        await self.recorder.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def memory_parts_kib(pid: int) -> tuple[int, int, int]:
    """RSS, PSS and anonymous memory of `pid` in KiB (/proc/<pid>/smaps_rollup)."""
    values = rollup(pid)
    return values["Rss"], values["Pss"], values["Anonymous"]


async def measure(binary: str, rounds: int, *, minimal: bool) -> tuple[list[float], list[float], tuple | None]:
    launcher_times, bare_times, memory = [], [], None
    for n in range(rounds):
        run = Round(binary, minimal=minimal)
        try:
            await run.start()
            launcher_times.append(await run.sync_to_running())
            if n == rounds - 1:  # memory beside a real VMM and guest, once the VM runs
                await asyncio.sleep(1.0)  # let the Sync's transient allocations settle
                vmm = run.launcher.children()
                memory = (memory_parts_kib(run.launcher.launcher_pid), memory_parts_kib(vmm[0]) if vmm else None)
            bare_times.append(await asyncio.to_thread(run.bare_create_and_boot))
        finally:
            await run.close()
    return launcher_times, bare_times, memory


def report(what: str, launcher_times: list[float], bare_times: list[float]) -> None:
    ratios = [a / b for a, b in zip(launcher_times, bare_times, strict=True)]
    ms = ", ".join(f"{t * 1000:.0f}" for t in launcher_times)
    print(f"  {what}")
    print(f"    Sync -> Running event (ch-launcher)    p50 {statistics.median(launcher_times) * 1000:7.1f} ms   "
          f"max {max(launcher_times) * 1000:7.1f} ms   ({len(launcher_times)} fresh launchers: {ms})")
    ms = ", ".join(f"{t * 1000:.0f}" for t in bare_times)
    print(f"    bare vm.create + vm.boot, same config  p50 {statistics.median(bare_times) * 1000:7.1f} ms   "
          f"max {max(bare_times) * 1000:7.1f} ms   (same socket, same round: {ms})")
    print(f"    ratio launcher / bare                  p50 {statistics.median(ratios):6.2f}x   "
          f"min {min(ratios):5.2f}x   max {max(ratios):5.2f}x")


async def bench(rounds: int) -> None:
    reason = real_vmm.unavailable(tiny_guest=True)
    if reason:  # `make bench` runs every benchmark: say why this one cannot run here, and go on
        print(f"bench/real_vmm.py: not run: {reason}")
        return
    binary = real_vmm.binary()
    print(f"ch-launcher on the real cloud-hypervisor ({binary}, tiny guest; {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.2f})")
    launcher_times, bare_times, memory = await measure(binary, rounds, minimal=False)
    report("VMI of tests/functional/harness.py (containerDisk, emptyDisk, cloud-init NoCloud):",
           launcher_times, bare_times)
    launcher_times, bare_times, _ = await measure(binary, rounds, minimal=True)
    report("the same with its containerDisk only (no image or ISO to make):", launcher_times, bare_times)
    if memory is not None:
        (rss, pss, anon), vmm = memory
        print(f"  launcher memory, real VMM beside it    RSS {rss / 1024:6.1f} MiB   PSS {pss / 1024:6.1f} MiB   "
              f"anonymous {anon / 1024:5.1f} MiB (the VMM excluded)")
        if vmm is not None:
            print(f"  the VMM itself (tiny guest, 128 MiB)   RSS {vmm[0] / 1024:6.1f} MiB   "
                  f"PSS {vmm[1] / 1024:6.1f} MiB")
    print(f"  (load at the end {os.getloadavg()[0]:.2f})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="fresh launchers, each timed both ways")
    args = parser.parse_args()
    asyncio.run(bench(max(1, args.rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
