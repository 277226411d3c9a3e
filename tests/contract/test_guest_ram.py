"""Where the VMM keeps the guest's RAM, as the launcher's dirty-rate measurement finds and reads it
(`ch_launcher.dirtyrate`): mapped at boot, one `MADV_DONTDUMP` mapping of the configured size,
readable through /proc by the VMM's parent, gone when the VM stops; and hugepage RAM, which
comes from the machine's pool."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable

import pytest

from ch_launcher.ch.api import ChApiError
from ch_launcher.dirtyrate import DirtyRateError, Sample, guest_ram
from tests.contract.harness import Backend, Vmm
from tests.hugepages import PAGE as HUGEPAGE
from tests.hugepages import hugepage_pool, meminfo

MIB = 1 << 20
POOL = 16  # 2 MiB pages: a 32 MiB guest


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


@pytest.mark.root
@pytest.mark.timeout(600)  # the hugepage lock may be held by the cluster's dedicated node for minutes
def test_hugepage_ram_comes_from_the_pool_at_boot_with_prefault_and_a_short_pool_fails_the_boot(
        start: Callable[..., Vmm], backend: Backend) -> None:
    """A hugetlb memfd, as Cloud Hypervisor maps one for `memory.hugepages`: without `prefault` a
    page leaves the pool only when first touched (the tiny guest touches a few); with it, every
    page at boot, and a pool without enough of them fails `vm.boot` before the guest runs (rather
    than a SIGBUS when it touches the page the pool lacks); the pages come back when the VM shuts down."""
    if os.geteuid() != 0:
        pytest.skip("needs root to size the machine's hugepage pool")
    with hugepage_pool(POOL):
        free = meminfo("HugePages_Free")
        lazy = start(backend)
        lazy.client.create(lazy.config(memory={"size": POOL * HUGEPAGE, "hugepages": True, "hugepage_size": HUGEPAGE}))
        lazy.client.boot()
        assert free - meminfo("HugePages_Free") < POOL // 2  # what the guest touched, at most
        lazy.client.shutdown()
        assert meminfo("HugePages_Free") == free

        eager = start(backend)
        eager.client.create(eager.config(memory={"size": POOL * HUGEPAGE, "hugepages": True,
                                                 "hugepage_size": HUGEPAGE, "prefault": True}))
        eager.client.boot()
        assert meminfo("HugePages_Free") == free - POOL
        eager.client.shutdown()
        assert meminfo("HugePages_Free") == free

        short = start(backend)
        short.client.create(short.config(memory={"size": 2 * POOL * HUGEPAGE, "hugepages": True,
                                                 "hugepage_size": HUGEPAGE, "prefault": True}))
        with pytest.raises(ChApiError) as info:
            short.client.boot()
        assert info.value.messages[1:] == ["The VM could not boot", "Memory manager error", "Failed to prefault memory",
                                           "Bad address (os error 14)"], info.value.messages
        assert short.client.info().state == "Created"
        assert meminfo("HugePages_Free") == free


def test_hugepages_without_a_page_size_take_the_default_from_the_hugetlbfs_mount(vmm: Vmm) -> None:
    """Without `hugepage_size` Cloud Hypervisor reads the default size from /dev/hugepages
    (`memory_zone_get_align_size`: statfs), so a machine without that mount fails the boot; the
    launcher always sends the size (the VMI's `hugepages.pageSize`)."""
    vmm.client.create(vmm.config(memory={"size": 32 * MIB, "hugepages": True}))
    if os.path.ismount("/dev/hugepages"):
        vmm.client.boot()
        assert vmm.client.info().state == "Running"
        return
    with pytest.raises(ChApiError) as info:
        vmm.client.boot()
    assert info.value.messages[1:] == ["The VM could not boot", "Memory manager error", "Failed to stat filesystem",
                                       "No such file or directory (os error 2)"], info.value.messages
