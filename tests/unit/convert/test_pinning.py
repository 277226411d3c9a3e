"""Dedicated CPUs: vCPU placement by KubeVirt's rules, the emulator thread, realtime vCPUs and the
guest NUMA layout. The placement cases are KubeVirt's own (pkg/virt-launcher/virtwrap/converter/
vcpu/vcpu_test.go@d923fdb815cd), on host topologies built the way its `hostTopology` helper does."""

from __future__ import annotations

import random

import pytest

from ch_launcher.convert import check
from ch_launcher.convert.context import LauncherEnv, LauncherOptions, PodFacts
from ch_launcher.convert.cpupool import CpuPool, PlacementError
from ch_launcher.convert.pinning import realtime_vcpus
from ch_launcher.convert.topology import HostCell, HostCpu, HostTopology
from tests.unit.convert.vmibuild import fields, vmi


def host_topology(cell_count: int, threads_per_core: int, *threads: int) -> HostTopology:
    """KubeVirt's test helper: `threads` in groups of `threads_per_core` siblings, filled into
    `cell_count` cells in turn."""
    cells: list[list[HostCpu]] = [[] for _ in range(cell_count)]
    per_cell = len(threads) // cell_count
    per_cell -= per_cell % threads_per_core
    cell = assigned = 0
    for i in range(0, len(threads), threads_per_core):
        core = tuple(threads[i:i + threads_per_core])
        for thread in core:
            cells[cell].append(HostCpu(thread, core))
            assigned += 1
        if assigned >= per_cell:
            assigned = 0
            cell = (cell + 1) % cell_count
    return HostTopology(tuple(HostCell(i, tuple(cpus)) for i, cpus in enumerate(cells)))


def shuffled(*cpus: int) -> tuple[int, ...]:
    out = list(cpus)
    random.shuffle(out)
    return tuple(out)


def pool(cores: int, threads: int, topology: HostTopology, cpuset: tuple[int, ...], strict: bool = False) -> CpuPool:
    return CpuPool(threads_per_core=threads, cores=cores, topology=topology, cpuset=cpuset,
                   allow_cell_crossing=not strict)


TWELVE = (1, 7, 0, 6, 2, 8, 3, 9, 4, 10, 5, 11)


def test_placement_follows_the_host_topology_order_whatever_the_cpuset_order():
    for _ in range(10):
        got = pool(12, 1, host_topology(1, 2, *TWELVE), shuffled(*range(12))).fit_cores()
        assert got == list(TWELVE)


def test_a_cpuset_with_too_few_threads_is_kubevirts_not_enough_error():
    with pytest.raises(PlacementError, match=r"not enough exclusive threads provided, could not fit 1 core\(s\)"):
        pool(12, 1, host_topology(1, 2, *TWELVE), shuffled(*range(11))).fit_cores()


def test_strict_placement_never_splits_a_vcpu_core_across_numa_cells():
    topology = host_topology(2, 3, 1, 7, 0, 6, 2, 8)
    with pytest.raises(PlacementError, match="without crossing numa cell boundaries"):
        pool(3, 2, topology, shuffled(0, 1, 2, 6, 7, 8), strict=True).fit_cores()
    assert pool(3, 2, topology, shuffled(*range(12))).fit_cores() == [1, 7, 6, 2, 0, 8]


@pytest.mark.parametrize("threads_per_core, cpuset, expected", [
    (1, range(12), [1, 7, 0, 6, 2, 8, 3, 9, 4, 10, 5, 11]),
    (2, range(2, 12), [7, 6, 2, 8, 3, 9, 4, 10, 5, 11]),  # fragmented cores first
])
def test_single_threads_come_from_fragmented_cores_first(threads_per_core, cpuset, expected):
    p = pool(1, 2, host_topology(2, threads_per_core, *TWELVE), shuffled(*cpuset))
    got = []
    while True:
        try:
            got.append(p.fit_thread())
        except PlacementError:
            break
    assert got == expected


@pytest.mark.parametrize("mask, vcpus, expected", [
    ("", 4, (0, 1, 2, 3)),
    ("0-3,^1", 4, (0, 2, 3)),
    ("2", 4, (2,)),
    ("^2", 4, ()),  # libvirt's semantics as KubeVirt parses them: only listed vCPUs are enabled
    ("0-7", 4, (0, 1, 2, 3)),
])
def test_realtime_masks_select_vcpus_as_kubevirt_parses_them(mask, vcpus, expected):
    assert realtime_vcpus(mask, vcpus) == expected


@pytest.mark.parametrize("mask", ["a", "3-1", "1,,2"])
def test_a_malformed_realtime_mask_is_none(mask):
    assert realtime_vcpus(mask, 4) is None


# --- through the translator ---------------------------------------------------------------------

SMT = HostTopology((
    HostCell(0, tuple(HostCpu(c, (c, c + 4) if c < 4 else (c - 4, c)) for c in range(8)), ((0, 10), (1, 21))),
    HostCell(1, tuple(HostCpu(c, (c, c + 4) if c < 12 else (c - 4, c)) for c in range(8, 16)), ((0, 21), (1, 10))),
))


def dedicated(cpu: dict, memory: dict | None = None, **meta) -> dict:
    body = vmi({"cpu": {"dedicatedCpuPlacement": True, **cpu}, "memory": memory or {"guest": "1Gi"},
                "devices": {"autoattachGraphicsDevice": False}})
    body["metadata"].update(meta)
    return body


def launch(body: dict, pod: PodFacts, topology: HostTopology | None = None):
    return check(body, LauncherEnv(pod=pod), LauncherOptions(topology=topology))


def affinity(verdict) -> list[int]:
    return [a.host_cpus[0] for a in verdict.plan.config.cpus.affinity]


