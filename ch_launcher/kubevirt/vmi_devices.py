"""`spec.domain.devices` of the inbound VMI model: disks, interfaces and the other devices.

Part of `ch_launcher.kubevirt.vmi` (which re-exports every name); its conventions apply."""

from __future__ import annotations

from dataclasses import field
from typing import Any, ClassVar

from ch_launcher.kubevirt.vmi_base import Empty, _Model

# --- spec.domain.devices ---------------------------------------------------------------------


class DiskTarget(_Model):
    bus: str = ""
    readonly: bool = False
    pciAddress: str = ""


class LunTarget(_Model):
    bus: str = ""
    readonly: bool = False
    reservation: bool = False


class CDRomTarget(_Model):
    bus: str = ""
    readonly: bool | None = None
    tray: str = ""


class Disk(_Model):
    name: str
    disk: DiskTarget | None = None
    lun: LunTarget | None = None
    cdrom: CDRomTarget | None = None
    floppy: dict[str, Any] | None = None
    bootOrder: int | None = None
    serial: str = ""
    dedicatedIOThread: bool | None = None
    cache: str = ""
    io: str = ""
    tag: str = ""
    blockSize: dict[str, Any] | None = None
    shareable: bool | None = None
    errorPolicy: str = ""


class Port(_Model):
    name: str = ""
    protocol: str = "TCP"
    port: int


class PluginBinding(_Model):
    name: str


class DHCPPrivateOptions(_Model):
    option: int = 0  # required upstream; the translator refuses anything outside 224-254
    value: str = ""


class DHCPOptions(_Model):
    bootFileName: str = ""
    tftpServerName: str = ""
    ntpServers: list[str] = field(default_factory=list)
    privateOptions: list[DHCPPrivateOptions] = field(default_factory=list)


class Interface(_Model):
    name: str
    model: str = ""
    binding: PluginBinding | None = None
    bridge: Empty | None = None
    masquerade: Empty | None = None
    slirp: Empty | None = None
    sriov: Empty | None = None
    macvtap: Empty | None = None
    passt: Empty | None = None
    passtBinding: Empty | None = None
    macAddress: str = ""
    bootOrder: int | None = None
    ports: list[Port] = field(default_factory=list)
    pciAddress: str = ""
    dhcpOptions: DHCPOptions | None = None
    tag: str = ""
    acpiIndex: int | None = None
    state: str = ""

    BINDING_METHODS: ClassVar[tuple[str, ...]] = (
        "bridge", "masquerade", "slirp", "sriov", "macvtap", "passt", "passtBinding",
    )

    @property
    def binding_methods(self) -> list[str]:
        """Every binding set: `bridge`, `masquerade`, `sriov`, ... or `plugin:<name>` (KubeVirt
        requires exactly one)."""
        found = [m for m in self.BINDING_METHODS if getattr(self, m) is not None]
        if self.binding is not None:
            found.append(f"plugin:{self.binding.name}")
        return found

    @property
    def binding_method(self) -> str:
        """The first of `binding_methods`; `""` when none is set."""
        methods = self.binding_methods
        return methods[0] if methods else ""


class Input(_Model):
    name: str = ""
    bus: str = ""
    type: str = ""


class Watchdog(_Model):
    name: str = ""
    i6300esb: dict[str, Any] | None = None
    diag288: dict[str, Any] | None = None


class GPU(_Model):
    name: str
    deviceName: str = ""
    virtualGPUOptions: dict[str, Any] | None = None
    tag: str = ""
    claimName: str | None = None
    requestName: str | None = None


class HostDevice(_Model):
    name: str
    deviceName: str = ""
    tag: str = ""
    claimName: str | None = None
    requestName: str | None = None


class Filesystem(_Model):
    name: str
    virtiofs: Empty | None = None


class SoundDevice(_Model):
    name: str = ""
    model: str = ""


class TPMDevice(_Model):
    enabled: bool | None = None
    persistent: bool | None = None


class PanicDevice(_Model):
    model: str = ""


class Devices(_Model):
    useVirtioTransitional: bool | None = None
    disableHotplug: bool = False
    disks: list[Disk] = field(default_factory=list)
    watchdog: Watchdog | None = None
    interfaces: list[Interface] = field(default_factory=list)
    inputs: list[Input] = field(default_factory=list)
    autoattachPodInterface: bool | None = None
    autoattachGraphicsDevice: bool | None = None
    autoattachSerialConsole: bool | None = None
    logSerialConsole: bool | None = None
    autoattachMemBalloon: bool | None = None
    autoattachInputDevice: bool | None = None
    autoattachVSOCK: bool | None = None
    rng: Empty | None = None
    blockMultiQueue: bool | None = None
    networkInterfaceMultiqueue: bool | None = None
    gpus: list[GPU] = field(default_factory=list)
    downwardMetrics: Empty | None = None
    panicDevices: list[PanicDevice] = field(default_factory=list)
    filesystems: list[Filesystem] = field(default_factory=list)
    hostDevices: list[HostDevice] = field(default_factory=list)
    clientPassthrough: Empty | None = None
    sound: SoundDevice | None = None
    tpm: TPMDevice | None = None
    video: dict[str, Any] | None = None
