"""What one dirty-rate reading costs the launcher: hashing the sampled pages of a VMM's guest RAM
through /proc/<pid>/mem (ch_launcher.dirtyrate.Sample), against hashing the same number of pages
in the launcher's own memory (the CRC alone) in the same run.

A child process maps guest RAM as cloud-hypervisor does (tests/fakes/fakech_ram.py) and writes
every page once (a guest that has touched all its memory; untouched pages read as the zero page).
GetDomainDirtyRateStats reads the sample twice per measurement, one second apart, at most every
three seconds (the cache), so the figure per reading is what a scrape costs, twice.

Prints: RAM size, pages sampled, p50/max ms per reading via /proc, p50 ms of the in-process CRC
baseline, and the ratio.
"""

from __future__ import annotations

import pathlib
import statistics
import subprocess
import sys
import time
import zlib

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ch_launcher.dirtyrate import PAGE_SIZE, Sample, guest_ram  # noqa: E402

CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from fakech_ram import GuestRam
ram = GuestRam(int(sys.argv[2]), False)
for offset in range(0, ram.size, 4096):
    ram.map[offset] = 1
print("ready", flush=True)
sys.stdin.read()
"""
ROUNDS = 50


def main() -> int:
    for size in (1 << 30,):  # a guest that touched all of 1 GiB: 1 GiB of this machine, briefly
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(REPO / "tests" / "fakes"), str(size)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == "ready"
            regions = guest_ram(child.pid)
            sample = Sample(child.pid, regions)
            timings = []
            for _ in range(ROUNDS):
                started = time.perf_counter()
                sample.changed()
                timings.append((time.perf_counter() - started) * 1000)
            pages = [bytes([n % 251]) * PAGE_SIZE for n in range(len(sample.addresses))]
            baseline = []
            for _ in range(ROUNDS):
                started = time.perf_counter()
                for page in pages:
                    zlib.crc32(page)
                baseline.append((time.perf_counter() - started) * 1000)
        finally:
            child.kill()
            child.wait()
        p50, base = statistics.median(timings), statistics.median(baseline)
        print(f"guest RAM {size >> 30} GiB: {len(sample.addresses)} pages sampled; one reading via /proc/<pid>/mem "
              f"p50 {p50:.2f} ms, max {max(timings):.2f} ms; in-process CRC of as many pages p50 {base:.2f} ms "
              f"(ratio {p50 / base:.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
