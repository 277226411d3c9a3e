"""Firmware and boot: BIOS, EFI, direct kernel boot, SMBIOS, and `spec.domain.features` (pure).

- BIOS (KubeVirt's default): rust-hypervisor-firmware, `<firmware-dir>/hypervisor-fw`. Cloud
  Hypervisor has no SeaBIOS; this firmware boots EFI-bootable disk images without EFI variables.
- EFI: Cloud Hypervisor's edk2 build, `<firmware-dir>/CLOUDHV.fd`. Secure Boot needs SMM and
  enrolled keys, which Cloud Hypervisor does not emulate (cloud-hypervisor.md §8): rejected, and
  KubeVirt treats a missing `secureBoot` as true when `efi` is set. `persistent` EFI variables
  need an NVRAM file the firmware cannot write back: rejected.
- `kernelBoot.container`: direct kernel boot from the files the kernel-boot container exposes at
  `<container-disk-dir>/kernel-boot/<basename>` (kubevirt `pkg/container-disk/container-disk.go
  @d923fdb815cd`: `GetKernelBootArtifactPathFromLauncherView`). A payload may not have firmware
  and a kernel at once (`vmm/src/config.rs@v53.0`), so the kernel wins and a bootloader is ignored.
- `firmware.uuid`/`serial` and the SMBIOS values virt-handler sends (`LauncherOptions.smbios`) go
  to `platform`, as KubeVirt's sysinfo does (`converter/compute/sysinfo.go@d923fdb815cd`).
- Each firmware, kernel and initrd file becomes a `RequireFile` step: a missing file is an error
  naming it, before the VMM is started.

Features: Cloud Hypervisor always exposes ACPI and the (x)APIC, and the KVM paravirtual
features of the host; it cannot hide KVM and has no SMM. `hyperv` enlightenments map to
`cpus.kvm_hyperv`, which turns on a fixed set (`arch/src/x86_64/mod.rs@v53.0`): relaxed timing,
VAPIC, spinlock hints, VP index and runtime, SynIC and synthetic timers, reference TSC,
frequencies, TLB flush and IPI hints. Requested enlightenments outside that set are warnings.
"""

from __future__ import annotations

import posixpath
import uuid
from typing import Any

from ch_launcher.ch.vmconfig import PayloadConfig
from ch_launcher.convert.compute import platform
from ch_launcher.convert.context import Translation
from ch_launcher.convert.plan import RequireFile

BIOS_FIRMWARE = "hypervisor-fw"
EFI_FIRMWARE = "CLOUDHV.fd"
KERNEL_BOOT_DIR = "kernel-boot"

# Enlightenments `cpus.kvm_hyperv` provides on Cloud Hypervisor v53 (arch/src/x86_64/mod.rs@v53.0,
# CPUID leaves 0x40000003/0x40000004), by KubeVirt's names (api/core/v1 FeatureHyperv).
HYPERV_PROVIDED = frozenset({
    "relaxed", "vapic", "spinlocks", "vpindex", "runtime", "synic", "synictimer", "frequencies",
    "tlbflush", "ipi",
})


def kernel_boot_path(t: Translation, artifact: str) -> str:
    """Where the kernel-boot container's file appears inside the launcher."""
    return f"{t.env.container_disk_dir}/{KERNEL_BOOT_DIR}/{posixpath.basename(artifact)}"


def configure_firmware(t: Translation) -> None:
    """Fill `payload` and the SMBIOS part of `platform`; report firmware and features Cloud
    Hypervisor cannot honour."""
    firmware = t.vmi.spec.domain.firmware
    if not _configure_kernel_boot(t):
        _configure_bootloader(t)
    elif firmware is not None and firmware.bootloader is not None:
        _check_bootloader_options(t)
        t.warn("spec.domain.firmware.bootloader", "ignored: the kernel is booted directly, without firmware")
    _configure_smbios(t)
    if firmware is not None and firmware.acpi is not None:
        path = "spec.domain.firmware.acpi"
        t.unsupported(path, f"{path} is not supported by Cloud Hypervisor: it cannot add SLIC or MSDM "
                      "tables to the guest's ACPI tables")
    _check_features(t)


