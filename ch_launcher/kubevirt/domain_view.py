"""The `api.Domain` view of a VM as data (`DomainView` and the device descriptions the translator
makes), with KubeVirt's LifeCycle and Reason and libvirt's RFC 3339 times; `kubevirt.domain`
encodes it as the JSON virt-handler decodes (and re-exports every name here).
"""

from __future__ import annotations

import enum
import platform
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from ch_launcher.kubevirt.guest_info import GuestInterface, GuestOSInfo


class MigrationView(Protocol):
    """The Domain's `Spec.Metadata.KubeVirt.Migration` (`kubevirt.migration.MigrationMetadata`,
    which imports this module for its times: named by what the encoder needs of it)."""

    def to_dict(self) -> dict[str, Any]: ...


class LifeCycle(str, enum.Enum):
    """`Status.Status`, KubeVirt's `api.LifeCycle` strings. There is deliberately no
    `Unknown`: virt-handler synthesises it for launchers it cannot reach; we never send it."""

    NOSTATE = "NoState"
    RUNNING = "Running"
    BLOCKED = "Blocked"
    PAUSED = "Paused"
    SHUTTING_DOWN = "ShuttingDown"  # Go constant `Shutdown`
    SHUTDOWN = "ShuttingDown"  # noqa: PIE796 - an alias with the Go constant's name
    SHUTOFF = "Shutoff"
    CRASHED = "Crashed"
    PMSUSPENDED = "PMSuspended"


class Reason(str, enum.Enum):
    """`Status.Reason`, KubeVirt's `api.StateChangeReason` strings (several states share a
    string: `User` is both the ShuttingDown and the Paused reason)."""

    UNKNOWN = "Unknown"  # any state; every Running reason maps to this
    USER = "User"  # ShuttingDown, Paused
    # Shutoff
    SHUTDOWN = "Shutdown"
    DESTROYED = "Destroyed"
    MIGRATED = "Migrated"
    CRASHED = "Crashed"  # also a Paused reason
    SAVED = "Saved"
    FAILED = "Failed"
    FROM_SNAPSHOT = "FromSnapshot"  # also a Paused reason
    # Crashed
    PANICKED = "Panicked"
    # NoState
    NON_EXISTENT = "NonExistent"
    # Paused
    MIGRATION = "Migration"
    SAVE = "Save"
    DUMP = "Dump"
    IO_ERROR = "IOError"
    WATCHDOG = "Watchdog"
    SHUTTING_DOWN = "ShuttingDown"
    SNAPSHOT = "Snapshot"
    STARTING_UP = "StartingUp"
    POSTCOPY = "Postcopy"
    POSTCOPY_FAILED = "PostcopyFailed"


def rfc3339(when: datetime | str) -> str:
    """A `metav1.Time` as Go encodes it: RFC 3339, UTC, whole seconds (`2026-08-22T10:00:00Z`).

    Accepts an aware datetime, a naive one (taken as UTC), or an RFC 3339 string (re-encoded in
    UTC). Raises ValueError for a string that is not RFC 3339.
    """
    if isinstance(when, str):
        try:
            parsed = datetime.fromisoformat(when.replace("z", "Z"))
        except ValueError:
            raise ValueError(f"not an RFC 3339 time: {when!r}") from None
        if parsed.tzinfo is None:
            raise ValueError(f"RFC 3339 time without a zone: {when!r}")
        when = parsed
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    u = when.astimezone(UTC)
    # Formatted by hand: strftime's %Y does not zero-pad years below 1000 on glibc.
    return f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}Z"


def now_rfc3339() -> str:
    """The current time as a `metav1.Time` string."""
    return rfc3339(datetime.now(UTC))


@dataclass(frozen=True)
class GracePeriod:
    """`Spec.Metadata.KubeVirt.GracePeriod` (contract §6).

    `deletion_grace_period_seconds`: the VMI's terminationGracePeriodSeconds (30 when unset).
    `deletion_timestamp`: RFC 3339 time of the first graceful-shutdown signal, else None.
    `marked_for_graceful_shutdown`: True once the launcher got SIGTERM, else None (Go's nil).
    """

    deletion_grace_period_seconds: int = 30
    deletion_timestamp: str | None = None
    marked_for_graceful_shutdown: bool | None = None


