"""A launcher story on a real cloud-hypervisor with any guest: ../shared/vmm's binary (or
CH_BINARY) and the tiny guest (or the user's CH_FIRMWARE / CH_FIRMWARE_DIR and CH_DEMO_IMAGE),
docs/testing.md "Against a real cloud-hypervisor". Only what the VMM does by itself is asserted;
the guest-driven stories run on both VMMs in test_launcher_stories.py."""

from __future__ import annotations

import pytest

from tests.functional.harness import Harness, RealVmm, make_vmi

pytestmark = pytest.mark.real_vmm


@pytest.fixture
def real_vh():
    real = RealVmm.from_environment()
    if isinstance(real, str):
        pytest.skip(f"real cloud-hypervisor: {real}")
    vmi = make_vmi()
    vmi["spec"]["domain"]["memory"]["guest"] = "512Mi"
    vmi["spec"]["domain"]["resources"]["requests"]["memory"] = "512Mi"
    h = Harness(vmi=vmi, real=real)
    yield h
    h.close()


def test_a_real_vm_boots_pauses_resumes_is_killed_and_deleted(real_vh):
    vh = real_vh

    async def story():
        await vh.boot()  # Sync, then the Running event
        await vh.client.sync(vh.vmi)  # a reconcile changes nothing
        domain = await vh.client.get_domain()
        assert domain["Status"]["Status"] == "Running"
        assert domain["Spec"]["Metadata"]["KubeVirt"]["UID"] == vh.vmi["metadata"]["uid"]
        await vh.client.vmi_command("PauseVirtualMachine", vh.vmi)
        await vh.recorder.wait_for_status("Paused", "User", timeout=20)
        since = len(vh.recorder.events)
        await vh.client.vmi_command("UnpauseVirtualMachine", vh.vmi)
        await vh.recorder.wait_for_status("Running", since=since, timeout=20)
        stats = await vh.client.get_domain_stats()
        assert stats["Name"] == f"default_{vh.vmi['metadata']['name']}" and stats["Cpu"]["TimeSet"]
        await vh.client.vmi_command("KillVirtualMachine", vh.vmi)
        await vh.recorder.wait_for_status("Shutoff", "Destroyed", timeout=30)
        await vh.client.vmi_command("DeleteVirtualMachine", vh.vmi)
        final = await vh.recorder.wait_for_deleted(timeout=30)
        assert final.event_type == "MODIFIED"

    vh.run(story())
