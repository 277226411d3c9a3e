"""Cloud Hypervisor's `VmConfig`, the parts kubevirt-ch emits (pure).

Field names and types follow `vmm/src/vm_config.rs@v53.0` and the OpenAPI spec
(`reference/data/cloud-hypervisor-v53.0.yaml`). Outbound models forbid unknown fields: the real
VMM silently ignores a misspelt key and uses its default (cloud-hypervisor.md §5.4), so a typo
here must fail in our tests, not in a guest. Every optional field defaults to `None` and is left
out of the JSON, so the VMM's own defaults apply unless we chose otherwise; `to_api()` is the
one serialisation used on the wire.

Inbound models (`VmInfo`, `VmmPingResponse`, `PciDeviceInfo`) ignore unknown fields, because
newer VMMs add them, and read an optional field that is null or of a shape they cannot read as
left out (its default): v53 omits unset options where older releases wrote `null`
(cloud-hypervisor.md §3), and another VMM or an independent simulation may spell an optional
field differently. Only a required field (`VmInfo.state`, `PciDeviceInfo.id`/`bdf`) that is
missing or wrong makes the answer unreadable.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any, ClassVar, Literal

from ch_launcher.jsonmodel import Record, encode

from .versions import reported

ImageType = Literal["FixedVhd", "Qcow2", "Raw", "Vhdx", "Unknown"]
ConsoleMode = Literal["Off", "Pty", "Tty", "File", "Socket", "Null"]
HotplugMethod = Literal["Acpi", "VirtioMem"]
VhostMode = Literal["Client", "Server"]
VmState = Literal["Created", "Running", "Shutdown", "Paused"]


class _Out(Record):
    json_extra: ClassVar[Literal["ignore", "forbid"]] = "forbid"

    def to_api(self) -> dict[str, Any]:
        """The JSON object sent to the VMM: no nulls, no unset fields."""
        return encode(self)


class _In(Record):
    json_lenient: ClassVar[bool] = True  # an optional field read as null or unreadable: its default


# --- payload, CPUs, memory ------------------------------------------------------------------


class PayloadConfig(_Out):
    firmware: str | None = None
    kernel: str | None = None
    cmdline: str | None = None
    initramfs: str | None = None


class CpuTopology(_Out):
    threads_per_core: int
    cores_per_die: int
    dies_per_package: int
    packages: int


class CpuAffinity(_Out):
    vcpu: int
    host_cpus: list[int]


class CpusConfig(_Out):
    boot_vcpus: int
    max_vcpus: int
    topology: CpuTopology | None = None
    kvm_hyperv: bool | None = None
    max_phys_bits: int | None = None
    affinity: list[CpuAffinity] | None = None
    nested: bool | None = None


class MemoryZoneConfig(_Out):
    id: str
    size: int
    shared: bool | None = None
    hugepages: bool | None = None
    hugepage_size: int | None = None
    host_numa_node: int | None = None
    hotplug_size: int | None = None
    prefault: bool | None = None


class MemoryConfig(_Out):
    size: int
    mergeable: bool | None = None
    shared: bool | None = None
    hugepages: bool | None = None
    hugepage_size: int | None = None
    prefault: bool | None = None
    thp: bool | None = None
    hotplug_method: HotplugMethod | None = None
    hotplug_size: int | None = None
    hotplugged_size: int | None = None
    zones: list[MemoryZoneConfig] | None = None


# --- devices --------------------------------------------------------------------------------


class TokenBucket(_Out):
    size: int
    refill_time: int
    one_time_burst: int | None = None


class RateLimiterConfig(_Out):
    bandwidth: TokenBucket | None = None
    ops: TokenBucket | None = None


class DiskConfig(_Out):
    id: str | None = None
    path: str | None = None
    readonly: bool | None = None
    direct: bool | None = None
    num_queues: int | None = None
    queue_size: int | None = None
    vhost_user: bool | None = None
    vhost_socket: str | None = None
    serial: str | None = None
    image_type: ImageType | None = None
    backing_files: bool | None = None
    sparse: bool | None = None
    rate_limiter_config: RateLimiterConfig | None = None
    pci_segment: int | None = None
    iommu: bool | None = None


class NetConfig(_Out):
    id: str | None = None
    tap: str | None = None
    ip: str | None = None
    mask: str | None = None
    mac: str | None = None
    host_mac: str | None = None
    mtu: int | None = None
    num_queues: int | None = None
    queue_size: int | None = None
    vhost_user: bool | None = None
    vhost_socket: str | None = None
    vhost_mode: VhostMode | None = None
    offload_tso: bool | None = None
    offload_ufo: bool | None = None
    offload_csum: bool | None = None
    rate_limiter_config: RateLimiterConfig | None = None
    pci_segment: int | None = None
    iommu: bool | None = None


class FsConfig(_Out):
    tag: str
    socket: str
    num_queues: int = 1
    queue_size: int = 1024
    id: str | None = None
    pci_segment: int | None = None


class VsockConfig(_Out):
    cid: int
    socket: str
    id: str | None = None
    iommu: bool | None = None


class RngConfig(_Out):
    src: str = "/dev/urandom"
    id: str | None = None
    iommu: bool | None = None


class BalloonConfig(_Out):
    size: int
    deflate_on_oom: bool | None = None
    free_page_reporting: bool | None = None
    id: str | None = None


class ConsoleConfig(_Out):
    """virtio-console (`console`, hvc0). The legacy UART (`serial`, ttyS0) is `SerialConfig`."""

    mode: ConsoleMode
    file: str | None = None
    socket: str | None = None
    iommu: bool | None = None


class SerialConfig(_Out):
    """The legacy UART (`serial`): `ConsoleConfig` without the PCI fields."""

    mode: ConsoleMode
    file: str | None = None
    socket: str | None = None


class DeviceConfig(_Out):
    """A VFIO device by its sysfs path (`/sys/bus/pci/devices/<bdf>/`)."""

    path: str
    id: str | None = None
    iommu: bool | None = None
    pci_segment: int | None = None
    x_nv_gpudirect_clique: int | None = None


class PlatformConfig(_Out):
    num_pci_segments: int | None = None
    system_serial_number: str | None = None
    system_uuid: str | None = None
    system_manufacturer: str | None = None
    system_product_name: str | None = None
    system_version: str | None = None
    system_family: str | None = None
    system_sku_number: str | None = None
    chassis_asset_tag: str | None = None
    oem_strings: list[str] | None = None


class NumaDistance(_Out):
    destination: int
    distance: int


class NumaConfig(_Out):
    guest_numa_id: int
    cpus: list[int] | None = None
    distances: list[NumaDistance] | None = None
    memory_zones: list[str] | None = None
    pci_segments: list[int] | None = None


class TpmConfig(_Out):
    socket: str


class VmConfig(_Out):
    cpus: CpusConfig | None = None
    memory: MemoryConfig | None = None
    payload: PayloadConfig | None = None
    disks: list[DiskConfig] | None = None
    net: list[NetConfig] | None = None
    rng: RngConfig | None = None
    balloon: BalloonConfig | None = None
    fs: list[FsConfig] | None = None
    serial: SerialConfig | None = None
    console: ConsoleConfig | None = None
    devices: list[DeviceConfig] | None = None
    vsock: VsockConfig | None = None
    numa: list[NumaConfig] | None = None
    platform: PlatformConfig | None = None
    tpm: TpmConfig | None = None
    iommu: bool | None = None
    watchdog: bool | None = None
    pvpanic: bool | None = None


# --- responses (inbound) --------------------------------------------------------------------


class VmmPingResponse(_In):
    """`GET vmm.ping`. `version` is what the answer names (versions.reported): its `version`, or
    its `build_version` when `version` is missing or names none; "" when neither does."""

    version: str = ""
    build_version: str = ""
    pid: int | None = None
    features: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.version = reported(self.version, self.build_version)


class PciDeviceInfo(_In):
    id: str
    bdf: str


class VmInfo(_In):
    """`GET /vm.info`. `config` stays a plain dict: it echoes whatever the VMM filled in."""

    state: VmState
    config: dict[str, Any] = field(default_factory=dict)
    memory_actual_size: int | None = None
    device_tree: dict[str, Any] | None = None
