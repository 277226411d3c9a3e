"""The dirty-rate measurement: it finds guest RAM as Cloud Hypervisor maps it, and counts what a
guest really writes (a child process mapping RAM like the VMM, writing pages on command)."""

from __future__ import annotations

import asyncio
import os
import pathlib
import random
import subprocess
import sys
import time

import pytest

from ch_launcher.dirtyrate import (
    PAGE_SIZE,
    DirtyRateError,
    RamRegion,
    Sample,
    guest_ram,
    megabytes_per_second,
    parse_smaps,
)
from ch_launcher.manager import CommandFailed
from ch_launcher.manager.dirty import DirtyRateMeter

FAKES = pathlib.Path(__file__).resolve().parents[1] / "fakes"

# Excerpts of a real cloud-hypervisor v53 smaps (a 64 MiB guest), trimmed to the lines read here.
SMAPS = """\
55d0c2a00000-55d0c2b00000 r-xp 00000000 08:01 1234                       /usr/bin/cloud-hypervisor
Size:               1024 kB
VmFlags: rd ex mr mw me
7fb21c000000-7fb220000000 rw-p 00000000 00:00 0 
Size:              65536 kB
Rss:                 132 kB
VmFlags: rd wr mr mw me nr dd hg
7fb220000000-7fb221000000 rw-p 00000000 00:00 0 
Size:              16384 kB
VmFlags: rd wr mr mw me ac
7fec78000000-7fec88000000 rw-s 00000000 00:01 1024                       /memfd:ch_ram (deleted)
Size:             262144 kB
VmFlags: rd wr sh mr mw me ms nr dd hg
7fed00000000-7fed00100000 rw-s 00000000 08:01 99                         /var/lib/pmem.img
Size:               1024 kB
VmFlags: rd wr sh mr mw me ms dd
7fb235ae0000-7fb235ae4000 r--p 00000000 00:00 0                          [vvar]
Size:                 16 kB
VmFlags: rd mr pf io de dd
"""  # noqa: W291 - the kernel ends an anonymous mapping's line with a space

# A process that maps guest RAM as the simulated VMM does (tests/fakes/fakech_ram.py) and, on each
# line read, writes to every page, every other page, or none, then answers "done".
CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from fakech_ram import GuestRam
ram = GuestRam(int(sys.argv[2]), sys.argv[3] == "shared")
print("ready", flush=True)
for n, line in enumerate(sys.stdin):
    step = {"all": 1, "half": 2}.get(line.strip())
    if step:
        for offset in range(0, ram.size, 4096 * step):
            ram.map[offset:offset + 8] = (n + 1).to_bytes(8, "little")
    print("done", flush=True)
