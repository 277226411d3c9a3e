"""GetDomainStats: the `stats.DomainStats` JSON object from `vm.counters` and /proc (contract §12).

virt-handler's exporter emits a metric only when its `XSet` flag is true, and collects a VMI's
metrics only when `Name` is non-empty (`pkg/monitoring/metrics/virt-handler/domainstats`,
`kubevirt/kubevirt@d923fdb815cd`). So every value we know carries `XSet: true`, every value we
do not know stays zero with `XSet: false`, and `Name` is always the domain name.

Where each value comes from (libvirt's meaning kept, so the metrics mean the same):
- `Cpu.User`/`System`/`Time`: utime/stime of the whole VMM process, `/proc/<pid>/stat`, ns.
- `Memory.RSS`: `VmRSS` of `/proc/<pid>/status` (KiB). `Memory.Total`: the guest's memory (KiB).
  Guest-side values (unused, cached, swap, faults, balloon) need a guest agent or a balloon
  statistics queue: unset.
- `Vcpu[n]`: the VMM's `vcpu<n>` thread (Cloud Hypervisor names them so, `vmm/src/cpu.rs`):
  `State` 1 (running) when the thread exists, 0 (offline) when it does not; `Time` = on-CPU ns
  (`schedstat` field 1, else utime+stime); `Delay` = run-queue wait ns (`schedstat` field 2,
  libvirt's `vcpu.N.delay`); `Wait` = `wait_sum` of `/proc/<pid>/task/<tid>/sched` when the
  kernel keeps schedstats (libvirt's `vcpu.N.wait`), else unset. `CPUMap[n]` from the thread's
  `Cpus_allowed_list`.
- `Net[]`: `vm.counters[<interface name>]` (the translator sets each NIC's CH id to the VMI
  interface name): `rx_bytes`, `rx_frames`, `tx_bytes`, `tx_frames`. `Name` = the tap device
  (libvirt's `net.N.name`), `Alias` = the interface name. Errors and drops: CH has no counter.
- `Block[]`: `vm.counters[<disk name>]`: `read_ops`, `read_bytes`, `write_ops`, `write_bytes`.
  `Name` = target dev (`vda`), `Alias` = disk name, `Path` = the image. CH's latency counters are
  min/max/avg (with u64::MAX sentinels), not totals, so `RdTimes`/`WrTimes` stay unset; CH has
  no flush counter.

Failure behaviour: a VMM that is gone, a /proc entry that vanished or is malformed, counters
that are missing or not integers — each only clears the Set flags it feeds. `domain_stats`
raises only for an empty `name` (a caller bug that would silently disable the VMI's metrics).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any

from ch_launcher.kubevirt.domain import DomainDisk, DomainInterface

log = logging.getLogger(__name__)

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_NS_PER_TICK = 1_000_000_000 // _CLK_TCK

VCPU_OFFLINE, VCPU_RUNNING, VCPU_BLOCKED = 0, 1, 2  # stats.VCPUOffline/Running/Blocked


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _stat_fields(text: str | None) -> list[str] | None:
    """Fields of /proc/<pid>/stat after `comm` (which may hold spaces and parentheses);
    index 0 is `state`, so utime is [11], stime [12], as proc(5) numbers 14 and 15."""
    if not text:
        return None
    end = text.rfind(")")
    if end < 0:
        return None
    fields = text[end + 1:].split()
    return fields if len(fields) > 12 else None


def _user_system_ns(stat_text: str | None) -> tuple[int, int] | None:
    fields = _stat_fields(stat_text)
    if fields is None:
        return None
    try:
        return int(fields[11]) * _NS_PER_TICK, int(fields[12]) * _NS_PER_TICK
    except ValueError:
        return None


def _status_value(text: str | None, key: str) -> str | None:
    if not text:
        return None
    prefix = key + ":"
    for line in text.splitlines():
        if line.startswith(prefix):
            return line[len(prefix):].strip()
    return None


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """Linux's CPU list format (`cpuset.cpus`, `Cpus_allowed_list`): "0-3,8,10-11" ->
    (0, 1, 2, 3, 8, 10, 11). Raises ValueError on anything else."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi or lo)
        if last < first:
            raise ValueError(f"bad CPU range {part!r}")
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def _cpu_list(spec: str | None, width: int) -> list[bool] | None:
    """`0-3,8` -> a bool per host CPU; None when unparsable."""
    if spec is None:
        return None
    try:
        cpus = set(parse_cpu_list(spec))
    except ValueError:
        return None
    size = max([width, *(c + 1 for c in cpus)])
    return [c in cpus for c in range(size)]


