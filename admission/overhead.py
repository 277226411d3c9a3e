"""Memory overhead of a VMI's launcher pod: Cloud Hypervisor's, and KubeVirt's QEMU figure beside it.

The overhead is what the `compute` container needs on top of guest RAM. KubeVirt computes it
in `GetMemoryOverhead` (`kubevirt pkg/hypervisor/kvm/hypervisorbackend.go@d923fdb815cd`) plus a
network term (`kubevirt pkg/network/resources/memory.go@d923fdb815cd`); `contract.md` §13 lists
every term. This module computes both formulas over the same rows (`ROWS`), so they compare
term by term: `kubevirt_overhead()` reproduces KubeVirt's (main and v1.9.0 constants; the pod
mutator uses it when a pod lacks the `kubevirt.io/memory-overhead-bytes` annotation) and
`ch_overhead()` is ours. Every constant says where its value comes from; values marked
*estimate* are reasoned, not measured, and `bench/` is where they get measured.

All figures are bytes (int). Pure: no I/O; bad quantities in the VMI raise `ValueError`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from admission.versions import parse_version
from ch_launcher.convert import check
from ch_launcher.convert.plan import Plan
from ch_launcher.convert.runtime import has_vfio, runtime_processes_needed, vfio_devices
from ch_launcher.kubevirt.quantity import GiB, MiB, quantity_bytes
from ch_launcher.kubevirt.vmi import CPU, VirtualMachineInstance

# --- KubeVirt's constants ---------------------------------------------------------------------


@dataclass(frozen=True)
class KubeVirtConstants:
    """The fixed per-process terms of KubeVirt's KVM backend (`ps` RSS, as its comments say)."""

    name: str
    virt_launcher_monitor: int = 25 * MiB  # VirtLauncherMonitorOverhead
    virt_launcher: int = 100 * MiB  # VirtLauncherOverhead
    virtlogd: int = 25 * MiB  # VirtlogdOverhead
    virtqemud: int = 40 * MiB  # VirtqemudOverhead
    qemu: int = 50 * MiB  # QemuOverhead


# kubevirt pkg/hypervisor/kvm/hypervisorbackend.go@d923fdb815cd: QemuOverhead = "50Mi" (raised from
# 30Mi by commit c822873795, 2026-07-08); every other constant is unchanged since v1.9.0.
KUBEVIRT_MAIN = KubeVirtConstants("main")
KUBEVIRT_V1_9_0 = KubeVirtConstants("v1.9.0", qemu=30 * MiB)
KUBEVIRT_CONSTANTS = {c.name: c for c in (KUBEVIRT_MAIN, KUBEVIRT_V1_9_0)}

# Terms KubeVirt adds under conditions (same file, GetMemoryOverhead and addProbeOverheads).
KV_PER_VCPU = 8 * MiB  # "CPU table overhead (8 MiB per vCPU ...)"
KV_IOTHREAD = 8 * MiB  # "... and 8 MiB per IO thread" (one, unconditionally)
KV_VIDEO = 32 * MiB  # video RAM unless autoattachGraphicsDevice is false
KV_ARM64_PFLASH = 128 * MiB  # two 64 MiB pflash devices of QEMU's virt machine with edk2
VFIO = 1 * GiB  # VFIO locks guest RAM plus the MMIO window (1 GiB on typical x86 hosts)
DOWNWARD_METRICS = 1 * MiB  # memory-backed emptyDir of at most 256 KiB
PROBE_EACH = 10 * MiB  # virt-probe per exec liveness/readiness probe
PROBE_ONCE = 100 * MiB  # once if any exec probe: exec probes spike memory (KubeVirt's comment)
SEV = 256 * MiB  # SEV / SEV-ES / SEV-SNP (libvirt kbase launch_security_sev)
TPM_SWTPM = 53 * MiB  # swtpm: "In `ps`, swtpm has VSZ of 53808 and RSS of 3496, so 53Mi should do"
DEDICATED_OR_GUARANTEED = 100 * MiB  # dedicated CPUs or Guaranteed QoS (no reason given upstream)
PASST = 250 * MiB  # kubevirt pkg/network/resources/memory.go: "passt binary overhead if all ports are forwarded"

