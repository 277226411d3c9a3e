"""The inbound model of `kubevirt.io/v1 VirtualMachineInstance`, as far as ch-launcher reads it.

Attribute names are the JSON names of KubeVirt's API (`staging/src/kubevirt.io/api/core/v1/
types.go`, `schema.go`), camelCase included, so that a field path built from attribute names is
the path users see in KubeVirt's own errors (`spec.domain.devices.disks[1].cdrom`).

Inbound models ignore unknown fields (upstream adds fields with every release) and treat JSON
`null` as "absent". Presence matters in KubeVirt's API (`rng: {}` switches a device on), so
optional blocks are `None` when absent and an `Empty` object when present.

`parse_vmi()` raises `InvalidVMI` with KubeVirt-style field paths for a payload that does not
decode; it never raises anything else.

The model is split by concern, and this module re-exports every public name, so callers import
from here: `vmi_base` (null-as-absent, `Empty`, `Quantity`), `vmi_domain` (`spec.domain`),
`vmi_devices` (`spec.domain.devices`), `vmi_volumes` (`spec.volumes`, `spec.networks`),
`vmi_status` (`status`); metadata, the top-level spec and decoding stay here.
"""

from __future__ import annotations

import json
import re
from dataclasses import field
from typing import Any

from ch_launcher.jsonmodel import DecodeError, decode
from ch_launcher.kubevirt.vmi_base import Empty, Quantity, _Model  # re-exported
from ch_launcher.kubevirt.vmi_devices import (  # re-exported
    GPU,
    CDRomTarget,
    Devices,
    DHCPOptions,
    DHCPPrivateOptions,
    Disk,
    DiskTarget,
    Filesystem,
    HostDevice,
    Input,
    Interface,
    LunTarget,
    PanicDevice,
    PluginBinding,
    Port,
    SoundDevice,
    TPMDevice,
    Watchdog,
)
from ch_launcher.kubevirt.vmi_domain import (  # re-exported
    BIOS,
    CPU,
    EFI,
    NUMA,
    Bootloader,
    Clock,
    CPUFeature,
    DomainSpec,
    FeatureAPIC,
    FeatureKVM,
    Features,
    FeatureState,
    Firmware,
    FirmwareACPI,
    Hugepages,
    KernelBoot,
    KernelBootContainer,
    LaunchSecurity,
    Machine,
    Memory,
    Realtime,
    ReservedOverhead,
    ResourceRequirements,
)
from ch_launcher.kubevirt.vmi_status import (  # re-exported
    HOTPLUG_READY_PHASES,
    Condition,
    CPUTopology,
    HotplugVolumeStatus,
    InterfaceStatus,
    MemoryStatus,
    MigrationPeerState,
    MigrationState,
    PVCInfo,
    VMIStatus,
    VolumeStatus,
)
from ch_launcher.kubevirt.vmi_volumes import (  # re-exported
    CloudInitSource,
    ConfigMapSource,
    ContainerDiskSource,
    DataVolumeSource,
    DownwardAPISource,
    EmptyDiskSource,
    EphemeralSource,
    HostDiskSource,
    LocalObjectReference,
    MultusNetwork,
    Network,
    PodNetwork,
    PVCSource,
    SecretSource,
    ServiceAccountSource,
    Volume,
)

__all__ = [  # every public name of the model, wherever it is defined
    "BIOS", "Bootloader", "CDRomTarget", "CPU", "CPUFeature", "CPUTopology", "Clock", "CloudInitSource",
    "Condition", "ConfigMapSource", "ContainerDiskSource", "DHCPOptions", "DHCPPrivateOptions",
    "DNS1123_LABEL_MAX", "DNS1123_LABEL_RULE", "DataVolumeSource", "Devices", "Disk", "DiskTarget",
    "DomainSpec", "DownwardAPISource", "EFI", "Empty", "EmptyDiskSource", "EphemeralSource",
    "FeatureAPIC", "FeatureKVM", "FeatureState", "Features", "Filesystem", "Firmware", "FirmwareACPI",
    "GPU", "HOTPLUG_READY_PHASES", "HostDevice", "HostDiskSource", "HotplugVolumeStatus", "Hugepages",
    "Input", "Interface", "InterfaceStatus", "InvalidVMI", "KernelBoot", "KernelBootContainer",
    "LaunchSecurity", "LocalObjectReference", "LunTarget", "Machine", "Memory", "MemoryStatus",
    "MigrationPeerState", "MigrationState", "MultusNetwork", "NUMA", "Network", "ObjectMeta",
    "OwnerReference", "PVCInfo", "PVCSource", "PanicDevice", "PluginBinding", "PodNetwork", "Port",
    "Probe", "Quantity", "Realtime", "ReservedOverhead", "ResourceRequirements", "SecretSource",
    "ServiceAccountSource", "SoundDevice", "TPMDevice", "VMISpec", "VMIStatus",
    "VirtualMachineInstance", "Volume", "VolumeStatus", "Watchdog", "field_path",
    "from_decode_error", "is_dns1123_label", "parse_vmi",
]


# --- metadata -------------------------------------------------------------------------------


class OwnerReference(_Model):
    apiVersion: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None