def _configure_kernel_boot(t: Translation) -> bool:
    """Direct kernel boot, if asked for. Returns whether the payload is a kernel."""
    firmware = t.vmi.spec.domain.firmware
    kb = firmware.kernelBoot if firmware else None
    if kb is None:
        return False
    base = "spec.domain.firmware.kernelBoot"
    container = kb.container
    if container is None:
        if kb.kernelArgs:
            t.unsupported(f"{base}.kernelArgs", f"{base}.kernelArgs can be provided only with an external kernel "
                          f"({base}.container)", "FieldValueInvalid")
        return False
    if not container.kernelPath:
        if container.initrdPath:
            path = f"{base}.container.kernelPath"
            t.unsupported(path, f"{path} is required by Cloud Hypervisor: an initrd alone cannot be booted "
                          "directly", "FieldValueRequired")
        else:
            path = f"{base}.container"
            t.unsupported(path, f"{path} must set kernelPath (and optionally initrdPath)", "FieldValueRequired")
        return True
    ok = True
    for name in ("kernelPath", "initrdPath"):
        value = getattr(container, name)
        if value and posixpath.basename(value) in ("", ".", ".."):
            path = f"{base}.container.{name}"
            t.unsupported(path, f"{path} '{value}' must name a file", "FieldValueInvalid")
            ok = False
    if not ok:
        return True
    kernel = kernel_boot_path(t, container.kernelPath)
    payload = PayloadConfig(kernel=kernel, cmdline=kb.kernelArgs or None)
    t.steps.append(RequireFile(field=f"{base}.container.kernelPath", path=kernel,
                               what=f"kernel {container.kernelPath} of the kernel-boot container"))
    if container.initrdPath:
        payload.initramfs = kernel_boot_path(t, container.initrdPath)
        t.steps.append(RequireFile(field=f"{base}.container.initrdPath", path=payload.initramfs,
                                   what=f"initrd {container.initrdPath} of the kernel-boot container"))
    t.config.payload = payload
    return True


def _check_bootloader_options(t: Translation) -> bool:
    """Report EFI options Cloud Hypervisor cannot honour. Returns whether EFI is asked for."""
    firmware = t.vmi.spec.domain.firmware
    bootloader = firmware.bootloader if firmware else None
    if bootloader is None:
        return False
    base = "spec.domain.firmware.bootloader"
    if bootloader.bios is not None and bootloader.efi is not None:
        t.unsupported(base, f"{base} must set either bios or efi, not both", "FieldValueInvalid")
    efi = bootloader.efi
    if efi is None:
        return False
    if efi.secureBoot is None or efi.secureBoot:
        # KubeVirt: a nil secureBoot means true when efi is set.
        path = f"{base}.efi.secureBoot"
        t.unsupported(path, f"{path} is not supported by Cloud Hypervisor: it emulates no SMM and its "
                      "firmware enrols no Secure Boot keys; set secureBoot: false")
    if efi.persistent:
        path = f"{base}.efi.persistent"
        t.unsupported(path, f"{path} is not supported by Cloud Hypervisor: its firmware keeps EFI variables "
                      "in guest memory only")
    return True


def _configure_bootloader(t: Translation) -> None:
    efi = _check_bootloader_options(t)
    name = EFI_FIRMWARE if efi else BIOS_FIRMWARE
    path = f"{t.env.firmware_dir}/{name}"
    t.config.payload = PayloadConfig(firmware=path)
    field = "spec.domain.firmware.bootloader.efi" if efi else "spec.domain.firmware.bootloader"
    # virt-handler marks the VMI Failed, instead of retrying forever, when a Sync error contains
    # "EFI OVMF rom missing" (kubevirt pkg/virt-handler/vm.go@d923fdb815cd,
    # virtLauncherCriticalSecurebootError): exactly what a launcher image without its EFI
    # firmware is, so say it.
    t.steps.append(RequireFile(field=field, path=path, what=f"firmware {name} (--firmware-dir)",
                               missing_note="EFI OVMF rom missing" if efi else ""))


