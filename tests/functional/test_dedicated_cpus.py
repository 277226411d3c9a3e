"""Dedicated CPUs in a launcher pod, on the simulated and the real VMM: what the VM config says and
where the pod's threads end up (docs/process-model.md "Dedicated CPUs and the housekeeping
cgroup"): each vCPU on its own CPU of the pod's cpuset, every other thread of the pod on the
emulator CPU; realtime vCPUs SCHED_FIFO where the launcher may; a guest NUMA node per host cell
with hugepage memory bound to it.

This machine has two CPUs and one NUMA node: one vCPU on CPU 0, the emulator thread on CPU 1, and
a one-node guest NUMA layout (the multi-node mapping is checked in tests/unit/convert/test_pinning.py).
"""

from __future__ import annotations

import contextlib
import os
import pathlib

import pytest

from tests.builders import with_cpu
from tests.framework import FAKE_CH
from tests.functional import kubevirt_runtime as vh
from tests.functional.harness import Harness, RealVmm, make_vmi
from tests.functional.pod_fixtures import real_vmm, real_vmm_reason, vmm_info
from tests.hugepages import surplus_hugepages

CPUS = sorted(os.sched_getaffinity(0))
pytestmark = pytest.mark.skipif(len(CPUS) < 2, reason="needs two CPUs: one for the vCPU, one for the emulator")


def dedicated_vmi(**cpu) -> dict:
    return make_vmi(with_cpu(**{"cores": 1, "dedicatedCpuPlacement": True, "isolateEmulatorThread": True, **cpu}))


def threads(pid: int) -> dict[str, set[int]]:
    """Thread name -> CPUs it may run on (several threads of one name are merged)."""
    out: dict[str, set[int]] = {}
    for name in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            comm = pathlib.Path(f"/proc/{pid}/task/{name}/comm").read_text().strip()
            out.setdefault(comm, set()).update(os.sched_getaffinity(int(name)))
    return out


def sent_config(h: Harness) -> dict:
    """The VmConfig the VMM holds: vm.info on the real one, the request log of the simulated one."""
    if h.ch_binary == str(FAKE_CH):
        return h.requests("vm.create")[-1]["body"]
    return vmm_info(h)["config"]


def test_each_vcpu_gets_its_cpu_and_every_other_thread_of_the_pod_the_emulator_cpu(launch):
    h = launch(dedicated_vmi())
    vcpu_cpu, emulator_cpu = CPUS[0], CPUS[1]
    assert sent_config(h)["cpus"]["affinity"] == [{"vcpu": 0, "host_cpus": [vcpu_cpu]}]
    owner, monitor = vh.socket_owner(str(h.layout.cmd_socket))
    vmm = vh.find_qemu(monitor)
    vmm_threads = threads(vmm)
    assert vmm_threads.pop("vcpu0") == {vcpu_cpu}  # Cloud Hypervisor placed it (cpus.affinity), as the simulation does
    vmm_threads.pop("kvm-nx-lpage-re", None)  # KVM's worker in the VMM's group may refuse affinity
    for pid, found in [(vmm, vmm_threads), (owner, threads(owner)), (monitor, threads(monitor)),
                       (vh.find_virtqemud(owner), threads(vh.find_virtqemud(owner)))]:
        assert found and all(cpus == {emulator_cpu} for cpus in found.values()), (pid, found)
    assert "housekeeping:" in h.log_text()


@pytest.fixture
def root_real_harness():
    """A Harness on the real VMM with the tiny guest and the launcher as root (it then has
    CAP_SYS_NICE, as KubeVirt's compute container of a root VMI has SYS_NICE)."""
    real = RealVmm.from_environment(tiny_guest=True)
    if isinstance(real, str):
        pytest.skip(real)
    made = []

    def make(vmi: dict) -> Harness:
        h = Harness(vmi=vmi, real=real)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


@pytest.mark.real_vmm
def test_realtime_vcpus_run_sched_fifo_where_the_launcher_has_cap_sys_nice(root_real_harness):
    h = root_real_harness(dedicated_vmi(realtime={"mask": "0"}))
    h.run(h.boot())
    vmm = vh.find_qemu(h.launcher.pid)
    vcpu = next(int(t) for t in os.listdir(f"/proc/{vmm}/task")
                if pathlib.Path(f"/proc/{vmm}/task/{t}/comm").read_text().strip() == "vcpu0")
    assert os.sched_getscheduler(vcpu) == os.SCHED_FIFO and os.sched_getparam(vcpu).sched_priority == 1
    assert "realtime: 1 vCPU thread(s) SCHED_FIFO priority 1" in h.log_text()


@pytest.mark.real_vmm
def test_in_a_non_root_pod_realtime_vcpus_stay_sched_other_and_the_launcher_says_why(pod):
    reason = real_vmm_reason()
    if reason:
        pytest.skip(reason)
    h = Harness(vmi=dedicated_vmi(realtime={"mask": "0"}), pod=pod, real=real_vmm(pod))
    try:
        h.run(h.boot())
        vmm = vh.find_qemu(h.launcher.pid)
        vcpu = next(int(t) for t in os.listdir(f"/proc/{vmm}/task")
                    if pathlib.Path(f"/proc/{vmm}/task/{t}/comm").read_text().strip() == "vcpu0")
        assert os.sched_getscheduler(vcpu) == os.SCHED_OTHER
        assert "realtime: vCPU thread vcpu0 stays SCHED_OTHER: Operation not permitted" in h.log_text()
    finally:
        h.close()


@pytest.mark.timeout(600)  # the hugepage lock may be held by the cluster's dedicated node for minutes
def test_numa_passthrough_gives_the_guest_the_hosts_node_with_hugepage_memory_bound_to_it(launch):
    vmi = dedicated_vmi(isolateEmulatorThread=False, numa={"guestMappingPassthrough": {}})
    vmi["spec"]["domain"]["memory"] = {"guest": "64Mi", "hugepages": {"pageSize": "2Mi"}}
    vmi["spec"]["domain"]["resources"]["requests"]["memory"] = "64Mi"
    with surplus_hugepages(64):
        h = launch(vmi)
        config = sent_config(h)
        zones = config["memory"]["zones"]
        assert [(z["id"], z["size"], z["hugepages"], z["hugepage_size"], z["host_numa_node"]) for z in zones] == [
            ("numa0", 64 << 20, True, 2 << 20, 0)]
        assert config["memory"]["size"] == 0
        assert [(n["guest_numa_id"], n["cpus"], n["memory_zones"]) for n in config["numa"]] == [(0, [0], ["numa0"])]
        domain = h.run(h.client.get_domain())
        assert domain["Spec"]["Memory"]["Value"] == 64 << 20  # the zones' memory, not memory.size