"""


class Guest:
    def __init__(self, size: int, shared: bool = False) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, str(FAKES), str(size),
                                      "shared" if shared else "private"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"

    def write(self, what: str) -> None:
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "done"

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def guest():
    made: list[Guest] = []

    def new(size: int = 64 << 20, shared: bool = False) -> Guest:
        made.append(Guest(size, shared))
        return made[-1]

    yield new
    for g in made:
        g.close()


def test_the_guest_ram_is_the_writable_dontdump_anonymous_or_ch_ram_mappings():
    assert parse_smaps(SMAPS) == [RamRegion(0x7FB21C000000, 64 << 20),
                                  RamRegion(0x7FEC78000000, 256 << 20, shared=True)]


def test_guest_ram_is_found_in_a_process_that_maps_it_as_cloud_hypervisor_does(guest):
    private, shared = guest(64 << 20), guest(32 << 20, shared=True)
    assert [r.length for r in guest_ram(private.proc.pid)] == [64 << 20]
    assert [r.length for r in guest_ram(shared.proc.pid)] == [32 << 20]


def test_a_process_without_guest_ram_cannot_be_measured():
    with pytest.raises(DirtyRateError, match=rf"\(pid {os.getpid()}\) maps no guest RAM"):
        guest_ram(os.getpid())


def test_a_vmm_that_is_gone_cannot_be_measured(guest):
    g = guest()
    regions = guest_ram(g.proc.pid)
    sample = Sample(g.proc.pid, regions)
    g.close()
    with pytest.raises(DirtyRateError, match="cloud-hypervisor"):
        sample.changed()


def test_sampling_takes_512_pages_per_gib_of_each_region(guest):
    g = guest(64 << 20)
    sample = Sample(g.proc.pid, guest_ram(g.proc.pid))
    assert len(sample.addresses) == 32 and sample.ram_bytes == 64 << 20
    assert all(a % PAGE_SIZE == 0 for a in sample.addresses)


def test_a_region_too_small_for_one_sample_is_refused():
    with pytest.raises(DirtyRateError, match="too small to sample"):
        Sample(os.getpid(), [RamRegion(0x1000, 1 << 20)])


def test_an_idle_guest_dirties_nothing(guest):
    g = guest()
    sample = Sample(g.proc.pid, guest_ram(g.proc.pid), pages_per_gib=1 << 14)
    g.write("none")
    assert sample.changed() == 0


def test_the_pages_a_guest_writes_are_counted(guest):
    g = guest()
    regions = guest_ram(g.proc.pid)
    sample = Sample(g.proc.pid, regions, pages_per_gib=1 << 14, rng=random.Random(7))
    g.write("all")
    assert sample.changed() == len(sample.addresses) == 1024
    sample = Sample(g.proc.pid, regions, pages_per_gib=1 << 14, rng=random.Random(7))
    g.write("half")
    # every other page changed: the share of sampled pages that changed is about one half
    assert 0.4 < sample.changed() / len(sample.addresses) < 0.6


def page_tables(pid: int) -> int:
    """VmPTE of process `pid`, in bytes: the page tables the kernel holds for it."""
    status = pathlib.Path(f"/proc/{pid}/status").read_text()
    (line,) = [line for line in status.splitlines() if line.startswith("VmPTE:")]
    return int(line.split()[1]) << 10


def test_sampling_ram_the_guest_never_touched_gives_the_vmm_no_page_tables(guest):
    """Reading an untouched page would map the zero page and a page table for it into the VMM,
    4 KiB per 2 MiB sampled, charged to the pod's memory for as long as the VMM runs (on the real
    node, 8 MiB for the hot-pluggable RAM of a VM with maxGuest 4Gi): such pages are known from
    /proc/PID/pagemap and hashed as the zeros they read as."""
    g = guest(1 << 30)
    regions = guest_ram(g.proc.pid)
    before = page_tables(g.proc.pid)
    for _ in range(3):
        sample = Sample(g.proc.pid, regions)
        assert sample.changed() == 0
    assert page_tables(g.proc.pid) - before < 64 << 10, (before, page_tables(g.proc.pid))


def test_the_rate_is_qemus_sampled_share_of_the_ram_per_second():
    assert megabytes_per_second(16, 512, 1 << 30, 1.0) == 32  # 1/32 of 1024 MiB in a second
    assert megabytes_per_second(512, 512, 1 << 30, 2.0) == 512
    assert megabytes_per_second(0, 512, 4 << 30, 1.0) == 0
    with pytest.raises(ValueError):
        megabytes_per_second(1, 0, 1 << 30, 1.0)


def test_the_meter_measures_once_for_concurrent_callers_and_keeps_the_result(guest):
    g = guest()
    calls = []

    def pid():
        calls.append(1)
        return g.proc.pid

    meter = DirtyRateMeter(pid, period=0.05, keep=60.0)

    async def story():
        first = await asyncio.gather(meter.measure(), meter.measure(), meter.measure())
        g.write("all")  # kept for `keep` seconds: not seen by the next call
        again = await meter.measure()
        return first, again

    first, again = asyncio.run(story())
    assert first == [0, 0, 0] and again == 0


def test_the_meter_measures_again_once_the_result_is_old(guest):
    g = guest()
    busy = False

    async def period(seconds):
        await asyncio.sleep(seconds)
        if busy:  # the guest writes all its RAM within the measured second
            await asyncio.to_thread(g.write, "all")

    meter = DirtyRateMeter(lambda: g.proc.pid, period=0.2, keep=0.0, sleep=period)

    async def story():
        nonlocal busy
        idle = await meter.measure()
        busy = True
        started = time.monotonic()
        rate = await meter.measure()
        return idle, rate, time.monotonic() - started

    idle, rate, took = asyncio.run(story())
    assert idle == 0
    # all 64 MiB written within the measured period, which lasts at most as long as the call
    # (0.2 s and the write; longer on a busy machine)
    assert rate >= min(64, int(64 / took))


def test_the_meter_refuses_when_no_vm_runs_and_says_why():
    meter = DirtyRateMeter(lambda: None)
    with pytest.raises(CommandFailed, match="the VM is not running"):
        asyncio.run(meter.measure())
    meter = DirtyRateMeter(os.getpid)
    with pytest.raises(CommandFailed, match="maps no guest RAM"):
        asyncio.run(meter.measure())
