"""Compute: vCPUs, topology, pinning, CPU model and features, clock, machine, chassis, I/O threads,
launch security and architecture (pure).

vCPU count. KubeVirt counts sockets x cores x threads when `spec.domain.cpu` gives any of them
(`hardware.GetNumberOfVCPUs`, kubevirt `pkg/util/hardware/hw_utils.go@d923fdb815cd`); otherwise
the sockets come from the CPU limit, else the CPU request, rounded up like `Quantity.Value()`
(`vcpu.GetCPUTopology`, `pkg/virt-launcher/virtwrap/converter/vcpu/vcpu.go@d923fdb815cd`), and at
least 1. `maxSockets` adds hot-pluggable sockets: Cloud Hypervisor boots sockets x cores x threads
vCPUs and allows up to maxSockets x cores x threads (`max_vcpus`; the topology product must equal
`max_vcpus`, `vmm/src/config.rs@v53.0`).

Pinning. `dedicatedCpuPlacement` places each vCPU on its own host CPU of the compute container's
exclusive cpuset by KubeVirt's rules, and decides the emulator thread's CPUs, realtime vCPUs and
the guest NUMA layout (`pinning`, imported only for these VMIs). At admission there is no pod:
no pinning and no error.

Cloud Hypervisor gives the guest the host CPU profile only, so `host-passthrough` and `host-model`
are accepted and named models and explicit CPU features are not (cloud-hypervisor.md §8).
"""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal
from typing import Any

from ch_launcher.ch.vmconfig import CpusConfig, CpuTopology, PlatformConfig
from ch_launcher.convert.context import Translation

# x86_64 KVM limit of Cloud Hypervisor (`vmm/src/config.rs@v53.0`: max_vcpus <= 8192).
MAX_VCPUS = 8192
# Cloud Hypervisor refuses more than two threads per core on x86_64 (`vmm/src/config.rs@v53.0`).
MAX_THREADS_PER_CORE = 2
HOST_CPU_MODELS = ("", "host-passthrough", "host-model")
SUPPORTED_ARCHITECTURES = ("", "amd64")


def platform(t: Translation) -> PlatformConfig:
    """The VmConfig's `platform` block, created on first use (compute and firmware both fill it)."""
    if t.config.platform is None:
        t.config.platform = PlatformConfig()
    return t.config.platform


def vcpu_topology(t: Translation) -> tuple[int, int, int, int] | None:
    """(sockets, cores, threads, max_sockets) by KubeVirt's rules; None after reporting a problem.

    The CPU limit and request are checked even when the topology does not read them: the
    admission webhook's overhead calculator reads both.
    """
    cpu = t.vmi.spec.domain.cpu
    base = "spec.domain.cpu"
    ok = True
    if cpu is not None:
        for name in ("sockets", "cores", "threads", "maxSockets"):
            if getattr(cpu, name) < 0:
                t.unsupported(f"{base}.{name}", f"{base}.{name} '{getattr(cpu, name)}': must be greater "
                              "than or equal to 0.", "FieldValueInvalid")
                ok = False
    resources = t.vmi.spec.domain.resources
    cpu_quantities: list[tuple[str, Any, Decimal]] = []  # the limit first: it wins over the request
    for kind, given in (("limits", resources.limits), ("requests", resources.requests)):
        if "cpu" in given:
            path = f"spec.domain.resources.{kind}.cpu"
            n = t.quantity(path, given["cpu"])
            if n is None:
                ok = False
            else:
                cpu_quantities.append((path, given["cpu"], n))
    if not ok:
        return None
    if cpu is not None and (cpu.sockets or cpu.cores or cpu.threads):
        sockets, cores, threads = cpu.sockets or 1, cpu.cores or 1, cpu.threads or 1
    else:
        sockets, cores, threads = 1, 1, 1
        if cpu_quantities:
            path, value, n = cpu_quantities[0]
            if n > MAX_VCPUS:
                t.unsupported(path, f"{path} '{value}': {MAX_VCPUS} vCPUs at most", "FieldValueInvalid")
                return None
            # rounded up to whole CPUs, as `resource.Quantity.Value()` does
            sockets = max(int(n.to_integral_value(rounding=ROUND_CEILING)), 1)
    max_sockets = sockets
    if cpu is not None and cpu.maxSockets:
        if cpu.maxSockets < sockets:
            t.unsupported(f"{base}.maxSockets", f"{base}.maxSockets '{cpu.maxSockets}' must be greater than "
                          f"or equal to {base}.sockets '{sockets}'", "FieldValueInvalid")
            return None
        max_sockets = cpu.maxSockets
    return sockets, cores, threads, max_sockets