def _wait_sum_ns(sched_text: str | None) -> int | None:
    """`wait_sum` (ms with a fraction) from /proc/<pid>/task/<tid>/sched; None without schedstats."""
    if not sched_text:
        return None
    for line in sched_text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("se.statistics.wait_sum", "stats.wait_sum", "wait_sum"):
            try:
                return int(float(value.strip()) * 1_000_000)
            except ValueError:
                return None
    return None


def _vcpu_threads(proc_root: str, pid: int) -> dict[int, str] | None:
    """vCPU index -> task directory, from the comm of every thread; None if the VMM is gone."""
    task_dir = f"{proc_root}/{pid}/task"
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return None
    threads: dict[int, str] = {}
    for tid in tids:
        comm = (_read(f"{task_dir}/{tid}/comm") or "").strip()
        if comm.startswith("vcpu") and comm[4:].isdigit():
            threads[int(comm[4:])] = f"{task_dir}/{tid}"
    return threads


def _cpu(proc_root: str, pid: int | None) -> dict[str, Any]:
    us = _user_system_ns(_read(f"{proc_root}/{pid}/stat")) if pid else None
    user, system = us or (0, 0)
    return {"TimeSet": us is not None, "Time": user + system,
            "UserSet": us is not None, "User": user,
            "SystemSet": us is not None, "System": system}


def _memory(proc_root: str, pid: int | None, memory_bytes: int) -> dict[str, Any]:
    rss: int | None = None
    raw = _status_value(_read(f"{proc_root}/{pid}/status"), "VmRSS") if pid else None
    if raw:
        number = raw.split()[0]
        rss = int(number) if number.isdigit() else None  # "kB" in /proc means KiB
    mem: dict[str, Any] = {}
    for key in ("Unused", "Cached", "Available", "ActualBalloon", "RSS", "SwapIn", "SwapOut",
                "MajorFault", "MinorFault", "Usable", "Total"):
        mem[f"{key}Set"] = False
        mem[key] = 0
    if rss is not None:
        mem["RSSSet"], mem["RSS"] = True, rss
    if memory_bytes > 0:
        mem["TotalSet"], mem["Total"] = True, memory_bytes // 1024
    return mem


def _vcpus(proc_root: str, pid: int | None, vcpus: int,
           host_cpus: int) -> tuple[list[dict[str, Any]], list[list[bool]] | None]:
    threads = _vcpu_threads(proc_root, pid) if pid else None
    if threads is None:
        return [], None  # VMM gone: nothing to say about its vCPUs
    entries: list[dict[str, Any]] = []
    cpumap: list[list[bool]] | None = []
    for n in range(max(vcpus, 0)):
        entry = {"StateSet": True, "State": VCPU_OFFLINE, "TimeSet": False, "Time": 0,
                 "WaitSet": False, "Wait": 0, "DelaySet": False, "Delay": 0}
        task = threads.get(n)
        affinity = None
        if task is not None:
            entry["State"] = VCPU_RUNNING
            sched = (_read(f"{task}/schedstat") or "").split()
            if len(sched) >= 2 and sched[0].isdigit() and sched[1].isdigit():
                entry.update(TimeSet=True, Time=int(sched[0]), DelaySet=True, Delay=int(sched[1]))
            else:
                us = _user_system_ns(_read(f"{task}/stat"))
                if us is not None:
                    entry.update(TimeSet=True, Time=us[0] + us[1])
            wait = _wait_sum_ns(_read(f"{task}/sched"))
            if wait is not None:
                entry.update(WaitSet=True, Wait=wait)
            affinity = _cpu_list(_status_value(_read(f"{task}/status"), "Cpus_allowed_list"), host_cpus)
        entries.append(entry)
        if affinity is None:
            cpumap = None
        elif cpumap is not None:
            cpumap.append(affinity)
    if cpumap:
        width = max(len(row) for row in cpumap)
        cpumap = [row + [False] * (width - len(row)) for row in cpumap]
    return entries, cpumap or None


