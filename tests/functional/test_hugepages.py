"""A hugepage VMI in a launcher pod, on the simulated and the real VMM: its guest memory comes out of
the machine's pool when it boots, all of it (as libvirt preallocates it for QEMU: on the real node
KubeVirt's own launcher took the guest's size from `HugePages_Free` at start, the launcher before
this only the pages the guest touched), goes back when it stops, and a pool short of pages fails
the Sync with the VMM's reason before the guest runs, instead of a SIGBUS mid-run.

Both need the machine's pool (`tests/hugepages.py`: a lock, the setting put back), so root."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.builders import with_memory
from tests.framework import CommandError
from tests.functional.harness import Harness, make_vmi
from tests.functional.pod_fixtures import real_vmm
from tests.functional.pod_sandbox import PodSandbox
from tests.hugepages import hugepage_pool, meminfo

pytestmark = [pytest.mark.root, pytest.mark.timeout(600)]  # the lock may be held by the cluster's node for minutes
POOL = 32  # 2 MiB pages


def hugepage_vmi(guest: str) -> dict[str, Any]:
    return make_vmi(with_memory(guest, hugepages={"pageSize": "2Mi"}))


def test_a_hugepage_guest_takes_all_its_pages_at_boot_and_gives_them_back_when_it_stops(
        launch: Callable[..., Harness]) -> None:
    with hugepage_pool(POOL):
        free = meminfo("HugePages_Free")
        h = launch(hugepage_vmi(f"{POOL * 2}Mi"))
        assert meminfo("HugePages_Free") == free - POOL
        h.close()
        assert meminfo("HugePages_Free") == free


def test_a_pool_short_of_pages_fails_the_sync_before_the_guest_runs(pod: PodSandbox, vmm_kind: str) -> None:
    h = Harness(vmi=hugepage_vmi(f"{POOL * 4}Mi"), pod=pod, real=real_vmm(pod) if vmm_kind == "real" else None)
    pod.vif_cache(h.layout.private_dir)

    async def story() -> None:
        await h.start()
        assert h.client is not None
        with pytest.raises(CommandError) as e:
            await h.client.sync(h.vmi)
        assert "Memory manager error: Failed to prefault memory: Bad address (os error 14)" in str(e.value)
        assert (await h.client.get_domain()) is None
    try:
        with hugepage_pool(POOL):
            free = meminfo("HugePages_Free")
            h.run(story())
            assert meminfo("HugePages_Free") == free
    finally:
        h.close()
