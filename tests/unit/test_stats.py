"""GetDomainStats payload: key sets of the reference, values from vm.counters and /proc."""

from __future__ import annotations

import ctypes
import json
import os
import pathlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from ch_launcher.kubevirt.domain import DomainDisk, DomainInterface
from ch_launcher.stats import domain_stats, parse_cpu_list
from tests.conftest import DOMAIN_EXAMPLES, require_shared

TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
PID = 4242
DISK = DomainDisk("myvolume", "vda", source_file="/var/run/kubevirt-private/vmi-disks/myvolume/disk.img")
NIC = DomainInterface("default", "02:55:43:00:00:01", tap="tap0")
COUNTERS = {
    "myvolume": {"read_bytes": 409600, "read_ops": 100, "write_bytes": 204800, "write_ops": 50,
                 "read_latency_min": 3, "read_latency_max": 65932, "read_latency_avg": 19,
                 "write_latency_min": 18446744073709551615},
    "default": {"rx_bytes": 1024, "rx_frames": 10, "tx_bytes": 2048, "tx_frames": 20},
    "__rng": {},
}


def stat_line(pid: int, comm: str, utime: int, stime: int) -> str:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
    return f"{pid} ({comm}) S 1 1 1 0 -1 4194560 100 0 2 0 {utime} {stime} 0 0 20 0 3 0 100 1 1\n"


def make_proc(root: pathlib.Path, *, vcpus: int = 2, schedstat: bool = True, sched: bool = True) -> None:
    p = root / str(PID)
    (p / "task").mkdir(parents=True)
    (p / "stat").write_text(stat_line(PID, "cloud-hyper) visor", 1000, 234))
    (p / "status").write_text("Name:\tcloud-hypervisor\nVmRSS:\t  524288 kB\nThreads:\t5\n")
    names = ["cloud-hyperviso", "vmm", "http-server", *(f"vcpu{n}" for n in range(vcpus)), "_disk_myvolume_q0"]
    for n, comm in enumerate(names):
        t = p / "task" / str(PID + n)
        t.mkdir()
        (t / "comm").write_text(comm + "\n")
        (t / "stat").write_text(stat_line(PID + n, comm, 7 + n, 3))
        (t / "status").write_text(f"Name:\t{comm}\nCpus_allowed_list:\t{'0-1' if n % 2 else '2,3'}\n")
        if schedstat:
            (t / "schedstat").write_text(f"{100_000_000_000 + n} {5_000 + n} 42\n")
        if sched:
            (t / "sched").write_text(f"{comm} ({PID + n}, #threads: 5)\n---\nse.exec_start  :  1.0\n"
                                     f"se.statistics.wait_sum  :  {n}.500000\n")


def stats(root: pathlib.Path | str, **changes: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"name": "mynamespace_testvmi", "uuid": "5b4c5a9e-1f0c-5d7e-9b1a-2f5e3c1d0a11",
                                "counters": COUNTERS, "vmm_pid": PID, "disks": [DISK], "interfaces": [NIC], "vcpus": 2,
                                "memory_bytes": 8 << 30, "proc_root": str(root), "host_cpus": 4}
    args.update(changes)
    return domain_stats(**args)


def test_stats_have_exactly_the_reference_key_sets(tmp_path: pathlib.Path) -> None:
    make_proc(tmp_path)
    ref = json.loads((require_shared(DOMAIN_EXAMPLES) / "domainstats-example.json").read_text())
    ours = json.loads(json.dumps(stats(tmp_path)))
    assert set(ours) == set(ref)
    for key in ("Cpu", "Memory"):
        assert set(ours[key]) == set(ref[key])
    for key in ("Vcpu", "Net", "Block"):
        assert set(ours[key][0]) == set(ref[key][0])
    zero = json.loads((require_shared(DOMAIN_EXAMPLES) / "domainstats-zero-skeleton.json").read_text())
    assert set(ours) == set(zero)


def test_stats_name_is_the_domain_name_and_never_empty(tmp_path: pathlib.Path) -> None:
    assert stats(tmp_path)["Name"] == "mynamespace_testvmi"
    with pytest.raises(ValueError, match="must not be empty"):
        stats(tmp_path, name="")


