"""The `api.Domain` view of a VM, as virt-handler decodes it (contract.md §10, §11).

virt-handler decodes the launcher's Domain JSON with Go's `encoding/json` into
`api.Domain` (kubevirt `pkg/virt-launcher/virtwrap/api/schema.go@d923fdb815cd`). That type has
no `json` tags below the top level, so keys are Go field names (`Spec`, `Devices`, `MAC`,
`Alias`), except `ObjectMeta`, which is an ordinary Kubernetes ObjectMeta (`name`, `namespace`,
`uid`, `creationTimestamp`, `deletionTimestamp`). We emit every key Go itself would emit for the
parts we know (the key sets of `reference/data/domain-examples/`), so a reader cannot tell our
JSON from the Go launcher's.

Rules enforced here, because breaking them crashes or misleads virt-handler (§10.3, §11):
- every interface has a non-nil `Alias` and `MAC` (virt-handler dereferences both; a nil is a
  panic that restarts virt-handler);
- every disk with a `Source.File`/`Source.Dev` has a non-nil `Alias`;
- `Status.Status` is never `"Unknown"` (virt-handler reserves it for unreachable launchers);
- `Spec.Metadata.KubeVirt.UID` is the VMI's uid and `GracePeriod` is present on every live Domain.

`domain_json()` raises `ValueError` naming the offending device when a view would break one
of them; that is a bug in the caller, never something to send.

The device descriptions (`DomainDisk`, `DomainInterface`) come from the translator.
"""

from __future__ import annotations

import enum
import json
import platform
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ch_launcher.kubevirt.migration import MigrationMetadata


class LifeCycle(str, enum.Enum):
    """`Status.Status`, KubeVirt's `api.LifeCycle` strings. There is deliberately no
    `Unknown`: virt-handler synthesises it for launchers it cannot reach; we never send it."""

    NOSTATE = "NoState"
    RUNNING = "Running"
    BLOCKED = "Blocked"
    PAUSED = "Paused"
    SHUTTING_DOWN = "ShuttingDown"  # Go constant `Shutdown`
    SHUTDOWN = "ShuttingDown"  # alias with the Go constant's name
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
    migration: MigrationMetadata | None = None  # Spec.Metadata.KubeVirt.Migration

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


# --- encoding --------------------------------------------------------------------------------
# Builders below emit keys in Go's struct field order, with `null` for nil pointers/slices,
# exactly the key sets of reference/data/domain-examples/.


def _xml_name(local: str) -> dict[str, str]:
    return {"Space": "", "Local": local}


def _alias(name: str) -> dict[str, Any]:
    # KubeVirt's custom Alias JSON: user-defined aliases carry no `ua-` prefix in JSON.
    return {"Name": name, "UserDefined": True}


def _memory(value: int) -> dict[str, Any]:
    return {"Value": value, "Unit": "b"}


def _disk(d: DomainDisk, index: int) -> dict[str, Any]:
    if (d.source_file or d.source_dev) and not d.alias:
        raise ValueError(f"Domain disk {index} ({d.target_dev or '?'}) has a source but no alias: "
                         "virt-handler dereferences Alias for such disks")
    if d.source_file and d.source_dev:
        raise ValueError(f"Domain disk {d.alias!r} has both a file and a device source")
    return {
        "Device": d.device,
        "Snapshot": "",
        "Type": "block" if d.source_dev else "file",
        "Source": {
            "Dev": d.source_dev,
            "File": d.source_file,
            "StartupPolicy": "",
            "Protocol": "",
            "Name": "",
            "Host": None,
            "Reservations": None,
            "Slices": None,
            "DataStore": None,
        },
        "Target": {"Bus": d.bus, "Device": d.target_dev, "Tray": ""},
        "Serial": d.serial,
        "Driver": {
            "Cache": "",
            "ErrorPolicy": "stop",
            "IO": "",
            "Name": "qemu",  # libvirt's driver name; virt-handler does not read it
            "Type": d.image_type,
            "IOThread": None,
            "IOThreads": None,
            "Queues": None,
            "Discard": "unmap",
            "IOMMU": "",
        },
        "ReadOnly": {} if d.readonly else None,
        "Auth": None,
        "Alias": _alias(d.alias) if d.alias else None,
        "BackingStore": None,
        "BootOrder": {"Order": d.boot_order} if d.boot_order is not None else None,
        "Address": None,
        "Model": "",
        "BlockIO": None,
        "FilesystemOverhead": None,
        "Capacity": None,
        "Shareable": None,
    }


