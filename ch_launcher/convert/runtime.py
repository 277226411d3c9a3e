"""What virt-handler's KVM runtime will do to this VMI's pod, and what the VMM then needs (pure).

virt-handler runs `VirtRuntime` (kubevirt pkg/hypervisor/kvm/runtime.go@d923fdb815cd) on every
launcher pod, whatever runs inside (docs/process-model.md):

- `AdjustResources` acts when `vmitrait.HasVFIO(vmi)` (a host device, a GPU or an SR-IOV
  interface), `vmi.IsRealtimeEnabled()`, `util.IsSEVVMI(vmi)` or `util.RequiresLockingMemory(vmi)`
  (`memory.reservedOverhead.memLock: Required`): before the VMI runs it sets the memlock limit of
  the launcher's `virtqemud` child to unlimited; once it runs, that of the `qemu-system*` child of
  the launcher's parent, and fails if there is none;
- `HandleHousekeeping` looks for that `qemu-system*` process after every Sync of a VMI with
  `dedicatedCpuPlacement` that is not yet running (its `kvm-pit` thread), and fails without it.

So for these VMIs the launcher's process model must hold (`HostTuning.finds_vmm`). The VMM must
also be able to lock guest memory when it needs to: with VFIO devices Cloud Hypervisor maps (and
the kernel pins) all guest RAM for DMA when `vm.boot` creates the devices (cloud-hypervisor
vmm/src/device_manager.rs@v53.0 `add_vfio_device`: `vfio_dma_map` of every region; virtio-mem
regions are mapped as they are plugged, so hot-pluggable memory counts too); `memLock: Required`
asks for the same limit for devices the VMI does not name. `HostTuning.lock_memory` is that many
bytes; the launcher checks the VMM can lock them before `vm.create` (manager).

Runs after `memory` (it reads the guest size) and `compute` (which sets the CPU tuning).
"""

from __future__ import annotations

from dataclasses import replace

from ch_launcher.convert.context import Translation
from ch_launcher.kubevirt.vmi import VirtualMachineInstance


def vfio_devices(vmi: VirtualMachineInstance) -> int:
    """The VMI's devices passed through with VFIO: host devices, GPUs and SR-IOV interfaces
    (which of them a pod gets, and where, only the pod's device plugins tell)."""
    devices = vmi.spec.domain.devices
    return len(devices.hostDevices) + len(devices.gpus) + sum(1 for i in devices.interfaces if i.sriov is not None)


def has_vfio(vmi: VirtualMachineInstance) -> bool:
    """vmitrait.HasVFIO (kubevirt pkg/vmitrait/vmitrait.go@d923fdb815cd)."""
    return vfio_devices(vmi) > 0


def requires_locking_memory(vmi: VirtualMachineInstance) -> bool:
    """util.RequiresLockingMemory (kubevirt pkg/util/util.go@d923fdb815cd)."""
    memory = vmi.spec.domain.memory
    return memory is not None and memory.reservedOverhead is not None and memory.reservedOverhead.memLock == "Required"


def adjusts_resources(vmi: VirtualMachineInstance) -> bool:
    """Whether virt-handler's `AdjustResources` acts on this VMI."""
    domain = vmi.spec.domain
    realtime = domain.cpu is not None and domain.cpu.realtime is not None
    security = domain.launchSecurity
    sev = security is not None and (security.sev is not None or security.snp is not None)
    return has_vfio(vmi) or realtime or sev or requires_locking_memory(vmi)


def runtime_processes_needed(vmi: VirtualMachineInstance) -> bool:
    """Whether virt-handler's KVM runtime will look for the pod's `virtqemud` and `qemu-system*`
    processes: `AdjustResources` acts, or `HandleHousekeeping` for dedicated CPUs. The pod
    mutator then starts the launcher with `--kubevirt-runtime-processes` and the overhead
    calculator charges the monitor and the spawner; other VMIs need neither."""
    cpu = vmi.spec.domain.cpu
    return adjusts_resources(vmi) or (cpu is not None and cpu.dedicatedCpuPlacement)


def guest_ram(t: Translation) -> int:
    """Every byte of guest RAM the VM may ever have: boot memory, zones, hot-pluggable memory."""
    memory = t.config.memory
    if memory is None:
        return 0
    total = memory.size + (memory.hotplug_size or 0)
    for zone in memory.zones or ():
        total += zone.size + (zone.hotplug_size or 0)
    return total


def configure_runtime(t: Translation) -> None:
    """Fill `t.host.finds_vmm` and `t.host.lock_memory`."""
    finds_vmm = runtime_processes_needed(t.vmi)
    lock = guest_ram(t) if has_vfio(t.vmi) or requires_locking_memory(t.vmi) else 0
    t.host = replace(t.host, finds_vmm=finds_vmm, lock_memory=lock)