# --- Cloud Hypervisor's constants -------------------------------------------------------------

# ch-launcher, the Python process that replaces virt-launcher (and, since it drives CH directly,
# virtlogd and virtqemud): the highest PSS bench/footprint.py measured for a lone launcher
# (27.7 MiB, the image's configuration beside the real VMM, two runs at load 10-20) plus 30 %
# headroom for what the measured VMI lacks (a DHCP server, more disks and NICs, bigger cloud-init
# data), a Sync's transient buffers and a quieter machine, where a lone process shares less
# (about 4 MiB more PSS). The derivation and figures: docs/admission.md (the per-term table) and
# docs/figures.md. `overhead.launcherMiB` overrides it.
CH_LAUNCHER = 36 * MiB

# The cloud-hypervisor process without guest RAM: the highest RSS bench/footprint.py measured for
# the real v53.0 binary beside a running guest, apart from the guest RAM mapping (which the pod's
# memory request already holds), plus 24 % for what the tiny guest cannot show (a real guest
# starts its devices' queue threads and io_uring rings: CH_PER_DEVICE). Figures: docs/admission.md
# and docs/figures.md. `overhead.vmmMiB` overrides it.
CH_VMM = 12 * MiB

# Per vCPU, *estimate*: the kernel's KVM state per vCPU (struct kvm_vcpu, VMCS/VMCB, MMU page
# caches; memcg-accounted, so charged to the pod) is the same as under QEMU, but a CH vCPU
# thread is a Rust thread with a few resident stack pages and the kvm_run mapping, where QEMU's
# threads also carry glibc malloc arenas. Measured (bench/footprint.py, 1 -> 8 vCPUs): a vCPU
# adds a thread and less than 0.1 MiB to the VMM's RSS; the kernel's part is not visible from
# user space (no cgroup of its own here). Half of KubeVirt's 8 MiB, kept until measured.
CH_PER_VCPU = 4 * MiB

# Per virtio device with its own thread in CH (each disk, interface and virtio-fs device runs an
# epoll thread over its queues; vhost-user ones a frontend), *estimate*: resident stack, queue
# bookkeeping and, for disks, io_uring rings and the qcow2 L2/refcount caches. Replaces
# KubeVirt's single 8 MiB IOThread term. Not measurable with the tiny guest, which never drives
# its devices (0 -> 8 idle disks moved the VMM's RSS by less than 0.4 MiB).
CH_PER_DEVICE = 1 * MiB

# The monitor, the compute container's command in every ch-launcher pod (it outlives the launcher
# to stop its VMM and tell virt-handler the VM is gone, and parents the VMM where virt-handler's
# KVM runtime looks for it), and the `virtqemud` VMM spawner (the launcher's child whose memlock
# limit virt-handler raises), for the VMIs that runtime reaches into (`runtime_processes_needed`):
# docs/process-model.md. Each is a small `python -I -S`; measured by bench/process_model.py after
# a Sync: monitor PSS 3.2-3.3 MiB (anonymous 2.8; built-in modules only), spawner 4.8-4.9 MiB
# (4.4), beside a bare `python -I -S` at 2.9-3.0 MiB (2.5) in the same run. Their file pages are
# the launcher's (one interpreter, one image), charged to the pod once; what each adds to the
# pod's memory cgroup is its anonymous memory: 4 and 5 MiB = that + headroom. They replace
# KubeVirt's virt-launcher-monitor (25 MiB) and virtqemud (40 MiB) rows.
CH_MONITOR = 4 * MiB
CH_SPAWNER = 5 * MiB