def _interface(i: DomainInterface, index: int) -> dict[str, Any]:
    if not i.alias or not i.mac:
        raise ValueError(f"Domain interface {index} ({i.alias or '?'}) needs both an alias and a "
                         "MAC: virt-handler dereferences both")
    return {
        "XMLName": _xml_name("interface"),
        "Address": None,
        "Type": i.type,
        "TrustGuestRxFilters": "",
        "Source": {"Network": "", "Device": "", "Bridge": "", "Mode": "", "Address": None},
        # libvirt's <target dev=tap managed='no'/>, as KubeVirt writes it for a pre-made tap.
        "Target": {"Device": i.tap, "Managed": "no"} if i.tap else None,
        "Model": {"Type": i.model},
        "MAC": {"MAC": i.mac},
        "MTU": {"Size": str(i.mtu)} if i.mtu else None,
        "BandWidth": None,
        "BootOrder": {"Order": i.boot_order} if i.boot_order is not None else None,
        "LinkState": {"State": i.link_state} if i.link_state else None,
        "FilterRef": None,
        "Alias": _alias(i.alias),
        "Driver": {"Name": "vhost", "Queues": i.queues, "IOMMU": ""} if i.queues else None,
        "Rom": {"Enabled": "no"},
        "ACPI": None,
        "Backend": None,
        "PortForward": None,
    }


def _address(**fields: str) -> dict[str, str]:
    keys = ("Type", "Domain", "Bus", "Slot", "Function", "Controller", "Target", "Unit", "UUID", "Device",
            "CSSID", "SSID", "DevNo")
    return {k: fields.get(k, "") for k in keys}


def _host_device(h: DomainHostDevice) -> dict[str, Any]:
    if h.mdev_uuid:
        source, kind, mode, model, managed = _address(UUID=h.mdev_uuid), "mdev", "subsystem", "vfio-pci", ""
    else:
        domain, bus, rest = h.pci_address.split(":")
        slot, function = rest.split(".")
        source = _address(Type="pci", Domain=f"0x{domain}", Bus=f"0x{bus}", Slot=f"0x{slot}", Function=f"0x{function}")
        kind, mode, model, managed = "pci", "", "", "no"
    return {
        "XMLName": _xml_name("hostdev"),
        "Source": {"Address": source},
        "Type": kind,
        "BootOrder": None,
        "Managed": managed,
        "Mode": mode,
        "Model": model,
        "Address": None,
        "Alias": _alias(h.alias),
        "Display": "",
        "RamFB": "",
        "Driver": None,
        "ACPI": None,
    }


def _devices(view: DomainView) -> dict[str, Any]:
    interfaces = [_interface(i, n) for n, i in enumerate(view.interfaces)]
    host_devices = [_host_device(h) for h in view.host_devices]
    disks = [_disk(d, n) for n, d in enumerate(view.disks)]
    return {
        "Emulator": "",
        "Interfaces": interfaces or None,
        "Channels": None,  # no guest agent channel: Cloud Hypervisor has no virtio-serial ports
        "HostDevices": host_devices or None,
        "PanicDevices": [{"Model": m} for m in view.panic_models] or None,
        "Controllers": None,
        "Video": None,
        "Graphics": None,
        "Ballooning": None,
        "Disks": disks or None,
        "Inputs": None,
        "Serials": None,
        "Consoles": None,
        "Watchdogs": None,
        "Rng": None,
        "Filesystems": None,
        "Redirs": None,
        "SoundCards": None,
        "TPMs": None,
        "VSOCK": None,
        "Memory": None,
        "IOMMU": None,
    }


def _features(view: DomainView) -> dict[str, Any] | None:
    if not view.defined:
        return None
    return {
        # Presence of ACPI makes a Destroyed domain count as Failed (vm.go isACPIEnabled).
        "ACPI": {} if view.acpi else None,
        "APIC": {},
        "Hyperv": None,
        "SMM": None,
        "KVM": None,
        "PVSpinlock": None,
        "PMU": None,
        "VMPort": None,
    }


def _vcpus(slots: tuple[VcpuSlot, ...]) -> dict[str, Any] | None:
    if not slots:
        return None
    return {"VCPU": [{"ID": v.id, "Enabled": "yes" if v.enabled else "no",
                      "Hotpluggable": "yes" if v.hotpluggable else "no", "Order": v.order} for v in slots]}


def _panic_info(info: GuestPanicInfo | None) -> dict[str, Any] | None:
    if info is None:
        return None
    a1, a2, a3, a4, a5 = info.args
    return {"Type": info.type, "Arg1": a1, "Arg2": a2, "Arg3": a3, "Arg4": a4, "Arg5": a5}


def _grace(g: GracePeriod | None) -> dict[str, Any] | None:
    if g is None:
        return None
    return {
        "DeletionGracePeriodSeconds": int(g.deletion_grace_period_seconds),
        "DeletionTimestamp": rfc3339(g.deletion_timestamp) if g.deletion_timestamp else None,
        "MarkedForGracefulShutdown": g.marked_for_graceful_shutdown,
    }