@dataclass(frozen=True)
class GuestPanicInfo:
    """`Status.GuestPanicInfo`: what the panic device said. virt-launcher reads the details from
    QEMU's log (Hyper-V crash MSRs only) and reports `Type: "unknown"` when there are none
    (kubevirt `pkg/virt-launcher/notify-client/client.go` `handleGuestPanicEvent`@d923fdb815cd);
    Cloud Hypervisor's pvpanic carries none, so that is what we report too."""

    type: str = "unknown"
    args: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)


@dataclass(frozen=True)
class VcpuSlot:
    """One entry of `Spec.VCPUs` (libvirt's `<vcpus>`), present when the VM has hot-pluggable
    vCPUs. `order` is libvirt's live `order` attribute: the boot order of an enabled vCPU
    (1, 2, ...), 0 (not written) for a disabled one."""

    id: int
    enabled: bool
    hotpluggable: bool
    order: int = 0


@dataclass(frozen=True)
class DomainDisk:
    """One disk as `Spec.Devices.Disks[]` shows it. `alias` is the VMI disk name."""

    alias: str
    target_dev: str  # vda, vdb, ... in VMI disk order
    source_file: str = ""
    source_dev: str = ""
    readonly: bool = False
    serial: str = ""
    boot_order: int | None = None
    image_type: str = "raw"  # Driver.Type: raw | qcow2
    bus: str = "virtio"
    device: str = "disk"  # libvirt device kind: disk | cdrom | lun


@dataclass(frozen=True)
class DomainInterface:
    """One NIC as `Spec.Devices.Interfaces[]` shows it. `alias` is the VMI interface name;
    `mac` is never empty (virt-handler dereferences it)."""

    alias: str
    mac: str
    tap: str = ""
    mtu: int | None = None
    queues: int | None = None
    model: str = "virtio-non-transitional"
    type: str = "ethernet"
    boot_order: int | None = None
    link_state: str = ""  # "" = not stated (virt-handler reads it as up); "up" | "down"


@dataclass(frozen=True)
class DomainHostDevice:
    """One VFIO device as `Spec.Devices.HostDevices[]` shows it, as virt-launcher writes it
    (kubevirt pkg/virt-launcher/virtwrap/device/hostdevice/hostdev.go@d923fdb815cd): a PCI
    device by its host address (`managed: no`), a mediated device by its UUID (`mode:
    subsystem`, `model: vfio-pci`). `alias` is the user alias: `sriov-<iface>`, `gpu-<name>`,
    `hostdevice-<name>`; virt-handler reads the `sriov-` ones as the VMI's SR-IOV interfaces
    (pkg/network/setup/netstat.go `sriovIfacesStatusFromDomainHostDevices`)."""

    alias: str
    pci_address: str = ""  # dddd:bb:dd.f
    mdev_uuid: str = ""


AGENT_CHANNEL = "org.qemu.guest_agent.0"  # the channel virt-handler reads AgentConnected from


@dataclass(frozen=True)
class AccessCredentialResult:
    """`Spec.Metadata.KubeVirt.AccessCredential`: how the last propagation of the VMI's
    accessCredentials through the guest agent went (virt-handler's AccessCredentialsSynchronized
    condition)."""

    succeeded: bool
    message: str = ""


@dataclass(frozen=True)
class GuestAgentView:
    """The guest agent as the Domain shows it: the `org.qemu.guest_agent.0` channel (its state
    `connected` or `disconnected`: virt-handler's AgentConnected condition), and what the agent
    told of the guest (`Status.OSInfo`, `Status.Interfaces`, `Status.FSFreezeStatus`; None or ""
    until heard) and of the access credentials."""

    connected: bool = False
    os_info: GuestOSInfo | None = None
    interfaces: tuple[GuestInterface, ...] | None = None
    fs_freeze_status: str = ""
    access_credential: AccessCredentialResult | None = None


def _host_arch() -> str:
    machine = platform.machine()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine) or "x86_64"


HOST_ARCH = _host_arch()