# VFIO. KubeVirt adds 1 GiB for any VFIO device: libvirt sets QEMU's memlock limit to guest RAM +
# 1 GiB ("VFIO requires all guest RAM to be locked in addition to MMIO memory space ... 1G is
# often the size of reserved MMIO space on x86", hypervisorbackend.go), and KubeVirt sized the
# pod by that limit. A lock limit is not memory the pod uses: the pinned pages are the guest's own
# RAM, already in the pod's limit (they become resident at boot, and stay: no free page
# reporting, convert/memory.py), and device BARs are mapped from the device, not from the pod's
# memory. What VFIO does add in the pod's memory cgroup is the IOMMU's page tables for guest RAM
# (kernel memory; 8 bytes per 4 KiB page when the IOMMU maps 4 KiB pages, i.e. RAM / 512, the
# worst case, and far less with 2 MiB mappings) and, per device, the VMM's VFIO state (config
# space shadow, MSI-X tables, region bookkeeping: CH_PER_DEVICE, *estimate*, not measurable on a
# host without VFIO devices).
CH_VFIO_PER_DEVICE = 1 * MiB

# arm64: CH loads CLOUDHV_EFI.fd into a 4 MiB UEFI region at guest address 0
# (UEFI_SIZE = 0x40_0000, cloud-hypervisor arch/src/aarch64/layout.rs@v53.0), instead of QEMU's
# two 64 MiB pflash devices.
CH_ARM64_UEFI = 4 * MiB


@dataclass(frozen=True)
class Row:
    """One line of the comparison, in KubeVirt's code order."""

    key: str
    label: str


ROWS: tuple[Row, ...] = (
    Row("page_tables", "page tables (memory / 512)"),
    Row("virt_launcher_monitor", "monitor (virt-launcher-monitor | ch-launcher's)"),
    Row("launcher", "launcher process (virt-launcher | ch-launcher)"),
    Row("virtlogd", "virtlogd"),
    Row("virtqemud", "virtqemud (libvirt's | the VMM spawner)"),
    Row("vmm", "VMM process (qemu | cloud-hypervisor)"),
    Row("vcpus", "per vCPU"),
    Row("io", "I/O threads (IOThread | per virtio device)"),
    Row("video", "video RAM"),
    Row("arm64_firmware", "arm64 firmware (pflash | UEFI region)"),
    Row("vfio", "VFIO (lock allowance | IOMMU tables + per device)"),
    Row("downward_metrics", "downward metrics disk"),
    Row("probes", "exec probes (virt-probe)"),
    Row("sev", "SEV / SEV-ES / SEV-SNP"),
    Row("tpm", "TPM (swtpm)"),
    Row("dedicated_or_guaranteed", "dedicated CPUs or Guaranteed QoS"),
    Row("reserved", "spec.domain.memory.reservedOverhead.addedOverhead"),
    Row("ratio", "additionalGuestMemoryOverheadRatio"),
    Row("passt", "network: passt"),
    Row("binding_plugins", "network: binding plugins"),
)
ROW_KEYS = tuple(r.key for r in ROWS)


@dataclass
class Breakdown:
    """One formula's terms (bytes, keyed by `ROWS`) and their sum."""

    formula: str
    terms: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.terms.values())

    def __getitem__(self, key: str) -> int:
        return self.terms.get(key, 0)


@dataclass(frozen=True)
class CHSettings:
    """The overridable CH constants (config `overhead.*`)."""

    launcher: int = CH_LAUNCHER
    vmm: int = CH_VMM

    @classmethod
    def from_mib(cls, launcher_mib: float | None, vmm_mib: float | None) -> CHSettings:
        return cls(launcher=CH_LAUNCHER if launcher_mib is None else math.ceil(launcher_mib * MiB),
                   vmm=CH_VMM if vmm_mib is None else math.ceil(vmm_mib * MiB))


# --- inputs shared by both formulas ---------------------------------------------------------------


def kubevirt_memory_request(vmi: VirtualMachineInstance) -> int:
    """`spec.domain.resources.requests.memory`, 0 when absent: what KubeVirt's page-table term reads.
    virt-api defaults `memory.guest` from the request, never the request from `memory.guest`, so a
    VMI that gives only `memory.guest` gets no page-table term from KubeVirt (seen on a real node:
    256 MiB for a 128Mi VMI, `kubevirt.io/memory-overhead-bytes` 268435456)."""
    requests = vmi.spec.domain.resources.requests
    return quantity_bytes(requests["memory"]) if "memory" in requests else 0