def _spec(view: DomainView) -> dict[str, Any]:
    defined = view.defined
    current = view.memory_bytes if view.current_memory_bytes is None else view.current_memory_bytes
    return {
        "XMLName": _xml_name("domain" if defined else ""),
        "Type": "kvm" if defined else "",
        "XmlNS": "",
        "Name": view.domain_name if defined else "",
        "UUID": view.uuid if defined else "",
        "Memory": _memory(view.memory_bytes) if defined else {"Value": 0, "Unit": ""},
        "CurrentMemory": _memory(current) if defined else None,
        "MaxMemory": None,
        "MemoryBacking": None,
        "OS": {
            "Firmware": view.firmware,
            "FirmwareInfo": None,
            "Type": {"OS": "hvm" if defined else "", "Arch": view.arch if defined else "",
                     "Machine": view.machine if defined else ""},
            "ACPI": None,
            "SMBios": None,
            "BootOrder": None,
            "BootMenu": None,
            "BIOS": None,
            # virt-launcher's EFI loader shape (converter/compute/os.go configureEFI); Cloud
            # Hypervisor loads CLOUDHV.fd as its firmware payload and keeps no EFI variables, as
            # libvirt's stateless "rom" loader (which KubeVirt uses for SEV-SNP and TDX).
            "BootLoader": ({"ReadOnly": "yes", "Secure": "no", "Type": "rom", "Path": view.loader}
                           if view.loader else None),
            "NVRam": None,
            "Kernel": view.kernel,
            "Initrd": view.initrd,
            "KernelArgs": view.kernel_args,
        },
        "SysInfo": None,
        "Devices": _devices(view),
        "Clock": None,
        "Resource": None,
        "QEMUCmd": None,
        "Metadata": {
            "KubeVirt": {
                "UID": view.uid,
                "GracePeriod": _grace(view.grace),
                "Migration": view.migration.to_dict() if view.migration is not None else None,
                "Backup": None,
                "AccessCredential": None,
                "MemoryDump": None,
            }
        },
        "Features": _features(view),
        "CPU": {
            "Mode": view.cpu_mode if defined else "",
            "Model": "",
            "Features": None,
            "Topology": ({"Sockets": view.sockets, "Cores": view.cores, "Threads": view.threads}
                         if defined else None),
            "NUMA": None,
        },
        "VCPU": {"Placement": "static", "CPUs": view.vcpus} if defined else None,
        "VCPUs": _vcpus(view.vcpu_slots) if defined else None,
        "CPUTune": None,
        "NUMATune": None,
        "IOThreads": None,
        "LaunchSecurity": None,
        "OnReboot": "",
        "IOMMUFD": None,
    }


_EMPTY_OS_INFO = {"Name": "", "KernelRelease": "", "Version": "", "PrettyName": "",
                  "VersionId": "", "KernelVersion": "", "Machine": "", "Id": ""}


def domain_dict(view: DomainView) -> dict[str, Any]:
    """The Domain as a JSON-ready dict (see `domain_json`). Raises ValueError on a view that
    breaks virt-handler's nil-safety rules or names no VMI."""
    if not view.name or not view.namespace or not view.uid:
        raise ValueError("a Domain needs the VMI's name, namespace and uid "
                         f"(got {view.name!r}, {view.namespace!r}, {view.uid!r})")
    if view.defined and view.grace is None:
        raise ValueError("a live Domain carries GracePeriod metadata (contract §6)")
    meta: dict[str, Any] = {
        "name": view.name,
        "namespace": view.namespace,
        "uid": view.uid,
        "creationTimestamp": None,
    }
    if view.deletion_timestamp:
        meta["deletionTimestamp"] = rfc3339(view.deletion_timestamp)
    return {
        "kind": "Domain",
        "apiVersion": "1.2.2",
        "ObjectMeta": meta,
        "Spec": _spec(view),
        "Status": {
            "Status": view.status.value,
            "Reason": view.reason.value,
            "Interfaces": None,  # guest-agent data; Cloud Hypervisor has no agent channel
            "OSInfo": dict(_EMPTY_OS_INFO),
            "FSFreezeStatus": {"Status": ""},
            "GuestPanicInfo": _panic_info(view.panic_info),
            "PanicCount": view.panic_count,
        },
    }


def domain_json(view: DomainView) -> str:
    """The `api.Domain` JSON virt-handler decodes (compact, as Go's json.Marshal writes it).

    Raises ValueError when the view would crash or mislead virt-handler (see module doc)."""
    return json.dumps(domain_dict(view), separators=(",", ":"))