def _counter(device: Mapping[str, Any] | None, key: str) -> int | None:
    if not isinstance(device, Mapping):
        return None
    value = device.get(key)
    # CH counters are u64; bool is an int subclass in Python and never a counter.
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _net(iface: DomainInterface, counters: Mapping[str, Any]) -> dict[str, Any]:
    dev = counters.get(iface.alias)
    entry: dict[str, Any] = {"NameSet": True, "Name": iface.tap or iface.alias,
                             "AliasSet": True, "Alias": iface.alias}
    sources = {"RxBytes": "rx_bytes", "RxPkts": "rx_frames", "RxErrs": None, "RxDrop": None,
               "TxBytes": "tx_bytes", "TxPkts": "tx_frames", "TxErrs": None, "TxDrop": None}
    for key, source in sources.items():
        value = _counter(dev, source) if source else None
        entry[f"{key}Set"] = value is not None
        entry[key] = value or 0
    return entry


def _block(disk: DomainDisk, counters: Mapping[str, Any]) -> dict[str, Any]:
    dev = counters.get(disk.alias)
    path = disk.source_file or disk.source_dev
    entry: dict[str, Any] = {"NameSet": True, "Name": disk.target_dev, "Alias": disk.alias,
                             "BackingIndexSet": False, "BackingIndex": 0,
                             "PathSet": bool(path), "Path": path}
    sources = {"RdReqs": "read_ops", "RdBytes": "read_bytes", "RdTimes": None,
               "WrReqs": "write_ops", "WrBytes": "write_bytes", "WrTimes": None,
               "FlReqs": None, "FlTimes": None, "Errors": None,
               "Allocation": None, "Capacity": None, "Physical": None}
    for key, source in sources.items():
        value = _counter(dev, source) if source else None
        entry[f"{key}Set"] = value is not None
        entry[key] = value or 0
    return entry


NO_MIGRATION_JOB: Mapping[str, Any] = {
    "DataTotalSet": False, "DataTotal": 0, "DataProcessedSet": False, "DataProcessed": 0,
    "MemoryBpsSet": False, "MemoryBps": 0, "DataRemainingSet": False, "DataRemaining": 0,
    "MemDirtyRateSet": False, "MemDirtyRate": 0,
}


def domain_stats(*, name: str, uuid: str, counters: Mapping[str, Any] | None, vmm_pid: int | None,
                 disks: Iterable[DomainDisk], interfaces: Iterable[DomainInterface], vcpus: int,
                 memory_bytes: int, proc_root: str = "/proc", host_cpus: int | None = None,
                 migration: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The `stats.DomainStats` object for GetDomainStats (serialise with json.dumps).

    `name` is the domain name (`<namespace>_<name>`, as `Spec.Name`); `counters` is CH's
    `vm.counters` answer (None when CH has no running VM); `vmm_pid` the VMM process (None when
    gone). `migration` is the `MigrateDomainJobInfo` of a migration in progress; without one the
    object is all zeros, never null: virt-handler's migration-stats collector dereferences it
    (kubevirt pkg/monitoring/metrics/virt-handler/migrationdomainstats/queue.go@d923fdb815cd, as
    the Go launcher's `domainInfoStats` starts as an empty DomainJobInfo).
    `proc_root` and `host_cpus` exist for tests. Never raises for missing or malformed
    sources; raises ValueError for an empty `name`.
    """
    if not name:
        raise ValueError("DomainStats.Name must not be empty: virt-handler drops stats without it")
    if not isinstance(counters, Mapping):
        counters = {}
    width = host_cpus if host_cpus is not None else (os.cpu_count() or 1)
    vcpu_entries, cpumap = _vcpus(proc_root, vmm_pid, vcpus, width)
    return {
        "Name": name,
        "UUID": uuid,
        "Cpu": _cpu(proc_root, vmm_pid),
        "Memory": _memory(proc_root, vmm_pid, memory_bytes),
        "MigrateDomainJobInfo": dict(migration) if migration else dict(NO_MIGRATION_JOB),
        "Vcpu": vcpu_entries,
        "Net": [_net(i, counters) for i in interfaces],
        "Block": [_block(d, counters) for d in disks],
        "CPUMapSet": cpumap is not None,
        "CPUMap": cpumap,
        "DirtyRate": None,
        "Load": None,
    }
