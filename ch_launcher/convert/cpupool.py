"""Which host CPU each vCPU gets, by KubeVirt's rules (pure; imported only for dedicated CPUs).

The same placement as virt-launcher's converter (kubevirt pkg/virt-launcher/virtwrap/converter/
vcpu/vcpu.go@d923fdb815cd, `newCPUPool`, `FitCores`, `FitThread`), rewritten here: the pod's
exclusive cpuset is grouped by the host's NUMA cells and cores (thread siblings), then vCPU cores
are placed, in order of preference,

1. on whole host cores (as many sibling threads as the guest has threads per core),
2. on threads of fragmented cores within one NUMA cell,
3. only with `allow_cell_crossing` (everything but `numa.guestMappingPassthrough`): on any
   remaining threads, across cells;

and the emulator thread (`isolateEmulatorThread`) takes one more thread, fragmented cores first.
The errors are KubeVirt's texts.

The host topology is what virt-handler sends in the Sync options (`Topology`, from the node's
capabilities); without it, the one the launcher reads from sysfs; without either, every CPU of
the cpuset is a core of its own in a single cell.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ch_launcher.convert.topology import HostTopology


class PlacementError(ValueError):
    """The cpuset cannot hold the request; the message is KubeVirt's."""


@dataclass
class _Cell:
    threads_per_core: int
    full: list[list[int]] = field(default_factory=list)  # cores with at least threads_per_core threads
    fragmented: list[int] = field(default_factory=list)  # threads of smaller cores

    def not_fragmented_threads(self) -> list[int]:
        if not self.full:
            return []
        selected, remaining = self.full[0][: self.threads_per_core], self.full[0][self.threads_per_core:]
        if len(remaining) >= self.threads_per_core:
            self.full[0] = remaining
        else:
            self.full.pop(0)
            self.fragmented.extend(remaining)
        return selected

    def fragmented_threads(self) -> list[int]:
        if self.threads_per_core <= len(self.fragmented):
            selected = self.fragmented[: self.threads_per_core]
            del self.fragmented[: self.threads_per_core]
            return selected
        return []

    def fragmented_threads_up_to(self, threads: int) -> list[int]:
        selected = self.fragmented[:threads]
        del self.fragmented[:threads]
        return selected

    def thread(self) -> int | None:
        if self.fragmented:
            return self.fragmented.pop(0)
        if self.full:
            core = self.full[0]
            thread, remaining = core[0], core[1:]
            if len(remaining) >= self.threads_per_core:
                self.full[0] = remaining
            else:
                self.full.pop(0)
                self.fragmented.extend(remaining)
            return thread
        return None

    def empty(self) -> bool:
        return not self.fragmented and not self.full


class CpuPool:
    """The pod's cpuset, to be handed out to vCPU cores and then single threads."""

    def __init__(self, *, threads_per_core: int, cores: int, topology: HostTopology, cpuset: tuple[int, ...],
                 allow_cell_crossing: bool) -> None:
        self.threads_per_core = threads_per_core
        self.cores = cores
        self.allow_cell_crossing = allow_cell_crossing
        self.available = len(cpuset)
        wanted = set(cpuset)
        visited: set[int] = set()
        self.cells: list[_Cell] = []
        for host_cell in topology.cells:
            cell = _Cell(threads_per_core)
            for cpu in host_cell.cpus:
                if cpu.id in visited:
                    continue
                if not cpu.siblings:
                    visited.add(cpu.id)
                    core = [cpu.id] if cpu.id in wanted else []
                else:
                    core = []
                    for thread in cpu.siblings:
                        visited.add(thread)
                        if thread in wanted:
                            core.append(thread)
                if len(core) >= threads_per_core:
                    cell.full.append(core)
                else:
                    cell.fragmented.extend(core)
            self.cells.append(cell)

    def fit_cores(self) -> list[int]:
        """The host thread of each vCPU, in vCPU order; PlacementError if they do not fit."""
        threads, remaining = self._fit_chunks(self.cores, _Cell.not_fragmented_threads)
        if remaining:
            more, remaining = self._fit_chunks(remaining, _Cell.fragmented_threads)
            threads += more
        if remaining and self.allow_cell_crossing:
            more, remaining = self._fit_unbound(remaining)
            threads += more
        if remaining:
            if self.allow_cell_crossing or self.available < self.cores * self.threads_per_core:
                raise PlacementError(f"not enough exclusive threads provided, could not fit {remaining} core(s)")
            raise PlacementError(f"could not fit {remaining} core(s) without crossing numa cell boundaries for "
                                 "individual cores")
        return threads

    def fit_thread(self) -> int:
        for cell in self.cells:
            if not cell.empty():
                thread = cell.thread()
                if thread is not None:
                    return thread
        raise PlacementError("no remaining unassigned threads")

    def _fit_chunks(self, requested: int, allocate: Callable[[_Cell], list[int]]) -> tuple[list[int], int]:
        threads: list[int] = []
        for cell in self.cells:
            while True:
                chunk = allocate(cell)
                if not chunk:
                    break
                threads += chunk
                requested -= 1
                if requested == 0:
                    return threads, 0
        return threads, requested

    def _fit_unbound(self, requested: int) -> tuple[list[int], int]:
        remaining = self.threads_per_core * requested
        threads: list[int] = []
        for cell in self.cells:
            while True:
                chunk = cell.fragmented_threads_up_to(remaining)
                if not chunk:
                    break
                threads += chunk
                remaining -= len(chunk)
                if remaining == 0:
                    return threads, 0
        return threads, int(remaining + 0.5) // self.threads_per_core