def test_each_vcpu_gets_one_cpu_of_the_pod_cpuset_and_the_emulator_thread_one_more():
    v = launch(dedicated({"cores": 2, "isolateEmulatorThread": True}), PodFacts(cpuset=(2, 3, 6, 7, 10)), SMT)
    assert v.allowed, [p.message for p in v.problems]
    assert affinity(v) == [2, 6]  # both threads of host core 2/6, as KubeVirt places guest cores
    assert v.plan.host.housekeeping_cpus == (3,)
    assert v.plan.host.finds_vmm


def test_the_even_parity_annotation_gives_the_emulator_a_second_cpu_for_even_vcpu_counts():
    body = dedicated({"cores": 2, "isolateEmulatorThread": True},
                     annotations={"alpha.kubevirt.io/EmulatorThreadCompleteToEvenParity": ""})
    v = launch(body, PodFacts(cpuset=(0, 1, 2, 3)))
    assert affinity(v) == [0, 1] and v.plan.host.housekeeping_cpus == (2, 3)


def test_without_a_spare_cpu_the_emulator_thread_is_refused_with_the_field():
    v = launch(dedicated({"cores": 2, "isolateEmulatorThread": True}), PodFacts(cpuset=(4, 5)))
    assert fields(v.problems) == ["spec.domain.cpu.isolateEmulatorThread"]
    assert "no CPU allocated for the emulation thread" in v.problems[0].message


def test_without_virt_handlers_topology_the_hosts_own_is_used():
    pod = PodFacts(cpuset=(2, 3, 6, 7), topology=SMT)
    assert affinity(launch(dedicated({"cores": 2, "threads": 2}), pod)) == [2, 6, 3, 7]
    # without any topology every CPU is a core of its own
    assert affinity(launch(dedicated({"cores": 2, "threads": 2}), PodFacts(cpuset=(2, 3, 6, 7)))) == [2, 3, 6, 7]


def test_only_the_vcpus_that_boot_are_pinned():
    v = launch(dedicated({"sockets": 1, "cores": 2, "maxSockets": 3}), PodFacts(cpuset=(0, 1, 2, 3, 4, 5)))
    assert [a.vcpu for a in v.plan.config.cpus.affinity] == [0, 1]


def test_realtime_vcpus_are_recorded_and_the_pmu_degradation_is_a_warning():
    body = dedicated({"cores": 4, "realtime": {"mask": "0-3,^1"}, "numa": {"guestMappingPassthrough": {}}},
                     {"guest": "1Gi", "hugepages": {"pageSize": "2Mi"}})
    v = launch(body, PodFacts(cpuset=(0, 1, 2, 3), memory_nodes=(0,)))
    assert v.plan.host.realtime_vcpus == (0, 2, 3)
    assert "spec.domain.cpu.realtime" in fields(v.warnings)


def test_numa_passthrough_mirrors_the_host_cells_the_vcpus_landed_on():
    topology = HostTopology((HostCell(0, tuple(HostCpu(c) for c in range(4)), ((0, 10), (1, 21))),
                             HostCell(1, tuple(HostCpu(c) for c in range(4, 8)), ((0, 21), (1, 10)))))
    body = dedicated({"cores": 4, "numa": {"guestMappingPassthrough": {}}},
                     {"guest": "1026Mi", "hugepages": {"pageSize": "2Mi"}, "maxGuest": "2050Mi"})
    v = launch(body, PodFacts(cpuset=(2, 3, 4, 5), memory_nodes=(0, 1)), topology)
    assert v.allowed, [p.message for p in v.problems]
    config = v.plan.config.to_api()
    assert config["memory"]["size"] == 0 and config["memory"]["hotplug_method"] == "VirtioMem"
    # 513 pages of 2 MiB over two nodes: 257 and 256 (the first node gets the remainder), hot-plug on the first
    assert [(z["id"], z["size"] // (2 << 20), z["host_numa_node"], z.get("hotplug_size"))
            for z in config["memory"]["zones"]] \
        == [("numa0", 257, 0, 1 << 30), ("numa1", 256, 1, None)]
    assert all(z["hugepages"] and z["hugepage_size"] == 2 << 20 for z in config["memory"]["zones"])
    assert config["numa"] == [
        {"guest_numa_id": 0, "cpus": [0, 1], "memory_zones": ["numa0"],
         "distances": [{"destination": 1, "distance": 21}]},
        {"guest_numa_id": 1, "cpus": [2, 3], "memory_zones": ["numa1"],
         "distances": [{"destination": 0, "distance": 21}]},
    ]


def test_numa_passthrough_needs_hugepages_and_memory_nodes_the_pod_has():
    body = dedicated({"cores": 2, "numa": {"guestMappingPassthrough": {}}})
    v = launch(body, PodFacts(cpuset=(0, 1)))
    assert fields(v.problems) == ["spec.domain.cpu.numa.guestMappingPassthrough"]
    assert "hugepages" in v.problems[0].message
    topology = HostTopology((HostCell(0, (HostCpu(0),)), HostCell(1, (HostCpu(1),))))
    body = dedicated({"cores": 2, "numa": {"guestMappingPassthrough": {}}},
                     {"guest": "1Gi", "hugepages": {"pageSize": "2Mi"}})
    v = launch(body, PodFacts(cpuset=(0, 1), memory_nodes=(0,)), topology)
    assert fields(v.problems) == ["spec.domain.cpu.numa.guestMappingPassthrough"]
    assert "not memory nodes of the pod (cpuset.mems 0)" in v.problems[0].message


def test_at_admission_dedicated_cpus_pin_nothing_and_are_admitted():
    v = check(dedicated({"cores": 2, "isolateEmulatorThread": True}))
    assert v.allowed and v.plan.config.cpus.affinity is None and v.plan.host.finds_vmm
