"""Does the pod's process tree look as virt-handler's runtime expects? And can the VMM lock
the memory this VM needs? (docs/process-model.md)

`model_problem` checks what virt-handler's lookups will find (kubevirt @d923fdb815cd):
the socket owner (this launcher, `pkg/virt-handler/isolation/detector.go`) must have the
monitor as its parent, a `virtqemud` child (`FindVirtqemudProcess`, pkg/hypervisor/common/
qemu.go), and the VMM must be a child of the monitor named `qemu-system*` (`GetQEMUProcess`,
pkg/hypervisor/kvm/runtime.go). It runs when a VMM has started, so a broken environment is
known before any VMI needs it; a Sync of a VMI that needs the model then fails with the reason
(`HostTuning.finds_vmm`) before anything of the VM is created.

The pids are this process's view (its PID namespace, read in its /proc); in a pod that is the
container's own. virt-handler sees the same tree under the host's pids.

`lock_problem` checks that the VMM may pin `lock_memory` bytes (CAP_IPC_LOCK or its memlock
limit). The limit is inherited: virt-handler raises the spawner's before the first Sync, and a
VMM started after that inherits it. A VMM started before (the one the launcher starts at
start-up, to answer the first Sync sooner) is replaced when the spawner can lock and it cannot.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ch_launcher.ch import procinfo
from ch_launcher.ch.virtqemud import SPAWNER_NAME

if TYPE_CHECKING:
    from ch_launcher.ch.process import VmmSpawning

QEMU_PREFIX = "qemu-system"
DOC = "docs/process-model.md"


def model_problem(spawning: VmmSpawning | None, vmm_pid: int) -> str | None:
    """Why virt-handler would not find what it looks for in this pod; None when all is there."""
    if spawning is None:
        return ("the launcher runs without its VMM spawner (no --kubevirt-runtime-processes, which the pod "
                "mutator sets for such VMIs), so the VMM is the launcher's own child; virt-handler looks for it "
                "among the children of the launcher's parent")
    me = os.getpid()
    if not spawning.subreaper:
        return (f"the monitor (pid {spawning.monitor_pid}) could not become a child subreaper, so the VMM is "
                "not reparented to it")
    if os.getppid() != spawning.monitor_pid:
        return f"the launcher's parent is pid {os.getppid()}, not the monitor (pid {spawning.monitor_pid})"
    spawner = spawning.spawner.pid
    if procinfo.comm(spawner) != SPAWNER_NAME or procinfo.parent(spawner) != me:
        return (f"the launcher's child {spawner} is named {procinfo.comm(spawner)!r} (parent "
                f"{procinfo.parent(spawner)}), not {SPAWNER_NAME!r} under pid {me}")
    vmm_parent, vmm_name = procinfo.parent(vmm_pid), procinfo.comm(vmm_pid)
    if vmm_parent != spawning.monitor_pid:
        return (f"the VMM (pid {vmm_pid}) is a child of pid {vmm_parent}, not of the launcher's parent "
                f"(the monitor, pid {spawning.monitor_pid}): is another subreaper between them?")
    if not (vmm_name or "").startswith(QEMU_PREFIX):
        return f"the VMM (pid {vmm_pid}) is named {vmm_name!r}, not {QEMU_PREFIX}*"
    return None


def describe_model(spawning: VmmSpawning | None, vmm_pid: int) -> str:
    """One line for the log: who is who."""
    if spawning is None:
        return f"launcher {os.getpid()} -> VMM {vmm_pid} (no monitor)"
    return (f"monitor {spawning.monitor_pid} -> launcher {os.getpid()} -> {SPAWNER_NAME} {spawning.spawner.pid}; "
            f"monitor {spawning.monitor_pid} -> VMM {vmm_pid} ({procinfo.comm(vmm_pid)})")


def lock_problem(vmm_pid: int, size: int) -> str | None:
    """Why the VMM cannot lock `size` bytes (None: it can)."""
    if procinfo.can_lock(vmm_pid, size):
        return None
    return (f"the VMM (pid {vmm_pid}) may lock {procinfo.describe_memlock(vmm_pid)}, but this VM needs {size} "
            f"bytes of guest memory locked at boot (VFIO DMA mapping, or memLock: Required). virt-handler raises "
            f"the memlock limit of the launcher's {SPAWNER_NAME} child before the first Sync (kubevirt "
            f"pkg/hypervisor/kvm/runtime.go AdjustResources) and did not; see {DOC}")


def spawner_can_lock(spawning: VmmSpawning | None, size: int) -> bool:
    return spawning is not None and procinfo.can_lock(spawning.spawner.pid, size)
