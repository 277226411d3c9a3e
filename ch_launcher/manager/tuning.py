"""CPU tuning of the pod's threads for dedicated-CPU and realtime VMIs (imported only for those).

Housekeeping (`isolateEmulatorThread`). KubeVirt pins vCPU i to its own host CPU (the VmConfig's
`cpus.affinity` does that here: Cloud Hypervisor sets each vCPU thread's affinity when it starts
it) and puts every other thread of the compute container on the emulator CPU(s): virt-handler's
`configureHousekeepingCgroup` (kubevirt pkg/hypervisor/kvm/runtime.go@d923fdb815cd) moves each
thread of the container's cgroup whose name is not QEMU's `CPU <n>/KVM` into a `housekeeping`
cpuset holding `Spec.CPUTune.EmulatorPin`. It does so only when the Domain carries an
EmulatorPin, which ours never does: Cloud Hypervisor's vCPU threads are named `vcpu<n>`, so that
code would move them onto the emulator CPU too. The launcher therefore sets the affinity of
those threads itself (same uid, no capability needed): the monitor's, its own, the spawner's and
the VMM's except its vCPUs, before `vm.create` (so the device threads the VMM starts at boot
inherit it) and again after boot (threads that appeared meanwhile).

Realtime. virt-handler gives QEMU's vCPU threads SCHED_FIFO priority 1 (`configureVCPUScheduler`,
pkg/hypervisor/kvm/realtime.go) by their `CPU <n>/KVM` names, so it finds none of Cloud
Hypervisor's. The launcher sets SCHED_FIFO priority 1 on the `vcpu<n>` threads of the realtime
mask itself, which needs CAP_SYS_NICE: root VMIs' compute container has it (KubeVirt adds
SYS_NICE for them, pkg/virt-controller/services/rendercontainer.go `requiredCapabilities`), non-root
ones do not, and then the vCPUs stay SCHED_OTHER (logged; the webhook warned at admission).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ch_launcher.ch import procinfo

if TYPE_CHECKING:
    from ch_launcher.ch.process import VmmSpawning
    from ch_launcher.convert.plan import HostTuning

log = logging.getLogger(__name__)
VCPU_THREAD = re.compile(r"^vcpu(\d+)$")  # cloud-hypervisor vmm/src/cpu.rs@v53.0: thread "vcpu{id}"
REALTIME_PRIORITY = 1  # virt-handler's SchedParam{Priority: 1} for vCPUs


def _pod_pids(spawning: VmmSpawning | None, vmm_pid: int) -> list[int]:
    pids = [os.getpid(), vmm_pid]
    if spawning is not None:
        pids += [spawning.monitor_pid, spawning.spawner.pid]
    return pids


def pin_housekeeping(spawning: VmmSpawning | None, vmm_pid: int, cpus: Iterable[int]) -> list[int]:
    """Every thread of the pod but the VMM's vCPUs onto `cpus`; the tids that could not be moved."""
    cpus = set(cpus)
    failed = []
    moved = 0
    for pid in _pod_pids(spawning, vmm_pid):
        for tid, name in procinfo.threads(pid):
            if pid == vmm_pid and VCPU_THREAD.match(name):
                continue
            try:
                os.sched_setaffinity(tid, cpus)
                moved += 1
            except OSError as e:  # a kernel worker in the VMM's group may refuse (PF_NO_SETAFFINITY)
                log.debug("cannot set the affinity of thread %d (%s): %s", tid, name, e)
                failed.append(tid)
    log.info("housekeeping: %d thread(s) on CPUs %s%s", moved, ",".join(map(str, sorted(cpus))),
             f"; {len(failed)} refused" if failed else "")
    return failed


def make_realtime(vmm_pid: int, vcpus: Iterable[int]) -> tuple[list[int], str | None]:
    """SCHED_FIFO priority 1 for the threads of `vcpus`; (tids done, why not all were done)."""
    wanted = set(vcpus)
    done: list[int] = []
    why = None
    for tid, name in procinfo.threads(vmm_pid):
        m = VCPU_THREAD.match(name)
        if m is None or int(m.group(1)) not in wanted:
            continue
        try:
            os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(REALTIME_PRIORITY))
            done.append(tid)
        except OSError as e:
            why = (f"vCPU thread {name} stays SCHED_OTHER: {e.strerror} (SCHED_FIFO needs CAP_SYS_NICE, which "
                   "KubeVirt grants only root VMIs' launcher)")
    return done, why


def after_boot(spawning: VmmSpawning | None, vmm_pid: int, host: HostTuning) -> None:
    if host.housekeeping_cpus:
        pin_housekeeping(spawning, vmm_pid, host.housekeeping_cpus)
    if host.realtime_vcpus:
        done, why = make_realtime(vmm_pid, host.realtime_vcpus)
        if why:
            log.warning("realtime: %s", why)
        else:
            log.info("realtime: %d vCPU thread(s) SCHED_FIFO priority %d", len(done), REALTIME_PRIORITY)