def memory_request(vmi: VirtualMachineInstance) -> int:
    """The memory the guest is given: the request, else `memory.guest`. Cloud Hypervisor's
    page-table term is sized by it (KVM's page tables follow guest RAM, however it was asked for)."""
    requests = vmi.spec.domain.resources.requests
    if "memory" in requests:
        return quantity_bytes(requests["memory"])
    memory = vmi.spec.domain.memory
    if memory is not None and memory.guest is not None:
        return quantity_bytes(memory.guest)
    return 0


def page_tables(mem_request: int) -> int:
    """KubeVirt: `ScaledValue(Kilo)` rounds up to kB, then one byte per 512 bytes, rounded down."""
    return math.ceil(mem_request / 1000) * 1000 // 512


def vcpu_count(cpu: CPU | None, requests: Mapping[str, object], limits: Mapping[str, object]) -> int:
    """KubeVirt's vCPU count: the topology when `spec.domain.cpu` is set (hardware.GetNumberOfVCPUs),
    else the CPU limit, else the CPU request (rounded up, as Quantity.Value() does); at least 1."""
    if cpu is not None:
        n = 0
        for part in (cpu.cores, cpu.sockets, cpu.threads):
            if part:
                n = part if n == 0 else n * part
    elif "cpu" in limits:
        n = quantity_bytes(limits["cpu"])
    elif "cpu" in requests:
        n = quantity_bytes(requests["cpu"])
    else:
        n = 0
    return max(n, 1)


def _probes(vmi: VirtualMachineInstance) -> int:
    live = vmi.spec.livenessProbe is not None and vmi.spec.livenessProbe.exec is not None
    ready = vmi.spec.readinessProbe is not None and vmi.spec.readinessProbe.exec is not None
    return PROBE_EACH * (live + ready) + (PROBE_ONCE if live or ready else 0)


def _has_sev(vmi: VirtualMachineInstance) -> bool:
    ls = vmi.spec.domain.launchSecurity
    return ls is not None and (ls.sev is not None or ls.snp is not None)


def _has_tpm(vmi: VirtualMachineInstance) -> bool:
    tpm = vmi.spec.domain.devices.tpm
    return tpm is not None and tpm.enabled is not False


def _dedicated_or_guaranteed(vmi: VirtualMachineInstance) -> bool:
    cpu = vmi.spec.domain.cpu
    if cpu is not None and cpu.dedicatedCpuPlacement:
        return True
    # WantsToHaveQOSGuaranteed: memory and CPU requests set, non-zero, and equal to their limits
    res = vmi.spec.domain.resources
    for name in ("memory", "cpu"):
        req, lim = res.requests.get(name), res.limits.get(name)
        if req is None or lim is None:
            return False
        if quantity_bytes(req) == 0 or quantity_bytes(req) != quantity_bytes(lim):
            return False
    return True


def _reserved(vmi: VirtualMachineInstance) -> int:
    memory = vmi.spec.domain.memory
    if memory is None or memory.reservedOverhead is None or memory.reservedOverhead.addedOverhead is None:
        return 0
    return quantity_bytes(memory.reservedOverhead.addedOverhead)


def _has_downward_metrics(vmi: VirtualMachineInstance) -> bool:
    return any(v.downwardMetrics is not None for v in vmi.spec.volumes)


def _ratio_term(subtotal: int, ratio: Decimal) -> int:
    """KubeVirt's MultiplyMemory: `int64(float64(ScaledValue(Kilo)) * (ratio - 1))` kB."""
    if ratio == 1:
        return 0
    return int(float(math.ceil(subtotal / 1000)) * float(ratio - 1)) * 1000


def _network(vmi: VirtualMachineInstance, bindings: Mapping[str, int]) -> tuple[int, int]:
    """(passt, binding plugins): passt once if any interface uses it; each distinct registered
    plugin's `computeResourceOverhead.requests.memory` once (unregistered plugins add nothing)."""
    interfaces = vmi.spec.domain.devices.interfaces
    passt = PASST if any(i.passt is not None for i in interfaces) else 0
    seen: set[str] = set()
    plugins = 0
    for i in interfaces:
        if i.binding is not None and i.binding.name not in seen and i.binding.name in bindings:
            seen.add(i.binding.name)
            plugins += bindings[i.binding.name]
    return passt, plugins


