"""The VMM's vCPU threads, where the launcher's GetDomainStats reads each vCPU's run time, delay
and CPU affinity (`ch_launcher.stats`; virt-handler's `kubevirt_vmi_vcpu_*` metrics and
`kubevirt_vmi_node_cpu_affinity`): Cloud Hypervisor runs vCPU n in a thread named `vcpu<n>`
(`vmm/src/cpu.rs@v53.0`, `start_vcpu`), one per vCPU present, started at boot and at a growing
`vm.resize`, gone when the VM stops."""

from __future__ import annotations

import time

from tests.contract.harness import Vmm
from tests.contract.vcpu_support import vcpu_threads


def wait_for_threads(vmm: Vmm, expected: list[str], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while (found := vcpu_threads(vmm.proc.pid)) != expected:
        assert time.monotonic() < deadline, f"vCPU threads {found}, expected {expected}"
        time.sleep(0.05)


def test_each_vcpu_runs_in_a_thread_named_for_it_from_boot_to_shutdown(vmm: Vmm) -> None:
    vmm.client.create(vmm.config(cpus={"boot_vcpus": 2, "max_vcpus": 3}))
    assert vcpu_threads(vmm.proc.pid) == []  # vm.create only stores the config
    vmm.client.boot()
    wait_for_threads(vmm, ["vcpu0", "vcpu1"])
    vmm.client.pause()
    assert vcpu_threads(vmm.proc.pid) == ["vcpu0", "vcpu1"]  # paused vCPUs keep their threads
    vmm.client.resume()
    vmm.client.resize(desired_vcpus=3)
    wait_for_threads(vmm, ["vcpu0", "vcpu1", "vcpu2"])
    vmm.client.shutdown()
    wait_for_threads(vmm, [])
