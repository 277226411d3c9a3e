"""Where the VMM keeps the guest's RAM, as the launcher's dirty-rate measurement finds and reads it
(`ch_launcher.dirtyrate`): mapped at boot, one `MADV_DONTDUMP` mapping of the configured size,
readable through /proc by the VMM's parent, gone when the VM stops."""

from __future__ import annotations

import pathlib

import pytest

from ch_launcher.dirtyrate import DirtyRateError, Sample, guest_ram
from tests.contract.harness import Vmm

MIB = 1 << 20


def test_the_guest_ram_is_mapped_at_boot_and_unmapped_at_shutdown(vmm: Vmm) -> None:
    vmm.client.create(vmm.config(memory={"size": 256 * MIB}))
    with pytest.raises(DirtyRateError, match="maps no guest RAM"):
        guest_ram(vmm.proc.pid)  # vm.create only stores the config
    vmm.client.boot()
    regions = guest_ram(vmm.proc.pid)
    assert sum(r.length for r in regions) == 256 * MIB
    sample = Sample(vmm.proc.pid, regions)
    assert len(sample.addresses) == 128
    sample.changed()  # readable again: the VMM's parent may read its memory
    vmm.client.shutdown()
    with pytest.raises(DirtyRateError, match="maps no guest RAM"):
        guest_ram(vmm.proc.pid)


@pytest.mark.parametrize("memory", [
    {"size": 128 * MIB, "shared": True},
    {"size": 128 * MIB, "hotplug_method": "VirtioMem", "hotplug_size": 128 * MIB},
], ids=["shared-memfd", "virtio-mem"])
def test_shared_and_hotpluggable_ram_is_found_whole(vmm: Vmm, memory: dict) -> None:
    vmm.client.create(vmm.config(memory=memory))
    vmm.client.boot()
    total = memory["size"] + memory.get("hotplug_size", 0)
    assert sum(r.length for r in guest_ram(vmm.proc.pid)) == total


def test_sampling_does_not_give_the_vmm_page_tables_for_ram_the_guest_never_touched(vmm: Vmm) -> None:
    """The hot-pluggable part of a VirtioMem VM (KubeVirt's `maxGuest`) is mapped but never
    touched until plugged: sampling it must not make the kernel build page tables in the VMM
    (charged to the pod's memory), which reading it through /proc/PID/mem does."""
    vmm.client.create(vmm.config(memory={"size": 128 * MIB, "hotplug_method": "VirtioMem",
                                         "hotplug_size": 896 * MIB}))
    vmm.client.boot()
    regions = guest_ram(vmm.proc.pid)

    def page_tables() -> int:
        status = pathlib.Path(f"/proc/{vmm.proc.pid}/status").read_text()
        return int(next(line for line in status.splitlines() if line.startswith("VmPTE:")).split()[1]) << 10

    before = page_tables()
    for _ in range(3):
        Sample(vmm.proc.pid, regions).changed()
    assert page_tables() - before < 128 << 10, (before, page_tables())
