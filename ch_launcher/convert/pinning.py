"""Dedicated CPUs, the emulator thread, realtime vCPUs and the guest NUMA layout (pure; imported
only for VMIs with `dedicatedCpuPlacement`).

What KubeVirt does (kubevirt pkg/virt-launcher/virtwrap/converter/vcpu/vcpu.go@d923fdb815cd,
`AdjustDomainForTopologyAndCPUSet`) and what it becomes on Cloud Hypervisor:

- vCPU placement (`FitCores`, see `cpupool`) -> `cpus.affinity`, one host thread per vCPU;
  only the vCPUs that boot are pinned, as KubeVirt pins only enabled vCPUs.
- `isolateEmulatorThread` (`FormatEmulatorThreadPin`): one more thread of the cpuset (two when the
  VMI has the `alpha.kubevirt.io/EmulatorThreadCompleteToEvenParity` annotation and an even vCPU
  count) -> `HostTuning.housekeeping_cpus`: the launcher keeps every other thread of the pod
  there (manager/tuning.py), as virt-handler's housekeeping cgroup does for QEMU.
- `realtime` -> `HostTuning.realtime_vcpus` (the vCPUs its `mask` selects, parsed as
  `common.ParseCPUMask`, pkg/hypervisor/common/vcpu.go); KubeVirt also turns the guest's PMU off,
  which Cloud Hypervisor cannot (it passes the host's PMU CPUID through): a warning.
- `numa.guestMappingPassthrough` (`numaMapping`): placement may not cross host NUMA cells; one
  guest NUMA node per host cell the vCPUs landed on, in host order, with those vCPUs, the host's
  distances between them, and an equal share of guest memory in hugepages bound to that host
  node -> `Translation.guest_numa` (sized and turned into memory zones by `memory`). Every host
  cell must be in the pod's memory nodes (`cpuset.mems`), or the VMM could not bind to it.

Nothing here runs at admission (`env.pod is None`): the cpuset is a fact of the pod.
"""

from __future__ import annotations

import re
from dataclasses import replace

from ch_launcher.ch.vmconfig import CpuAffinity
from ch_launcher.convert.context import GuestNumaCell, Translation
from ch_launcher.convert.cpupool import CpuPool, PlacementError
from ch_launcher.convert.topology import HostTopology

BASE = "spec.domain.cpu"
EVEN_PARITY_ANNOTATION = "alpha.kubevirt.io/EmulatorThreadCompleteToEvenParity"
_RANGE = re.compile(r"^(\d+)-(\d+)$")
_NEGATE = re.compile(r"^\^(\d+)$")
_SINGLE = re.compile(r"^(\d+)$")


def realtime_vcpus(mask: str, vcpus: int) -> tuple[int, ...] | None:
    """The vCPUs `mask` enables (libvirt's syntax, as KubeVirt parses it: "0-3", "5", "^2"; an
    empty mask enables all); None if the mask is malformed."""
    if not mask:
        return tuple(range(vcpus))
    state: dict[int, bool] = {}
    for part in mask.split(","):
        item = part.strip()
        if m := _RANGE.match(item):
            start, end = int(m.group(1)), int(m.group(2))
            if start > end:
                return None
            for i in range(start, end + 1):
                state.setdefault(i, True)
        elif m := _SINGLE.match(item):
            state.setdefault(int(m.group(1)), True)
        elif m := _NEGATE.match(item):
            state[int(m.group(1))] = False
        else:
            return None
    return tuple(i for i in range(vcpus) if state.get(i) is True)


