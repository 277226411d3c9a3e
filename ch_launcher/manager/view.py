"""How the manager's facts read to virt-handler: the Domain view, and texts for failures."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

from ch_launcher.kubevirt.domain import (
    DomainView,
    GracePeriod,
    GuestAgentView,
    GuestPanicInfo,
    LifeCycle,
    Reason,
    VcpuSlot,
)
from ch_launcher.lifecycle import VmState

if TYPE_CHECKING:
    from ch_launcher.convert import Plan
    from ch_launcher.kubevirt.domain_view import MigrationView
    from ch_launcher.kubevirt.vmi import VirtualMachineInstance


def domain_view(vmi: VirtualMachineInstance, plan: Plan, status: LifeCycle, reason: Reason, *, grace: GracePeriod,
                panic_count: int, current_memory: int | None = None, migration: MigrationView | None = None,
                panic_info: GuestPanicInfo | None = None, agent: GuestAgentView | None = None) -> DomainView:
    """The Domain of the VM `plan` describes, made from `vmi`, in `status`/`reason`.
    `Memory` is the boot memory plus what virtio-mem was asked for; `CurrentMemory` is
    `current_memory` (vm.info's memory_actual_size) once known, else the same. `agent`: the guest
    agent's channel and what it told (None: no channel)."""
    cfg = plan.config
    vcpus, memory = vm_size(plan)
    max_vcpus = cfg.cpus.max_vcpus if cfg.cpus else vcpus
    if cfg.memory is not None and cfg.memory.hotplugged_size:
        memory += cfg.memory.hotplugged_size
    topo = cfg.cpus.topology if cfg.cpus else None
    if topo is not None:
        sockets, cores, threads = topo.packages, topo.cores_per_die * topo.dies_per_package, topo.threads_per_core
    else:
        sockets, cores, threads = max_vcpus, 1, 1  # KubeVirt's default: one socket per vCPU
    payload = cfg.payload
    bootloader = vmi.spec.domain.firmware.bootloader if vmi.spec.domain.firmware else None
    return DomainView(
        name=vmi.metadata.name, namespace=vmi.metadata.namespace, uid=vmi.metadata.uid,
        status=status, reason=reason, grace=grace,
        sockets=sockets, cores=cores, threads=threads, vcpus=max_vcpus,
        vcpu_slots=vcpu_slots(vmi, vcpus, max_vcpus, cores * threads), memory_bytes=memory,
        current_memory_bytes=current_memory,
        disks=tuple(plan.disks), interfaces=tuple(plan.interfaces), host_devices=tuple(plan.host_devices),
        acpi=acpi_enabled(vmi),
        uuid=vm_uuid(plan, vmi), machine=vmi.spec.domain.machine.type if vmi.spec.domain.machine else "",
        loader=(payload.firmware or "") if payload and bootloader is not None and bootloader.efi is not None else "",
        kernel=(payload.kernel or "") if payload else "", initrd=(payload.initramfs or "") if payload else "",
        kernel_args=(payload.cmdline or "") if payload else "", panic_count=panic_count, panic_info=panic_info,
        migration=migration, agent=agent,
        panic_models=("pvpanic",) if cfg.pvpanic else ())


def vcpu_slots(vmi: VirtualMachineInstance, enabled: int, maximum: int, per_socket: int) -> tuple[VcpuSlot, ...]:
    """`Spec.VCPUs` as virt-launcher's converter lists them when the VMI has `maxSockets`
    (kubevirt `pkg/virt-launcher/virtwrap/converter/compute/cpu.go` `configureCPUTopology`
    @d923fdb815cd): one entry per possible vCPU, the first `enabled` on, those past the first
    socket hot-pluggable, and libvirt's live `order` (1, 2, ...) on the enabled ones. Without
    `maxSockets` there is no list (and `maximum == enabled`)."""
    cpu = vmi.spec.domain.cpu
    if cpu is None or not cpu.maxSockets:
        return ()
    return tuple(VcpuSlot(id=n, enabled=n < enabled, hotpluggable=n >= per_socket, order=n + 1 if n < enabled else 0)
                 for n in range(maximum))


def vm_size(plan: Plan) -> tuple[int, int]:
    """The VM's boot (current) vCPUs and memory in bytes, as its VmConfig says (1 and 0 when unset);
    with memory zones (NUMA passthrough) the memory is theirs."""
    cfg = plan.config
    memory = 0 if cfg.memory is None else cfg.memory.size + sum(z.size for z in cfg.memory.zones or ())
    return (cfg.cpus.boot_vcpus if cfg.cpus else 1), memory


# libvirt's errors as the Go launcher passes them on (kubevirt pkg/virt-launcher/virtwrap/errors
# FormatLibvirtError@d923fdb815cd: "LibvirtError(Code=%d, Domain=%d, Message='%s')"); codes and
# domains from libvirt's virerror.h: VIR_ERR_NO_DOMAIN 42, VIR_ERR_OPERATION_INVALID 55,
# VIR_ERR_AGENT_UNRESPONSIVE 86; VIR_FROM_QEMU 10, VIR_FROM_DOMAIN 20.
_AGENT_ERRORS: dict[VmState, tuple[int, int, str]] = {
    VmState.RUNNING: (86, 10, "Guest agent is not responding: QEMU guest agent is not connected"),
    VmState.PAUSED: (55, 10, "Requested operation is not valid: domain is not running"),
    VmState.PANICKED: (55, 10, "Requested operation is not valid: domain is not running"),
    VmState.DOWN: (55, 20, "Requested operation is not valid: domain is not running"),
}


def no_guest_agent(state: VmState, domain_name: str) -> str:
    """What the Go launcher answers a guest-agent command (Freeze, Unfreeze, GuestPing, Exec) of a
    domain whose agent is not connected: libvirt's error for the domain's state, formatted as
    virt-launcher formats libvirt errors.

    virt-launcher's FreezeVMI asks the agent for `guest-fsfreeze-status` first and UnfreezeVMI
    thaws through it (pkg/virt-launcher/virtwrap/storage/fsfreeze.go@d923fdb815cd); libvirt
    refuses both alike: no domain (42), a domain not running (55: paused or crashed, from the
    QEMU driver's agent check; shut off, from the domain's own check), or a running domain whose
    agent channel is not connected (86, qemuDomainAgentAvailable)."""
    code, domain, message = _AGENT_ERRORS.get(
        state, (42, 10, f"Domain not found: no domain with matching name '{domain_name}'"))
    return f"LibvirtError(Code={code}, Domain={domain}, Message='{message}')"


def acpi_enabled(vmi: VirtualMachineInstance | None) -> bool:
    """Cloud Hypervisor always gives x86 guests ACPI; only an explicit `acpi.enabled: false` says no."""
    features = vmi.spec.domain.features if vmi is not None else None
    return not (features is not None and features.acpi is not None and features.acpi.enabled is False)


def vm_uuid(plan: Plan, vmi: VirtualMachineInstance) -> str:
    platform = plan.config.platform
    if platform is not None and platform.system_uuid:
        return platform.system_uuid
    firmware = vmi.spec.domain.firmware
    return firmware.uuid if firmware is not None and firmware.uuid else ""


def describe_exit(code: int | None) -> str:
    if code is None:
        return "did not exit"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"