def plan_of(vmi: VirtualMachineInstance) -> Plan:
    """The translation `ch_overhead` counts the devices of; ValueError naming what Cloud
    Hypervisor cannot run when there is none (no pod is made for such a VMI)."""
    verdict = check(vmi)
    if verdict.plan is None:
        raise ValueError("Cloud Hypervisor cannot run this VMI: " + "; ".join(p.text for p in verdict.problems))
    return verdict.plan


def io_devices(plan: Plan) -> int:
    """The virtio devices with an I/O path of their own the VM is made with: disks, NICs and
    filesystems, as the translation made them (an SR-IOV NIC, passed through with VFIO, is none:
    `vfio_devices` counts it; the VFIO devices themselves are known only in the pod)."""
    config = plan.config
    return len(config.disks or ()) + len(config.net or ()) + len(config.fs or ())


def guest_ram(vmi: VirtualMachineInstance) -> int:
    """All the guest RAM the VM may map: its memory, or `maxGuest` when memory is hot-pluggable."""
    memory = vmi.spec.domain.memory
    size = memory_request(vmi)
    if memory is not None and memory.guest is not None:
        size = quantity_bytes(memory.guest)
    if memory is not None and memory.maxGuest is not None:
        size = max(size, quantity_bytes(memory.maxGuest))
    return size


def ch_vfio(vmi: VirtualMachineInstance) -> int:
    """Cloud Hypervisor's VFIO term (see CH_VFIO_PER_DEVICE): IOMMU page tables for all guest RAM
    at 4 KiB granularity, plus the VMM's state per device; 0 without VFIO devices."""
    devices = vfio_devices(vmi)
    return page_tables(guest_ram(vmi)) + CH_VFIO_PER_DEVICE * devices if devices else 0


def _add_vmm_independent_terms(t: dict[str, int], vmi: VirtualMachineInstance, ratio: Decimal,
                               bindings: Mapping[str, int] | None, vfio: int | None = None) -> None:
    """The rows both formulas share, in KubeVirt's order after the per-process terms: VFIO to
    reservedOverhead, then the ratio over everything so far (last in the backend), then the
    network terms (added after the backend). `vfio`: the formula's own VFIO term (KubeVirt's when
    None)."""
    t["vfio"] = (VFIO if has_vfio(vmi) else 0) if vfio is None else vfio
    t["downward_metrics"] = DOWNWARD_METRICS if _has_downward_metrics(vmi) else 0
    t["probes"] = _probes(vmi)
    t["sev"] = SEV if _has_sev(vmi) else 0
    t["tpm"] = TPM_SWTPM if _has_tpm(vmi) else 0
    t["dedicated_or_guaranteed"] = DEDICATED_OR_GUARANTEED if _dedicated_or_guaranteed(vmi) else 0
    t["reserved"] = _reserved(vmi)
    t["ratio"] = _ratio_term(sum(t.values()), ratio)
    t["passt"], t["binding_plugins"] = _network(vmi, bindings or {})


# --- the two formulas ---------------------------------------------------------------------------


def kubevirt_overhead(vmi: VirtualMachineInstance, *, constants: KubeVirtConstants = KUBEVIRT_MAIN,
                      arch: str = "amd64", ratio: Decimal = Decimal(1),
                      bindings: Mapping[str, int] | None = None) -> Breakdown:
    """KubeVirt's `CalculateMemoryOverhead` for the KVM backend: what virt-controller adds for QEMU."""
    d = vmi.spec.domain
    res = d.resources
    b = Breakdown(f"KubeVirt {constants.name} (QEMU)")
    t = b.terms
    t["page_tables"] = page_tables(kubevirt_memory_request(vmi))
    t["virt_launcher_monitor"] = constants.virt_launcher_monitor
    t["launcher"] = constants.virt_launcher
    t["virtlogd"] = constants.virtlogd
    t["virtqemud"] = constants.virtqemud
    t["vmm"] = constants.qemu
    t["vcpus"] = KV_PER_VCPU * vcpu_count(d.cpu, res.requests, res.limits)
    t["io"] = KV_IOTHREAD
    t["video"] = KV_VIDEO if d.devices.autoattachGraphicsDevice is not False else 0
    t["arm64_firmware"] = KV_ARM64_PFLASH if arch == "arm64" else 0
    _add_vmm_independent_terms(t, vmi, ratio, bindings)
    return b


