"""CPU and memory hotplug of a running VM: `SyncVirtualMachineCPUs` and `SyncVirtualMachineMemory`.

Imported on first use only.

KubeVirt (`@d923fdb815cd`) changes a running VM's vCPUs or memory by live-migrating it into a
pod sized for the new values; on the target, virt-handler's `finalizeMigration` calls
`SyncVirtualMachineCPUs` when the VMI has the `HotVCPUChange` condition and
`SyncVirtualMachineMemory` when it has `HotMemoryChange` (`pkg/virt-handler/migration-target.go`),
each with the updated VMI. virt-launcher then sets the vCPU count to sockets x cores x threads
(`UpdateVCPUs`, `SetVcpusFlags`) and the virtio-mem device's requested size to
`memory.guest` minus the boot memory (`UpdateGuestMemory`). virt-handler reads the guest's
current memory from the Domain's `Spec.CurrentMemory` (`pkg/virt-handler/vm.go`
`updateMemoryInfo`) into `status.memory.guestCurrent`.

On Cloud Hypervisor both are `vm.resize` (`vmm/src/vm.rs@v53.0`): `desired_vcpus` adds vCPUs at
once and asks the guest (ACPI) to offline removed ones, answering 429 while that is pending
(those still count as present: a resize to the count present is taken as nothing to do, so the
launcher waits for a removal to complete, as libvirt does, before it answers);
`desired_ram` asks the guest's virtio-mem driver to plug up to `desired_ram - size`, refuses
the size already requested, and `vm.info`'s `memory_actual_size` grows as the driver plugs.

Failure behaviour: every refusal is a CommandFailed with the reason (in-band for virt-handler,
which then records a warning event, as for the Go launcher).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ch_launcher.manager.settings import CommandFailed

if TYPE_CHECKING:
    from ch_launcher.convert import Plan

VCPU_RETRIES = 20        # Kata retries a vCPU resize 20 times, 20 ms apart, on 429 (clh.go)
VCPU_RETRY_DELAY = 0.02
VCPU_REMOVAL_TIMEOUT = 5.0  # libvirt's wait for a vCPU unplug (QEMU_UNPLUG_TIMEOUT, qemu_hotplug.c)
VIRTIO_MEM_BLOCK = 2 << 20  # VIRTIO_MEM_DEFAULT_BLOCK_SIZE (virtio-devices/src/mem.rs@v53.0)


def desired_vcpus(live: Plan, wanted: Plan) -> int:
    """The vCPU count the new VMI asks for; CommandFailed when the VM cannot have it."""
    have, want = live.config.cpus, wanted.config.cpus
    assert have is not None and want is not None
    if want.boot_vcpus > have.max_vcpus:
        raise CommandFailed(f"failed to update vCPUs: the VMI asks for {want.boot_vcpus} vCPUs, more than the "
                            f"{have.max_vcpus} the VM was started with room for (spec.domain.cpu.maxSockets)")
    if have.topology is not None and want.topology is not None and (
            (want.topology.cores_per_die, want.topology.threads_per_core)
            != (have.topology.cores_per_die, have.topology.threads_per_core)):
        raise CommandFailed("failed to update vCPUs: only sockets can be added or removed on a running VM "
                            "(spec.domain.cpu.cores and threads are fixed at boot)")
    return want.boot_vcpus


def desired_ram(live: Plan, wanted: Plan) -> int:
    """The total guest memory the new VMI asks for (`desired_ram`); CommandFailed when the VM
    cannot have it."""
    have, want = live.config.memory, wanted.config.memory
    if have is None or want is None:
        raise CommandFailed("failed to update Guest Memory: the VM has no memory configuration")
    if have.hotplug_method != "VirtioMem" or not have.hotplug_size:
        raise CommandFailed("failed to update Guest Memory: the VM was started without room for memory hotplug "
                            "(spec.domain.memory.maxGuest)")
    if want.size < have.size:
        raise CommandFailed(f"failed to update Guest Memory: {want.size} bytes asked, less than the {have.size} "
                            "bytes the VM booted with (virtio-mem cannot take boot memory away)")
    if want.size > have.size + have.hotplug_size:
        raise CommandFailed(f"failed to update Guest Memory: {want.size} bytes asked, more than the "
                            f"{have.size + have.hotplug_size} bytes spec.domain.memory.maxGuest left room for")
    if (want.size - have.size) % VIRTIO_MEM_BLOCK:
        raise CommandFailed(f"failed to update Guest Memory: {want.size} bytes asked; what is added to the "
                            f"{have.size} boot bytes must be a multiple of {VIRTIO_MEM_BLOCK >> 20} MiB "
                            "(virtio-mem blocks)")
    return want.size