class ObjectMeta(_Model):
    name: str = ""
    generateName: str = ""
    namespace: str = ""
    uid: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    ownerReferences: list[OwnerReference] = field(default_factory=list)
    deletionTimestamp: str | None = None
    creationTimestamp: str | None = None


class Probe(_Model):
    initialDelaySeconds: int = 0
    timeoutSeconds: int = 0
    periodSeconds: int = 0
    successThreshold: int = 0
    failureThreshold: int = 0
    exec: dict[str, Any] | None = None
    httpGet: dict[str, Any] | None = None
    tcpSocket: dict[str, Any] | None = None
    guestAgentPing: Empty | None = None


class VMISpec(_Model):
    domain: DomainSpec = field(default_factory=DomainSpec)
    volumes: list[Volume] = field(default_factory=list)
    networks: list[Network] = field(default_factory=list)
    terminationGracePeriodSeconds: int | None = None
    evictionStrategy: str | None = None
    startStrategy: str | None = None
    livenessProbe: Probe | None = None
    readinessProbe: Probe | None = None
    hostname: str = ""
    subdomain: str = ""
    accessCredentials: list[dict[str, Any]] = field(default_factory=list)
    architecture: str = ""
    nodeSelector: dict[str, str] = field(default_factory=dict)
    priorityClassName: str = ""


class VirtualMachineInstance(_Model):
    apiVersion: str = "kubevirt.io/v1"
    kind: str = "VirtualMachineInstance"
    metadata: ObjectMeta = field(default_factory=ObjectMeta)
    spec: VMISpec = field(default_factory=VMISpec)
    status: VMIStatus = field(default_factory=VMIStatus)

    @property
    def grace_period_seconds(self) -> int:
        """`spec.terminationGracePeriodSeconds`, else KubeVirt's default of 30 s."""
        g = self.spec.terminationGracePeriodSeconds
        return 30 if g is None else g

    @property
    def domain_name(self) -> str:
        """libvirt-style name `<namespace>_<name>` (KubeVirt's VMINamespaceKeyFunc)."""
        return f"{self.metadata.namespace}_{self.metadata.name}"


_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1123_LABEL_MAX = 63
DNS1123_LABEL_RULE = ("a lowercase RFC 1123 label: at most 63 characters of a-z, 0-9 and '-', starting and "
                      "ending with a letter or digit")


def is_dns1123_label(name: str) -> bool:
    """Whether `name` is what KubeVirt requires of disk names (`validation.IsDNS1123Label`,
    kubevirt pkg/storage/admitters/disks.go@d923fdb815cd): 1-63 of a-z, 0-9 and '-', starting
    and ending alphanumeric. Such a name is safe in a file path and as a device id."""
    return len(name) <= DNS1123_LABEL_MAX and _DNS1123_LABEL.fullmatch(name) is not None


# --- decoding --------------------------------------------------------------------------------


class InvalidVMI(ValueError):
    """A payload that is not a VMI. `causes` holds `(field_path, message)` pairs."""

    def __init__(self, message: str, causes: list[tuple[str, str]] | None = None):
        super().__init__(message)
        self.causes = causes or []


# Maps whose keys are written `[key]`, as Kubernetes' field.Path does for them
# (`metadata.annotations[kubevirt-ch.io/hypervisor]`). Resource maps keep KubeVirt's dotted
# form (`spec.domain.resources.requests.memory`, as its own admitters write it).
_MAP_FIELDS = frozenset({"labels", "annotations", "nodeSelector"})


def field_path(loc: tuple[Any, ...]) -> str:
    """Turn a decoder's location `('spec', 'domain', 'devices', 'disks', 1, 'name')` into
    KubeVirt's `spec.domain.devices.disks[1].name`; map keys as `metadata.annotations[a]`."""
    out = ""
    previous: Any = None
    for part in loc:
        if isinstance(part, int) or previous in _MAP_FIELDS:
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
        previous = part
    return out


def from_decode_error(err: DecodeError, prefix: str = "") -> InvalidVMI:
    causes = []
    for loc, message in err.problems:
        path = field_path(loc)
        if prefix:
            path = f"{prefix}.{path}" if path else prefix
        causes.append((path, f"{path}: {message}" if path else message))
    return InvalidVMI(", ".join(m for _, m in causes), causes)


def parse_vmi(payload: bytes | str | dict[str, Any], *, prefix: str = "") -> VirtualMachineInstance:
    """Decode a VMI from JSON bytes/text or an already decoded object.

    Raises InvalidVMI (never anything else) when the payload is not JSON, not an object, or
    does not fit the VMI's shape; its message names the field paths.
    """
    data: Any = payload
    if isinstance(payload, (bytes, bytearray, str)):
        try:
            data = json.loads(payload)
        except (ValueError, UnicodeDecodeError) as e:
            raise InvalidVMI(f"the VMI is not valid JSON: {e}") from None
        except RecursionError:
            raise InvalidVMI("the VMI is not valid JSON: it is nested too deeply") from None
    if not isinstance(data, dict):
        raise InvalidVMI(f"the VMI must be a JSON object, got {type(data).__name__}")
    try:
        return decode(VirtualMachineInstance, data)
    except DecodeError as e:
        raise from_decode_error(e, prefix) from None
    except RecursionError:  # a dict nested deeper than the interpreter's stack
        raise InvalidVMI("the VMI could not be decoded: it is nested too deeply") from None
