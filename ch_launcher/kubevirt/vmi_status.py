"""`status` of the inbound VMI model: volume, interface, memory, CPU and migration status.

Part of `ch_launcher.kubevirt.vmi` (which re-exports every name); its conventions apply."""

from __future__ import annotations

from dataclasses import field

from ch_launcher.kubevirt.vmi_base import Quantity, _Model

# --- status ----------------------------------------------------------------------------------


class PVCInfo(_Model):
    accessModes: list[str] = field(default_factory=list)
    volumeMode: str = ""  # "Filesystem" | "Block"
    capacity: dict[str, Quantity] = field(default_factory=dict)
    requests: dict[str, Quantity] = field(default_factory=dict)
    preallocated: bool = False
    filesystemOverhead: str | None = None  # CDI's fraction of a filesystem volume ("0.055")


class HotplugVolumeStatus(_Model):
    attachPodName: str = ""
    attachPodUID: str = ""


# `status.volumeStatus[].phase` values of a hotplugged volume in which virt-handler has mounted
# it into the launcher pod (kubevirt staging/src/kubevirt.io/api/core/v1/types.go@d923fdb815cd):
# the launcher attaches the disk only then (converter/storage/configurator.go: hotplugReady).
HOTPLUG_READY_PHASES = ("MountedToPod", "Ready")


class VolumeStatus(_Model):
    name: str
    target: str = ""
    phase: str = ""
    reason: str = ""
    hotplugVolume: HotplugVolumeStatus | None = None
    persistentVolumeClaimInfo: PVCInfo | None = None


class InterfaceStatus(_Model):
    name: str = ""
    mac: str = ""
    ipAddress: str = ""
    interfaceName: str = ""
    podInterfaceName: str = ""
    infoSource: str = ""  # comma-separated: domain, guest-agent, multus-status


class MemoryStatus(_Model):
    guestAtBoot: Quantity | None = None
    guestCurrent: Quantity | None = None
    guestRequested: Quantity | None = None


class CPUTopology(_Model):
    cores: int = 0
    sockets: int = 0
    threads: int = 0


class MigrationPeerState(_Model):
    """`status.migrationState.sourceState` / `targetState` (decentralized migrations:
    `VirtualMachineInstanceCommonMigrationState`, whose UID key is `migrationUID`)."""

    migrationUID: str = ""
    virtualMachineInstanceUID: str = ""
    pod: str = ""


class MigrationState(_Model):
    """What a launcher reads of `status.migrationState` (kubevirt staging/src/kubevirt.io/api/
    core/v1/types.go@d923fdb815cd `VirtualMachineInstanceMigrationState`). Its UID key is
    `migrationUid`, unlike the peer states' `migrationUID`; an unknown key is dropped silently,
    so every attribute here is spelt as Go's json tag."""

    targetPod: str = ""
    sourcePod: str = ""
    migrationUid: str = ""
    sourceNode: str = ""
    targetNode: str = ""
    abortRequested: bool = False
    sourceState: MigrationPeerState | None = None
    targetState: MigrationPeerState | None = None


class Condition(_Model):
    type: str = ""
    status: str = ""
    reason: str = ""


class VMIStatus(_Model):
    phase: str = ""
    VSOCKCID: int | None = None
    volumeStatus: list[VolumeStatus] = field(default_factory=list)
    interfaces: list[InterfaceStatus] = field(default_factory=list)
    migrationState: MigrationState | None = None
    migrationTransport: str = ""  # "Unix" for every VMI created by KubeVirt >= 1.5; "" = legacy TCP
    conditions: list[Condition] = field(default_factory=list)
    launcherContainerImageVersion: str = ""
    runtimeUser: int = 0
    memory: MemoryStatus | None = None
    currentCPUTopology: CPUTopology | None = None
