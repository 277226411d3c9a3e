#!/usr/bin/env python3
"""ch-launcher figures, all measured in one run on the simulated VMM:

- time from process start to `launcher-sock` (target < 0.5 s);
- Sync -> Running-event latency, p50/p99 over fresh launchers (the first Sync of each);
- GetDomain round trip, p50/p99 over 500 calls (target p99 < 2 ms);
- idle CPU of one launcher with a running VM over 30 s, beside the idle CPU of a bare grpc.aio
  server measured over the same 30 s (the baseline; target < 0.05 % of a core).

    python bench/launcher.py [--launchers N] [--idle-seconds S]

Timings depend on the machine's load; the figures are for comparison within one run. Memory,
and GetDomain under concurrent load, are bench/footprint.py's: it measures the launcher image's
own configuration on the real VMM (this benchmark runs the checkout's code in the development
virtualenv, which is not what a node runs).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.framework import (  # noqa: E402
    FAKE_CH,
    CmdClient,
    LauncherLayout,
    LauncherProcess,
    NotifyRecorder,
    container_disk_images,
    fake_firmware,
)
from tests.functional.harness import make_vmi  # noqa: E402

BARE_SERVER = textwrap.dedent("""
    import asyncio, sys
    import grpc
    async def main():
        server = grpc.aio.server()
        server.add_insecure_port("unix:" + sys.argv[1])
        await server.start()
        print("ready", flush=True)
        await server.wait_for_termination()
    asyncio.run(main())
""")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))]


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of `pid`, in seconds, from /proc/<pid>/task/*/schedstat (ns
    precision; /proc/<pid>/stat counts 10 ms ticks, too coarse for an idle process)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended meanwhile
    return total / 1e9


class Run:
    """One launcher with the virt-handler stand-in, in a short temporary root."""

    def __init__(self) -> None:
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="kcb", dir="/tmp"))
        self.layout = LauncherLayout(self.root).create()
        self.vmi = make_vmi()
        fake_firmware(self.layout)
        container_disk_images(self.vmi, self.layout, size=16 << 20)
        self.recorder = NotifyRecorder(self.layout.notify_socket)
        meta = self.vmi["metadata"]
        self.launcher = LauncherProcess(self.layout, name=meta["name"], namespace=meta["namespace"],
                                        uid=meta["uid"], ch_binary=str(FAKE_CH))
        self.client: CmdClient | None = None

    async def start(self) -> float:
        await self.recorder.start()
        self.launcher.start()
        ready = await self.launcher.wait_ready(15.0)
        self.client = CmdClient(self.layout.cmd_socket)
        return ready

    async def sync_to_running(self) -> float:
        assert self.client is not None
        started = time.monotonic()
        await self.client.sync(self.vmi)
        event = await self.recorder.wait_for_status("Running", timeout=30)
        return event.at - started

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
        self.launcher.kill()
        await self.recorder.stop()
        shutil.rmtree(self.root, ignore_errors=True)


async def bench(launchers: int, idle_seconds: float) -> None:
    print(f"ch-launcher benchmark (simulated VMM, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f})")
    ready: list[float] = []
    to_running: list[float] = []
    for _ in range(launchers):
        run = Run()
        try:
            ready.append(await run.start())
            await asyncio.sleep(0.5)  # let the VMM come up first, as it does long before virt-handler's Sync
            to_running.append(await run.sync_to_running())
        finally:
            await run.close()
    print(f"  start -> launcher-sock     p50 {statistics.median(ready) * 1000:7.1f} ms   "
          f"max {max(ready) * 1000:7.1f} ms   ({launchers} launchers; target < 500 ms)")
    print(f"  Sync -> Running event      p50 {percentile(to_running, 50) * 1000:7.1f} ms   "
          f"p99 {percentile(to_running, 99) * 1000:7.1f} ms   ({launchers} first Syncs)")

    run = Run()
    bare_dir = tempfile.mkdtemp(prefix="kcg", dir="/tmp")
    # Popen returns once the child is forked; the loop has nothing else to run yet
    bare = subprocess.Popen([sys.executable, "-c", BARE_SERVER, f"{bare_dir}/bare.sock"],  # noqa: ASYNC220
                            stdout=subprocess.PIPE)
    try:
        await run.start()
        await run.sync_to_running()
        assert run.client is not None
        samples = []
        for _ in range(50):  # warm-up
            await run.client.call("GetDomain")
        for _ in range(500):
            t = time.perf_counter()
            reply = await run.client.call("GetDomain")
            samples.append(time.perf_counter() - t)
            assert reply.domain
        print(f"  GetDomain round trip       p50 {percentile(samples, 50) * 1000:7.3f} ms   "
              f"p99 {percentile(samples, 99) * 1000:7.3f} ms   (500 calls; target p99 < 2 ms)")
        assert bare.stdout is not None and bare.stdout.readline().strip() == b"ready"
        await asyncio.sleep(2.0)  # settle after the GetDomain burst
        l0, b0 = cpu_seconds(run.launcher.launcher_pid), cpu_seconds(bare.pid)
        t0 = time.monotonic()
        await asyncio.sleep(idle_seconds)
        elapsed = time.monotonic() - t0
        l1, b1 = cpu_seconds(run.launcher.launcher_pid), cpu_seconds(bare.pid)
        launcher_pct = (l1 - l0) / elapsed * 100
        bare_pct = (b1 - b0) / elapsed * 100
        ratio = f"{launcher_pct / bare_pct:.2f}x the bare server" if bare_pct > 0 else \
            "the bare server used no measurable CPU"
        print(f"  idle CPU over {elapsed:.0f} s        launcher {launcher_pct:6.4f} %   "
              f"bare grpc.aio {bare_pct:6.4f} %   ({ratio}; % of one core; target < 0.05 %)")
    finally:
        bare.kill()
        bare.wait()
        shutil.rmtree(bare_dir, ignore_errors=True)
        await run.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launchers", type=int, default=10, help="fresh launchers for the start and Sync figures")
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    args = parser.parse_args()
    asyncio.run(bench(args.launchers, args.idle_seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