def configure_compute(t: Translation) -> None:
    """Fill `cpus` (and `platform.chassis_asset_tag`); report CPU, clock and platform features
    Cloud Hypervisor cannot honour."""
    _check_architecture(t)
    _configure_cpus(t)
    _check_cpu_model_and_features(t)
    _check_clock(t)
    _check_machine(t)
    _configure_chassis(t)
    _check_io_threads(t)
    _check_launch_security(t)


def _check_architecture(t: Translation) -> None:
    arch = t.vmi.spec.architecture
    if arch not in SUPPORTED_ARCHITECTURES:
        t.unsupported("spec.architecture", f"spec.architecture '{arch}' is not supported by the Cloud "
                      "Hypervisor backend: only amd64 is built and tested")


def _configure_cpus(t: Translation) -> None:
    topo = vcpu_topology(t)
    if topo is None:
        t.config.cpus = CpusConfig(boot_vcpus=1, max_vcpus=1)  # keeps later configurators working
        return
    sockets, cores, threads, max_sockets = topo
    base = "spec.domain.cpu"
    if threads > MAX_THREADS_PER_CORE:
        t.unsupported(f"{base}.threads", f"{base}.threads '{threads}' is not supported by Cloud Hypervisor: "
                      f"it allows at most {MAX_THREADS_PER_CORE} threads per core on x86_64")
        threads = MAX_THREADS_PER_CORE
    boot = sockets * cores * threads
    maximum = max_sockets * cores * threads
    if maximum > MAX_VCPUS:
        path = f"{base}.maxSockets" if max_sockets != sockets else base
        t.unsupported(path, f"{path}: {maximum} vCPUs exceed Cloud Hypervisor's limit of {MAX_VCPUS}")
        t.config.cpus = CpusConfig(boot_vcpus=1, max_vcpus=1)
        return
    t.config.cpus = CpusConfig(
        boot_vcpus=boot, max_vcpus=maximum,
        topology=CpuTopology(threads_per_core=threads, cores_per_die=cores, dies_per_package=1,
                             packages=max_sockets),
    )
    _configure_pinning(t, sockets, cores, threads)


def _configure_pinning(t: Translation, sockets: int, cores: int, threads: int) -> None:
    cpu = t.vmi.spec.domain.cpu
    if cpu is None:
        return
    base = "spec.domain.cpu"
    if not cpu.dedicatedCpuPlacement:
        # KubeVirt's own webhook requires dedicatedCpuPlacement for both (vmi-create-admitter.go
        # validateNUMA, validateCPURealtime); without it they have nothing to act on.
        if cpu.isolateEmulatorThread:
            t.warn(f"{base}.isolateEmulatorThread", "only meaningful with dedicatedCpuPlacement: ignored")
        return
    from ch_launcher.convert.pinning import configure_dedicated_cpus  # dedicated-CPU VMIs only

    configure_dedicated_cpus(t, sockets, cores, threads)


def _check_cpu_model_and_features(t: Translation) -> None:
    cpu = t.vmi.spec.domain.cpu
    if cpu is None:
        return
    base = "spec.domain.cpu"
    if cpu.model not in HOST_CPU_MODELS:
        t.unsupported(f"{base}.model", f"{base}.model '{cpu.model}' is not supported by Cloud Hypervisor: it offers "
                      "the host CPU only; use host-passthrough or host-model")
    for i, feature in enumerate(cpu.features):
        path = f"{base}.features[{i}]"
        t.unsupported(path, f"{path} ('{feature.name}', policy {feature.policy}) is not supported by Cloud "
                      "Hypervisor: it offers the host CPU's features and cannot add or remove one")


# Timers Cloud Hypervisor emulates on x86_64: a CMOS RTC and the LAPIC timer; KVM's paravirtual
# clock is always exposed; Hyper-V's reference TSC comes with `cpus.kvm_hyperv`. It has no HPET
# and no PIT (no i8254 in `devices/src@v53.0`). Timer choices it cannot make are degradations,
# not errors: the guest still keeps time with what is there, and rejecting them would reject
# KubeVirt's stock Windows preference.
_TIMER_WARNINGS = {
    "hpet": "Cloud Hypervisor emulates no HPET; the guest uses the LAPIC timer and kvmclock",
    "pit": "Cloud Hypervisor emulates no PIT; the guest uses the LAPIC timer and kvmclock",
}