@dataclass(frozen=True)
class DomainView:
    """Everything the Domain JSON says about one VM; a snapshot, never mutated.

    `name`/`namespace`/`uid` are the VMI's (virt-handler keys its cache on namespace/name and
    drops a Domain whose `UID` is not the VMI's). `grace` is attached to every live Domain;
    None only for the final "deleted" Domain, as the Go launcher sends it. `defined=False`
    means the VM is gone: `Spec` is then the zero DomainSpec apart from the UID (see
    `deleted_domain_view`). Lists given for `disks`/`interfaces` are frozen into tuples.
    """

    name: str
    namespace: str
    uid: str
    status: LifeCycle
    reason: Reason
    grace: GracePeriod | None = field(default_factory=GracePeriod)
    sockets: int = 1
    cores: int = 1
    threads: int = 1
    vcpus: int = 1  # Spec.VCPU.CPUs: the maximum vCPU count (libvirt's <vcpu>; `current` is not in api.VCPU)
    vcpu_slots: tuple[VcpuSlot, ...] = ()  # Spec.VCPUs; empty: null
    memory_bytes: int = 0
    current_memory_bytes: int | None = None  # None: same as memory_bytes
    disks: tuple[DomainDisk, ...] = ()
    interfaces: tuple[DomainInterface, ...] = ()
    host_devices: tuple[DomainHostDevice, ...] = ()
    acpi: bool = True
    uuid: str = ""
    machine: str = ""  # Spec.OS.Type.Machine -> vmi.status.machine.type
    arch: str = HOST_ARCH
    cpu_mode: str = "host-passthrough"  # Cloud Hypervisor exposes the host CPU
    firmware: str = ""  # Spec.OS.Firmware: libvirt's firmware auto-selection ("efi"); KubeVirt's x86 EFI sets none
    loader: str = ""  # Spec.OS.BootLoader.Path: the EFI firmware, loaded read-only with no NVRAM ("rom")
    kernel: str = ""
    initrd: str = ""
    kernel_args: str = ""
    deletion_timestamp: str | None = None  # ObjectMeta.deletionTimestamp: the VM is gone
    panic_count: int = 0
    panic_info: GuestPanicInfo | None = None
    panic_models: tuple[str, ...] = ()  # Spec.Devices.PanicDevices[].Model
    defined: bool = True
    migration: MigrationView | None = None  # Spec.Metadata.KubeVirt.Migration
    agent: GuestAgentView | None = None  # None: the VM has no guest agent channel

    def __post_init__(self) -> None:
        # Frozen dataclass: coerce in place once, so equality and hashing see tuples and enums.
        object.__setattr__(self, "disks", tuple(self.disks))
        object.__setattr__(self, "interfaces", tuple(self.interfaces))
        object.__setattr__(self, "vcpu_slots", tuple(self.vcpu_slots))
        object.__setattr__(self, "panic_models", tuple(self.panic_models))
        try:
            object.__setattr__(self, "status", LifeCycle(self.status))
            object.__setattr__(self, "reason", Reason(self.reason))
        except ValueError as e:
            # "Unknown" lands here: virt-handler reserves that status for unreachable launchers.
            raise ValueError(f"Domain status/reason must be KubeVirt's strings and never status "
                             f"'Unknown': {e}") from None

    @property
    def domain_name(self) -> str:
        """libvirt-style `Spec.Name`: `<namespace>_<name>` (KubeVirt's VMINamespaceKeyFunc)."""
        return f"{self.namespace}_{self.name}"


def deleted_domain_view(name: str, namespace: str, uid: str, when: datetime | str,
                        *, grace: GracePeriod | None = None, panic_count: int = 0,
                        panic_info: GuestPanicInfo | None = None) -> DomainView:
    """The final Domain after the VM is gone: `NoState`/`NonExistent`, `ObjectMeta.deletionTimestamp`
    = `when`, a zero Spec carrying only the UID (`domain-example-deleted.json`). Sent as MODIFIED,
    never DELETED (contract §2.5). Panic count and info carry over, as virt-launcher's domain
    cache keeps them on every later event."""
    return DomainView(name=name, namespace=namespace, uid=uid, status=LifeCycle.NOSTATE,
                      reason=Reason.NON_EXISTENT, grace=grace, deletion_timestamp=rfc3339(when),
                      defined=False, vcpus=0, acpi=False, arch="", cpu_mode="", panic_count=panic_count,
                      panic_info=panic_info)