def configure_dedicated_cpus(t: Translation, sockets: int, cores: int, threads: int) -> None:
    """Pin the boot vCPUs (sockets x cores x threads) and decide the rest (module docstring)."""
    cpu = t.vmi.spec.domain.cpu
    assert cpu is not None and t.config.cpus is not None
    boot = sockets * cores * threads
    numa = cpu.numa is not None and cpu.numa.guestMappingPassthrough is not None
    if cpu.realtime is not None:
        vcpus = realtime_vcpus(cpu.realtime.mask or "", boot)
        if vcpus is None:
            t.unsupported(f"{BASE}.realtime.mask", f"{BASE}.realtime.mask '{cpu.realtime.mask}' is not a valid "
                          "vCPU mask (e.g. 0-3,^2)", "FieldValueInvalid")
            return
        t.host = replace(t.host, realtime_vcpus=vcpus)
        t.warn(f"{BASE}.realtime", "the guest keeps the host's PMU (Cloud Hypervisor cannot turn it off), and the "
               "vCPU threads get SCHED_FIFO only where the launcher has CAP_SYS_NICE (root VMIs)")
    pod = t.env.pod
    if pod is None:
        return  # admission: the cpuset is a fact of the pod, known only at launch
    if not pod.cpuset:
        t.warn(f"{BASE}.dedicatedCpuPlacement", "the pod's cpuset is unknown: vCPUs are not pinned")
        return
    topology = t.options.topology or pod.topology or HostTopology.flat(pod.cpuset)
    pool = CpuPool(threads_per_core=threads, cores=sockets * cores, topology=topology, cpuset=pod.cpuset,
                   allow_cell_crossing=not numa)
    cpuset = ",".join(map(str, pod.cpuset))
    try:
        pins = pool.fit_cores()
    except PlacementError as e:
        t.unsupported(f"{BASE}.dedicatedCpuPlacement", f"{BASE}.dedicatedCpuPlacement: {e} (the pod's cpuset is "
                      f"{cpuset}, {boot} vCPUs requested)", "FieldValueInvalid")
        return
    t.config.cpus.affinity = [CpuAffinity(vcpu=i, host_cpus=[host]) for i, host in enumerate(pins)]
    if cpu.isolateEmulatorThread:
        count = 2 if EVEN_PARITY_ANNOTATION in t.vmi.metadata.annotations and boot % 2 == 0 else 1
        try:
            housekeeping = tuple(pool.fit_thread() for _ in range(count))
        except PlacementError as e:
            t.unsupported(f"{BASE}.isolateEmulatorThread", f"{BASE}.isolateEmulatorThread: no CPU allocated for the "
                          f"emulation thread: {e} (the pod's cpuset is {cpuset})", "FieldValueInvalid")
            return
        t.host = replace(t.host, housekeeping_cpus=housekeeping)
    if numa:
        _guest_numa(t, topology, pins)


def _guest_numa(t: Translation, topology: HostTopology, pins: list[int]) -> None:
    cell_of = topology.cell_of()
    by_cell: dict[int, list[int]] = {}
    for vcpu, host in enumerate(pins):
        cell = cell_of.get(host)
        if cell is None:
            t.unsupported(f"{BASE}.numa.guestMappingPassthrough", f"vcpu {vcpu} is mapped to a not existing host "
                          f"cpu set {host}", "FieldValueInvalid")
            return
        by_cell.setdefault(cell.id, []).append(vcpu)
    involved = [cell for cell in topology.cells if cell.id in by_cell]
    pod = t.env.pod
    if pod is not None and pod.memory_nodes:
        outside = [cell.id for cell in involved if cell.id not in pod.memory_nodes]
        if outside:
            t.unsupported(f"{BASE}.numa.guestMappingPassthrough", f"{BASE}.numa.guestMappingPassthrough: host NUMA "
                          f"node(s) {','.join(map(str, outside))} of the pinned vCPUs are not memory nodes of the pod "
                          f"(cpuset.mems {','.join(map(str, pod.memory_nodes))})", "FieldValueInvalid")
            return
    guest_id = {cell.id: i for i, cell in enumerate(involved)}
    t.guest_numa = [
        GuestNumaCell(guest_id=guest_id[cell.id], host_id=cell.id, vcpus=tuple(by_cell[cell.id]),
                      distances=tuple((guest_id[other], value) for other, value in cell.distances
                                      if other in guest_id and other != cell.id))
        for cell in involved
    ]