def test_cpu_time_comes_from_the_vmm_process_in_nanoseconds(tmp_path: pathlib.Path) -> None:
    make_proc(tmp_path)
    cpu = stats(tmp_path)["Cpu"]
    assert cpu == {"TimeSet": True, "Time": 1234 * TICK_NS, "UserSet": True, "User": 1000 * TICK_NS,
                   "SystemSet": True, "System": 234 * TICK_NS}


def test_memory_rss_and_total_are_kib_and_guest_values_stay_unset(tmp_path: pathlib.Path) -> None:
    make_proc(tmp_path)
    mem = stats(tmp_path)["Memory"]
    assert (mem["RSSSet"], mem["RSS"]) == (True, 524288)
    assert (mem["TotalSet"], mem["Total"]) == (True, 8 << 20)
    assert not any(mem[f"{k}Set"] for k in ("Unused", "Cached", "Available", "ActualBalloon",
                                            "SwapIn", "SwapOut", "MajorFault", "MinorFault", "Usable"))


def test_vcpus_come_from_the_vmms_vcpu_threads(tmp_path: pathlib.Path) -> None:
    make_proc(tmp_path)
    s = stats(tmp_path)
    v0, v1 = s["Vcpu"]
    # vcpu0 is the 4th thread (index 3) of make_proc, vcpu1 the 5th.
    assert v0 == {"StateSet": True, "State": 1, "TimeSet": True, "Time": 100_000_000_003,
                  "WaitSet": True, "Wait": 3_500_000, "DelaySet": True, "Delay": 5_003}
    assert (v1["Time"], v1["Wait"], v1["Delay"]) == (100_000_000_004, 4_500_000, 5_004)
    assert s["CPUMapSet"] is True
    assert s["CPUMap"] == [[True, True, False, False], [False, False, True, True]]


def test_vcpu_time_falls_back_to_stat_without_schedstat(tmp_path: pathlib.Path) -> None:
    make_proc(tmp_path, schedstat=False, sched=False)
    v0 = stats(tmp_path)["Vcpu"][0]
    assert (v0["TimeSet"], v0["Time"]) == (True, (7 + 3 + 3) * TICK_NS)
    assert v0["WaitSet"] is False and v0["DelaySet"] is False


def test_a_vcpu_without_a_thread_is_offline(tmp_path: pathlib.Path) -> None:
    make_proc(tmp_path, vcpus=1)
    s = stats(tmp_path, vcpus=2)
    assert [v["State"] for v in s["Vcpu"]] == [1, 0]
    assert s["Vcpu"][1]["TimeSet"] is False
    assert s["CPUMapSet"] is False and s["CPUMap"] is None


def test_net_and_block_counters_are_keyed_by_the_vmi_device_names(tmp_path: pathlib.Path) -> None:
    make_proc(tmp_path)
    s = stats(tmp_path)
    (net,) = s["Net"]
    assert (net["Name"], net["Alias"], net["AliasSet"]) == ("tap0", "default", True)
    assert (net["RxBytes"], net["RxPkts"], net["TxBytes"], net["TxPkts"]) == (1024, 10, 2048, 20)
    assert all(net[f"{k}Set"] for k in ("RxBytes", "RxPkts", "TxBytes", "TxPkts"))
    assert not any(net[f"{k}Set"] for k in ("RxErrs", "RxDrop", "TxErrs", "TxDrop"))
    (block,) = s["Block"]
    assert (block["Name"], block["Alias"], block["Path"]) == ("vda", "myvolume", DISK.source_file)
    assert (block["RdReqs"], block["RdBytes"], block["WrReqs"], block["WrBytes"]) == (100, 409600, 50, 204800)
    assert block["RdTimesSet"] is False and block["WrTimesSet"] is False  # CH has only min/max/avg
    assert "AliasSet" not in block


def test_devices_without_counters_keep_their_names_but_no_values(tmp_path: pathlib.Path) -> None:
    make_proc(tmp_path)
    s = stats(tmp_path, counters=None, interfaces=[DomainInterface("net1", "02:00:00:00:00:02")])
    (net,) = s["Net"]
    assert (net["NameSet"], net["Name"], net["Alias"]) == (True, "net1", "net1")
    assert not net["RxBytesSet"]
    assert not s["Block"][0]["RdReqsSet"]


