"""A launcher pod without access to /dev/kvm (its VMI was not given the kvm device plugin's
resource): the VMM, simulated or real, exits at start with Cloud Hypervisor's error chain, and
the launcher's Sync fails with it, staying up for virt-handler's next try."""

from __future__ import annotations

import pytest

from tests.functional.harness import Harness, make_vmi
from tests.functional.pod_fixtures import real_vmm
from tests.functional.pod_sandbox import PodSandbox, missing_requirements

pytestmark = [pytest.mark.root, pytest.mark.timeout(60)]


def test_without_kvm_access_the_vmm_exits_at_start_and_sync_says_why(vmm_kind):
    reason = missing_requirements()
    if reason:
        pytest.skip(reason)
    with PodSandbox(kvm_mode=0o600) as pod:
        vh = Harness(vmi=make_vmi(), pod=pod, real=real_vmm(pod) if vmm_kind == "real" else None)
        try:
            vh.run(vh.start())
            reply = vh.run(vh.client.sync(vh.vmi, check=False))
            assert not reply.success
            assert "cloud-hypervisor did not start" in reply.message
            assert ("Failed to open hypervisor interface (is hypervisor interface available?)\n  1: Failed to create "
                    "Vm\n  2: Permission denied (os error 13)") in reply.message, reply.message
            assert vh.launcher.poll() is None
        finally:
            vh.close()