def _configure_smbios(t: Translation) -> None:
    firmware = t.vmi.spec.domain.firmware
    if firmware is not None and firmware.uuid:
        try:
            uuid.UUID(firmware.uuid)
        except ValueError:
            path = "spec.domain.firmware.uuid"
            t.unsupported(path, f"{path} '{firmware.uuid}' is not a UUID, which Cloud Hypervisor's SMBIOS "
                          "table requires", "FieldValueInvalid")
        else:
            platform(t).system_uuid = firmware.uuid
    if firmware is not None and firmware.serial:
        platform(t).system_serial_number = firmware.serial
    smbios = t.options.smbios
    for value, attr in ((smbios.manufacturer, "system_manufacturer"), (smbios.product, "system_product_name"),
                        (smbios.version, "system_version"), (smbios.family, "system_family"),
                        (smbios.sku, "system_sku_number")):
        if value:
            setattr(platform(t), attr, value)


def _enabled(state: Any) -> bool:
    """A KubeVirt feature block: present means on unless `enabled: false` (SetDefaults_FeatureState)."""
    if state is None:
        return False
    value = state.get("enabled") if isinstance(state, dict) else getattr(state, "enabled", None)
    return value is None or bool(value)


def _check_features(t: Translation) -> None:
    features = t.vmi.spec.domain.features
    if features is None:
        return
    base = "spec.domain.features"
    if features.acpi is not None and not _enabled(features.acpi):
        t.unsupported(f"{base}.acpi", f"{base}.acpi cannot be disabled on Cloud Hypervisor: its guests always "
                      "have ACPI")
    if features.apic is not None:
        if not _enabled(features.apic):
            t.unsupported(f"{base}.apic", f"{base}.apic cannot be disabled on Cloud Hypervisor: its guests "
                          "always have an APIC")
        elif features.apic.endOfInterrupt:
            t.warn(f"{base}.apic.endOfInterrupt", "paravirtual EOI is not configurable on Cloud Hypervisor")
    if _enabled(features.smm):
        t.unsupported(f"{base}.smm", f"{base}.smm is not supported by Cloud Hypervisor: it emulates no "
                      "System Management Mode")
    if features.kvm is not None and features.kvm.hidden:
        t.unsupported(f"{base}.kvm.hidden", f"{base}.kvm.hidden is not supported by Cloud Hypervisor: it "
                      "always shows the KVM signature to the guest")
    if features.pvspinlock is not None and not _enabled(features.pvspinlock):
        t.warn(f"{base}.pvspinlock", "paravirtual spinlocks cannot be turned off on Cloud Hypervisor")
    if features.hyperv is not None:
        _check_hyperv(t, features.hyperv)
    if _enabled(features.hypervPassthrough):
        _kvm_hyperv(t)
        t.warn(f"{base}.hypervPassthrough", "Cloud Hypervisor offers its fixed set of Hyper-V enlightenments, "
               "not the host's")


def _kvm_hyperv(t: Translation) -> None:
    assert t.config.cpus is not None, "compute runs before firmware"
    t.config.cpus.kvm_hyperv = True


def _check_hyperv(t: Translation, hyperv: dict[str, Any]) -> None:
    base = "spec.domain.features.hyperv"
    wanted = []
    for name, state in hyperv.items():
        if state is None:
            continue  # JSON null: absent, as Go decodes a nil pointer
        if not isinstance(state, dict):
            t.unsupported(f"{base}.{name}", f"{base}.{name} must be an object", "FieldValueInvalid")
        elif _enabled(state):
            wanted.append(name)
    if not wanted:
        return
    _kvm_hyperv(t)
    for name in wanted:
        if name not in HYPERV_PROVIDED:
            t.warn(f"{base}.{name}", f"Hyper-V enlightenment '{name}' is not offered by Cloud Hypervisor")
    timer = hyperv.get("synictimer")
    if isinstance(timer, dict) and isinstance(timer.get("direct"), dict) and _enabled(timer["direct"]):
        t.warn(f"{base}.synictimer.direct", "direct-mode synthetic timers are not offered by Cloud Hypervisor")
