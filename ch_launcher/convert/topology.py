"""The host's CPU topology as the launcher knows it: NUMA cells, their CPUs and each CPU's core
siblings (pure data). virt-handler sends it in the Sync options (`VirtualMachineOptions.topology`,
from the node's capabilities); inside the pod the launcher can also read it from sysfs
(`manager.pod.read_pod_facts`). Used by dedicated-CPU placement (`cpupool`) and NUMA passthrough.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HostCpu:
    id: int
    siblings: tuple[int, ...] = ()  # the threads of its core, itself included (empty: unknown)


@dataclass(frozen=True)
class HostCell:
    id: int
    cpus: tuple[HostCpu, ...] = ()
    distances: tuple[tuple[int, int], ...] = ()  # (cell id, distance)


@dataclass(frozen=True)
class HostTopology:
    cells: tuple[HostCell, ...] = ()

    @classmethod
    def flat(cls, cpuset: tuple[int, ...]) -> HostTopology:
        """One cell, every CPU a core of its own: what is known without a topology."""
        return cls((HostCell(0, tuple(HostCpu(c) for c in cpuset)),))

    def cell_of(self) -> dict[int, HostCell]:
        return {cpu.id: cell for cell in self.cells for cpu in cell.cpus}
