"""The inbound model of `kubevirt.io/v1 VirtualMachineInstance`, as far as ch-launcher reads it.

Attribute names are the JSON names of KubeVirt's API (`staging/src/kubevirt.io/api/core/v1/
types.go`, `schema.go`), camelCase included, so that a field path built from attribute names is
the path users see in KubeVirt's own errors (`spec.domain.devices.disks[1].cdrom`).

Inbound models ignore unknown fields (upstream adds fields with every release) and treat JSON
`null` as "absent". Presence matters in KubeVirt's API (`rng: {}` switches a device on), so
optional blocks are `None` when absent and an `Empty` object when present.

`parse_vmi()` raises `InvalidVMI` with KubeVirt-style field paths for a payload that does not
decode; it never raises anything else.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, ValidationError, model_validator
from pydantic_core import PydanticCustomError


def _quantity(value: Any) -> str | int | float:
    # One check, one message: a plain `str | int | float` union reports a wrong value three
    # times (once per member) and turns `true` into the quantity 1. The text is parsed where it
    # is used (`kubevirt.quantity`), so a malformed one is reported by the translator.
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise PydanticCustomError("quantity", "must be a quantity: a string such as '1Gi', or a number")
    return value


Quantity = Annotated[str | int | float, PlainValidator(_quantity)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=False)

    @model_validator(mode="before")
    @classmethod
    def _drop_nulls(cls, data: Any) -> Any:
        # Go decodes `null` as the zero value; treat it as "absent" so defaults apply.
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data


class Empty(_Model):
    """A presence-only block such as `masquerade: {}` or `rng: {}`."""


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
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    ownerReferences: list[OwnerReference] = Field(default_factory=list)
    deletionTimestamp: str | None = None
    creationTimestamp: str | None = None


# --- spec.domain: compute and memory ---------------------------------------------------------


class ResourceRequirements(_Model):
    requests: dict[str, Quantity] = Field(default_factory=dict)
    limits: dict[str, Quantity] = Field(default_factory=dict)
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
    features: list[CPUFeature] = Field(default_factory=list)
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
    ntpServers: list[str] = Field(default_factory=list)
    privateOptions: list[DHCPPrivateOptions] = Field(default_factory=list)


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
    ports: list[Port] = Field(default_factory=list)
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
    disks: list[Disk] = Field(default_factory=list)
    watchdog: Watchdog | None = None
    interfaces: list[Interface] = Field(default_factory=list)
    inputs: list[Input] = Field(default_factory=list)
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
    gpus: list[GPU] = Field(default_factory=list)
    downwardMetrics: Empty | None = None
    panicDevices: list[PanicDevice] = Field(default_factory=list)
    filesystems: list[Filesystem] = Field(default_factory=list)
    hostDevices: list[HostDevice] = Field(default_factory=list)
    clientPassthrough: Empty | None = None
    sound: SoundDevice | None = None
    tpm: TPMDevice | None = None
    video: dict[str, Any] | None = None


class DomainSpec(_Model):
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    cpu: CPU | None = None
    memory: Memory | None = None
    machine: Machine | None = None
    firmware: Firmware | None = None
    clock: Clock | None = None
    features: Features | None = None
    devices: Devices = Field(default_factory=Devices)
    ioThreadsPolicy: str = ""
    ioThreads: dict[str, Any] | None = None
    chassis: dict[str, Any] | None = None
    launchSecurity: LaunchSecurity | None = None


# --- spec.volumes and spec.networks ----------------------------------------------------------


class ContainerDiskSource(_Model):
    image: str = ""
    path: str = ""
    imagePullPolicy: str = ""
    imagePullSecret: str = ""


class PVCSource(_Model):
    claimName: str
    readOnly: bool = False
    hotpluggable: bool = False


class DataVolumeSource(_Model):
    name: str
    hotpluggable: bool = False


class EphemeralSource(_Model):
    persistentVolumeClaim: PVCSource


class LocalObjectReference(_Model):
    name: str = ""


class CloudInitSource(_Model):
    """Shared shape of `cloudInitNoCloud` and `cloudInitConfigDrive`."""

    userData: str | None = None
    userDataBase64: str | None = None
    secretRef: LocalObjectReference | None = None
    networkData: str | None = None
    networkDataBase64: str | None = None
    networkDataSecretRef: LocalObjectReference | None = None


class EmptyDiskSource(_Model):
    capacity: Quantity


class HostDiskSource(_Model):
    path: str
    type: str  # "Disk" | "DiskOrCreate"
    capacity: Quantity | None = None
    shared: bool | None = None


class ConfigMapSource(_Model):
    name: str = ""
    optional: bool | None = None
    volumeLabel: str = ""


class SecretSource(_Model):
    secretName: str = ""
    optional: bool | None = None
    volumeLabel: str = ""


class ServiceAccountSource(_Model):
    serviceAccountName: str = ""


class DownwardAPISource(_Model):
    fields: list[dict[str, Any]] = Field(default_factory=list)
    volumeLabel: str = ""


class Volume(_Model):
    name: str
    containerDisk: ContainerDiskSource | None = None
    ephemeral: EphemeralSource | None = None
    cloudInitNoCloud: CloudInitSource | None = None
    cloudInitConfigDrive: CloudInitSource | None = None
    persistentVolumeClaim: PVCSource | None = None
    dataVolume: DataVolumeSource | None = None
    emptyDisk: EmptyDiskSource | None = None
    hostDisk: HostDiskSource | None = None
    configMap: ConfigMapSource | None = None
    secret: SecretSource | None = None
    serviceAccount: ServiceAccountSource | None = None
    downwardAPI: DownwardAPISource | None = None
    downwardMetrics: Empty | None = None
    memoryDump: dict[str, Any] | None = None
    sysprep: dict[str, Any] | None = None

    SOURCES: ClassVar[tuple[str, ...]] = (
        "containerDisk", "ephemeral", "cloudInitNoCloud", "cloudInitConfigDrive",
        "persistentVolumeClaim", "dataVolume", "emptyDisk", "hostDisk", "configMap", "secret",
        "serviceAccount", "downwardAPI", "downwardMetrics", "memoryDump", "sysprep",
    )

    @property
    def source_kinds(self) -> list[str]:
        """The JSON names of the volume sources that are set (KubeVirt requires exactly one)."""
        return [kind for kind in self.SOURCES if getattr(self, kind) is not None]

    @property
    def source_kind(self) -> str:
        """The JSON name of the first volume source that is set, or `""` when none is."""
        kinds = self.source_kinds
        return kinds[0] if kinds else ""


class PodNetwork(_Model):
    vmNetworkCIDR: str = ""
    vmIPv6NetworkCIDR: str = ""


class MultusNetwork(_Model):
    networkName: str
    default: bool = False


class Network(_Model):
    name: str
    pod: PodNetwork | None = None
    multus: MultusNetwork | None = None


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
    domain: DomainSpec = Field(default_factory=DomainSpec)
    volumes: list[Volume] = Field(default_factory=list)
    networks: list[Network] = Field(default_factory=list)
    terminationGracePeriodSeconds: int | None = None
    evictionStrategy: str | None = None
    startStrategy: str | None = None
    livenessProbe: Probe | None = None
    readinessProbe: Probe | None = None
    hostname: str = ""
    subdomain: str = ""
    accessCredentials: list[dict[str, Any]] = Field(default_factory=list)
    architecture: str = ""
    nodeSelector: dict[str, str] = Field(default_factory=dict)
    priorityClassName: str = ""


# --- status ----------------------------------------------------------------------------------


class PVCInfo(_Model):
    accessModes: list[str] = Field(default_factory=list)
    volumeMode: str = ""  # "Filesystem" | "Block"
    capacity: dict[str, Quantity] = Field(default_factory=dict)
    requests: dict[str, Quantity] = Field(default_factory=dict)
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
    """`status.migrationState.sourceState` / `targetState` (decentralized migrations)."""

    migrationUID: str = ""
    virtualMachineInstanceUID: str = ""
    pod: str = ""


class MigrationState(_Model):
    """What a launcher reads of `status.migrationState` (kubevirt staging/src/kubevirt.io/api/
    core/v1/types.go@d923fdb815cd `VirtualMachineInstanceMigrationState`)."""

    targetPod: str = ""
    sourcePod: str = ""
    migrationUID: str = ""
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
    volumeStatus: list[VolumeStatus] = Field(default_factory=list)
    interfaces: list[InterfaceStatus] = Field(default_factory=list)
    migrationState: MigrationState | None = None
    migrationTransport: str = ""  # "Unix" for every VMI created by KubeVirt >= 1.5; "" = legacy TCP
    conditions: list[Condition] = Field(default_factory=list)
    launcherContainerImageVersion: str = ""
    runtimeUser: int = 0
    memory: MemoryStatus | None = None
    currentCPUTopology: CPUTopology | None = None


class VirtualMachineInstance(_Model):
    apiVersion: str = "kubevirt.io/v1"
    kind: str = "VirtualMachineInstance"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: VMISpec = Field(default_factory=VMISpec)
    status: VMIStatus = Field(default_factory=VMIStatus)

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
    """Turn a pydantic location `('spec', 'domain', 'devices', 'disks', 1, 'name')` into
    KubeVirt's `spec.domain.devices.disks[1].name`; map keys as `metadata.annotations[a]`."""
    out = ""
    previous: Any = None
    for part in loc:
        if part == "[key]":  # pydantic's marker for "the key itself is invalid"
            continue
        if isinstance(part, int) or previous in _MAP_FIELDS:
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
        previous = part
    return out


def from_validation_error(err: ValidationError, prefix: str = "") -> InvalidVMI:
    causes = []
    for e in err.errors(include_url=False):
        path = field_path(e["loc"])  # the model has no unions, whose members would add type tags
        if prefix:
            path = f"{prefix}.{path}" if path else prefix
        causes.append((path, f"{path}: {e['msg']}" if path else e["msg"]))
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
        return VirtualMachineInstance.model_validate(data)
    except ValidationError as e:
        raise from_validation_error(e, prefix) from None
    except (TypeError, ValueError, RecursionError) as e:  # defensive: pydantic wraps most errors
        raise InvalidVMI(f"the VMI could not be decoded: {e}") from None

