"""`spec.domain` of the inbound VMI model: compute, memory, firmware, features, clock, and the
`DomainSpec` that holds them with the devices (`vmi_devices`).

Part of `ch_launcher.kubevirt.vmi` (which re-exports every name); its conventions apply."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from ch_launcher.kubevirt.vmi_base import Empty, Quantity, _Model
from ch_launcher.kubevirt.vmi_devices import Devices

# --- spec.domain: compute and memory ---------------------------------------------------------


class ResourceRequirements(_Model):
    requests: dict[str, Quantity] = field(default_factory=dict)
    limits: dict[str, Quantity] = field(default_factory=dict)
    overcommitGuestOverhead: bool = False


class CPUFeature(_Model):
    name: str
    policy: str = "require"


class NUMA(_Model):
    guestMappingPassthrough: Empty | None = None


class Realtime(_Model):
    mask: str = ""


class CPU(_Model):
    cores: int = 0
    sockets: int = 0
    threads: int = 0
    maxSockets: int = 0
    model: str = ""
    features: list[CPUFeature] = field(default_factory=list)
    dedicatedCpuPlacement: bool = False
    numa: NUMA | None = None
    isolateEmulatorThread: bool = False
    realtime: Realtime | None = None


class Hugepages(_Model):
    pageSize: str = ""


class ReservedOverhead(_Model):
    addedOverhead: Quantity | None = None
    memLock: str = ""  # "Required" | "NotRequired"


class Memory(_Model):
    guest: Quantity | None = None
    maxGuest: Quantity | None = None
    hugepages: Hugepages | None = None
    reservedOverhead: ReservedOverhead | None = None


class Machine(_Model):
    type: str = ""


# --- spec.domain: firmware, features, clock --------------------------------------------------


class BIOS(_Model):
    useSerial: bool | None = None


class EFI(_Model):
    secureBoot: bool | None = None  # nil means true in KubeVirt
    persistent: bool | None = None


class Bootloader(_Model):
    bios: BIOS | None = None
    efi: EFI | None = None


class KernelBootContainer(_Model):
    image: str = ""
    kernelPath: str = ""
    initrdPath: str = ""
    imagePullPolicy: str = ""


class KernelBoot(_Model):
    kernelArgs: str = ""
    container: KernelBootContainer | None = None


class FirmwareACPI(_Model):
    slicNameRef: str = ""
    msdmNameRef: str = ""


class Firmware(_Model):
    uuid: str = ""
    serial: str = ""
    bootloader: Bootloader | None = None
    kernelBoot: KernelBoot | None = None
    acpi: FirmwareACPI | None = None


class FeatureState(_Model):
    enabled: bool | None = None  # nil means enabled when the block is present


class FeatureAPIC(FeatureState):
    endOfInterrupt: bool = False


class FeatureKVM(_Model):
    hidden: bool = False


class Features(_Model):
    acpi: FeatureState | None = None
    apic: FeatureAPIC | None = None
    hyperv: dict[str, Any] | None = None
    hypervPassthrough: FeatureState | None = None
    smm: FeatureState | None = None
    kvm: FeatureKVM | None = None
    pvspinlock: FeatureState | None = None


class Clock(_Model):
    utc: dict[str, Any] | None = None
    timezone: str | None = None
    timer: dict[str, Any] | None = None


class LaunchSecurity(_Model):
    sev: dict[str, Any] | None = None
    snp: dict[str, Any] | None = None
    tdx: dict[str, Any] | None = None


# --- spec.domain ------------------------------------------------------------------------------


class DomainSpec(_Model):
    resources: ResourceRequirements = field(default_factory=ResourceRequirements)
    cpu: CPU | None = None
    memory: Memory | None = None
    machine: Machine | None = None
    firmware: Firmware | None = None
    clock: Clock | None = None
    features: Features | None = None
    devices: Devices = field(default_factory=Devices)
    ioThreadsPolicy: str = ""
    ioThreads: dict[str, Any] | None = None
    chassis: dict[str, Any] | None = None
    launchSecurity: LaunchSecurity | None = None