def test_malformed_counters_are_ignored_value_by_value(tmp_path: pathlib.Path) -> None:
    bad = {"myvolume": {"read_ops": "many", "read_bytes": -1, "write_ops": True, "write_bytes": 7},
           "default": ["not", "a", "dict"]}
    s = stats(tmp_path, counters=bad)
    block = s["Block"][0]
    assert [block[f"{k}Set"] for k in ("RdReqs", "RdBytes", "WrReqs", "WrBytes")] == [False, False, False, True]
    assert not s["Net"][0]["RxBytesSet"]


def test_a_vmm_that_is_gone_gives_fewer_set_flags_not_an_exception(tmp_path: pathlib.Path) -> None:
    s = stats(tmp_path)  # no /proc/<pid> at all
    assert s["Cpu"]["TimeSet"] is False and s["Memory"]["RSSSet"] is False
    assert s["Memory"]["TotalSet"] is True  # the guest's size is still known
    assert s["Vcpu"] == [] and s["CPUMapSet"] is False
    assert s["Block"][0]["RdReqsSet"] is True  # counters given by the caller still count
    assert stats(tmp_path, vmm_pid=None)["Cpu"]["TimeSet"] is False


def test_garbage_in_proc_files_is_survived(tmp_path: pathlib.Path) -> None:
    make_proc(tmp_path)
    p = tmp_path / str(PID)
    (p / "stat").write_text("garbage")
    (p / "status").write_text("VmRSS:\tlots kB\n")
    for t in (p / "task").iterdir():
        (t / "schedstat").write_text("x y\n")
        (t / "sched").write_text("se.statistics.wait_sum : nan-ish\n")
        (t / "status").write_text("Cpus_allowed_list:\t0-x\n")
    s = stats(tmp_path)
    assert s["Cpu"]["TimeSet"] is False and s["Memory"]["RSSSet"] is False
    assert s["Vcpu"][0]["State"] == 1 and s["Vcpu"][0]["WaitSet"] is False
    assert s["CPUMapSet"] is False


@pytest.fixture
def vcpu_thread() -> Iterator[int]:
    """A thread of this very process named `vcpu0`, as Cloud Hypervisor names its vCPU threads."""
    ready, stop = threading.Event(), threading.Event()

    def body() -> None:
        ctypes.CDLL(None, use_errno=True).prctl(15, b"vcpu0", 0, 0, 0)  # PR_SET_NAME
        x = 0
        for i in range(200_000):  # burn a little CPU so the thread's time is non-zero
            x += i
        ready.set()
        stop.wait(30)

    t = threading.Thread(target=body, daemon=True)
    t.start()
    assert ready.wait(10)
    yield t.native_id or 0
    stop.set()
    t.join(10)


def test_stats_of_the_real_current_process(vcpu_thread: int) -> None:
    s = domain_stats(name="ns_vm", uuid="u", counters={}, vmm_pid=os.getpid(), disks=[], interfaces=[],
                     vcpus=1, memory_bytes=1 << 30)
    assert s["Cpu"]["TimeSet"] and s["Cpu"]["Time"] > 0
    assert s["Memory"]["RSSSet"] and s["Memory"]["RSS"] > 1024  # a Python process is > 1 MiB
    (vcpu,) = s["Vcpu"]
    assert vcpu["State"] == 1 and vcpu["TimeSet"] and vcpu["Time"] > 0
    assert s["CPUMapSet"] and len(s["CPUMap"][0]) >= (os.cpu_count() or 1)
    assert s["CPUMap"][0][next(iter(os.sched_getaffinity(0)))] is True
    json.dumps(s)  # serialisable as is


@pytest.mark.parametrize("text,cpus", [("0-3", (0, 1, 2, 3)), ("0,2,4-5\n", (0, 2, 4, 5)), ("7", (7,)), ("", ())])
def test_cpu_lists(text, cpus):
    assert parse_cpu_list(text) == cpus


@pytest.mark.parametrize("text", ["3-1", "a", "1-b"])
def test_bad_cpu_lists_are_refused(text):
    with pytest.raises(ValueError):
        parse_cpu_list(text)