def _check_clock(t: Translation) -> None:
    clock = t.vmi.spec.domain.clock
    if clock is None:
        return
    base = "spec.domain.clock"
    if clock.timezone is not None:
        t.unsupported(f"{base}.timezone", f"{base}.timezone is not supported by Cloud Hypervisor: its RTC "
                      "always runs in UTC")
    if clock.utc is not None and clock.utc.get("offsetSeconds"):
        t.unsupported(f"{base}.utc.offsetSeconds", f"{base}.utc.offsetSeconds is not supported by Cloud "
                      "Hypervisor: its RTC cannot be offset from the host's UTC time")
    timers = clock.timer or {}
    for name, timer in timers.items():
        path = f"{base}.timer.{name}"
        if timer is None:
            continue  # JSON null: absent, as Go decodes a nil pointer
        if not isinstance(timer, dict):
            t.unsupported(path, f"{path} must be an object", "FieldValueInvalid")
            continue
        present = timer.get("present") is not False
        if name in _TIMER_WARNINGS:
            if present:
                t.warn(path, _TIMER_WARNINGS[name])
        elif name == "hyperv":
            if present:
                assert t.config.cpus is not None
                t.config.cpus.kvm_hyperv = True
        elif name == "rtc":
            if not present:
                t.warn(path, "the RTC cannot be removed on Cloud Hypervisor")
            elif timer.get("tickPolicy") or timer.get("track"):
                t.warn(path, "RTC tickPolicy/track are not configurable on Cloud Hypervisor")
        elif name == "kvm":
            if not present:
                t.warn(path, "kvmclock cannot be hidden on Cloud Hypervisor")
        else:
            t.warn(path, f"timer '{name}' is unknown to the Cloud Hypervisor backend and ignored")


def _check_machine(t: Translation) -> None:
    machine = t.vmi.spec.domain.machine
    # KubeVirt's mutating webhook always sets a q35 machine type on amd64 (pkg/defaults/defaults.go
    # @d923fdb815cd setDefaultMachineType); Cloud Hypervisor has one machine of its own, with PCIe.
    if machine is not None and machine.type and "q35" not in machine.type:
        t.warn("spec.domain.machine.type", f"machine type '{machine.type}' has no equivalent: "
               "Cloud Hypervisor has one machine type")


def _configure_chassis(t: Translation) -> None:
    chassis = t.vmi.spec.domain.chassis
    if not chassis:
        return
    base = "spec.domain.chassis"
    asset = chassis.get("asset")
    if asset:
        platform(t).chassis_asset_tag = str(asset)
    dropped = sorted(k for k, v in chassis.items() if k != "asset" and v)
    if dropped:
        t.warn(base, f"only the chassis asset tag reaches the guest's SMBIOS; dropped: {', '.join(dropped)}")


def _check_io_threads(t: Translation) -> None:
    domain = t.vmi.spec.domain
    # Cloud Hypervisor runs an I/O thread per device queue by itself: "shared" and "auto" need
    # nothing; a supplemental pool pinned to extra CPUs has no equivalent.
    if domain.ioThreadsPolicy == "supplementalPool":
        t.warn("spec.domain.ioThreadsPolicy", "supplementalPool is not honoured: Cloud Hypervisor runs one "
               "I/O thread per disk queue")
    elif domain.ioThreadsPolicy not in ("", "shared", "auto"):
        t.unsupported("spec.domain.ioThreadsPolicy", f"spec.domain.ioThreadsPolicy '{domain.ioThreadsPolicy}' "
                      "is not a known I/O threads policy", "FieldValueInvalid")
    if domain.ioThreads:
        t.warn("spec.domain.ioThreads", "I/O thread counts are not configurable on Cloud Hypervisor")


def _check_launch_security(t: Translation) -> None:
    ls = t.vmi.spec.domain.launchSecurity
    if ls is None:
        return
    base = "spec.domain.launchSecurity"
    found = [name for name in ("sev", "snp", "tdx") if getattr(ls, name) is not None]
    for name in found or [""]:
        path = f"{base}.{name}" if name else base
        t.unsupported(path, f"{path} is not supported by the Cloud Hypervisor backend: confidential guests "
                      "need an IGVM payload and a CH build this add-on does not ship")