def ch_overhead(vmi: VirtualMachineInstance, plan: Plan, *, settings: CHSettings = CHSettings(),
                arch: str = "amd64", ratio: Decimal = Decimal(1), bindings: Mapping[str, int] | None = None
                ) -> Breakdown:
    """The Cloud Hypervisor pod's overhead, row by row against `kubevirt_overhead()`; `plan` is
    the VMI's translation (`convert.check(vmi).plan`), whose devices the VMM runs.

    Kept from KubeVirt because they do not depend on the VMM: page tables (KVM's EPT/shadow
    pages, kernel memory charged to the pod), the downward-metrics emptyDir, exec probes
    (virt-probe runs in `compute` either way), SEV, swtpm (CH talks to the same swtpm over its
    socket), the dedicated-CPU/Guaranteed margin (a pod whose limit equals its request has no
    slack under any VMM; kept until measured), the user's reservedOverhead, the ratio (applied at
    the same point) and the network terms (passt and binding plugins run beside the VMM,
    whichever it is).

    Dropped: virtlogd does not run (CH writes its own log); video RAM (CH has no display device).

    Replaced: virt-launcher-monitor by ch-launcher's monitor (CH_MONITOR), and, for the VMIs
    virt-handler's KVM runtime reaches into (VFIO, dedicated or realtime CPUs, memLock Required:
    `runtime_processes_needed`), virtqemud by its VMM spawner (CH_SPAWNER, dropped for every other
    VMI; docs/process-model.md);
    KubeVirt's 1 GiB of VFIO lock allowance by what VFIO adds to the pod's memory (`ch_vfio`),
    virt-launcher by ch-launcher, QEMU by cloud-hypervisor, 8 MiB per vCPU by
    CH_PER_VCPU, the IOThread by CH_PER_DEVICE per disk, NIC and filesystem of the plan, and QEMU's
    arm64 pflash by CH's UEFI region.

    Hugepages: guest RAM then comes from the hugepages resource, not from memory; the terms are
    the same (page tables included: KVM may split huge pages under dirty logging) and the pod
    mutator applies them as KubeVirt does (memory request = overhead + request - guest).
    """
    d = vmi.spec.domain
    res = d.resources
    b = Breakdown("Cloud Hypervisor")
    t = b.terms
    t["page_tables"] = page_tables(memory_request(vmi))
    t["virt_launcher_monitor"] = CH_MONITOR
    t["launcher"] = settings.launcher
    t["virtlogd"] = 0
    t["virtqemud"] = CH_SPAWNER if runtime_processes_needed(vmi) else 0  # virtqemud runs only for these VMIs
    t["vmm"] = settings.vmm
    t["vcpus"] = CH_PER_VCPU * vcpu_count(d.cpu, res.requests, res.limits)
    t["io"] = CH_PER_DEVICE * io_devices(plan)
    t["video"] = 0
    t["arm64_firmware"] = CH_ARM64_UEFI if arch == "arm64" else 0
    _add_vmm_independent_terms(t, vmi, ratio, bindings, vfio=ch_vfio(vmi))
    return b


def kubevirt_constants_for(version: str | None) -> KubeVirtConstants:
    """The constants to assume for a cluster version when the pod does not say what KubeVirt added.

    Only v1.10+ is known to carry main's larger QEMU term; for anything older, unknown or a
    development build of main (`v1.9.0-...` describes as 1.9), assume v1.9.0's smaller figure:
    subtracting too little leaves the pod slightly large, subtracting too much would starve it.
    """
    try:
        if version and parse_version(version) >= (1, 10, 0):
            return KUBEVIRT_MAIN
    except ValueError:
        pass
    return KUBEVIRT_V1_9_0
