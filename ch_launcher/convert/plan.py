"""The translator's output: a VmConfig, the preparation steps that must run before `vm.create`,
and what the Domain view needs to describe the devices.

Steps are plain data; `ch_launcher.prepare` executes them (the only I/O of a translation).
Each step names the VMI field it serves, so a failure at launch points at the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from ch_launcher.ch.vmconfig import VmConfig
from ch_launcher.convert.errors import Degradation
from ch_launcher.convert.expansion import DiskSizing
from ch_launcher.kubevirt.domain_view import DomainDisk, DomainHostDevice, DomainInterface


@dataclass(frozen=True)
class Step:
    """Base of every preparation step. `field` is the VMI field the step serves."""

    field: str


@dataclass(frozen=True)
class RequireFile(Step):
    """A file (or block device) that must exist before boot: firmware, kernel, a PVC image."""

    path: str
    what: str  # e.g. "firmware hypervisor-fw", "block device of PVC mypvc"
    block_device: bool = False
    missing_note: str = ""  # appended to the "missing" error, e.g. a phrase virt-handler acts on


@dataclass(frozen=True)
class CreateOverlay(Step):
    """A copy-on-write qcow2 overlay at `path` over the read-only `backing` image."""

    path: str
    backing: str
    backing_format: str  # "raw" | "qcow2"; detected at preparation when "" (container disks)


@dataclass(frozen=True)
class CreateSparseImage(Step):
    """A sparse raw image of `size` bytes at `path`; left alone when it already exists (unless
    `overwrite`), as KubeVirt does for PVC `disk.img` files, emptyDisks and hostDisks."""

    path: str
    size: int
    overwrite: bool = False
    # False for images on a mounted volume (PVC, hostDisk): a missing directory means the volume
    # is not mounted, and an image created there would silently land on the container's disk.
    create_parent: bool = True
    # KubeVirt's rule for PVC images (pkg/host-disk/host-disk.go@d923fdb815cd): when the volume has
    # less free space (minus `reserve_bytes`) than `size`, use what is free if that is within
    # `tolerate_less_space_percent` of `size`, else fail.
    tolerate_less_space_percent: int = 0
    reserve_bytes: int = 0


@dataclass(frozen=True)
class ExpandImage(Step):
    """Grow the raw image of a filesystem PVC to the size its claim allows, before boot, when
    the claim grew while the VM was stopped (`convert.expansion`); never shrinks it."""

    sizing: DiskSizing


@dataclass(frozen=True)
class IsoFile:
    """One file of an ISO: inline bytes, or the contents of `source` read at preparation."""

    name: str
    data: bytes | None = None
    source: str | None = None
    optional: bool = False  # a missing `source` is skipped instead of failing


@dataclass(frozen=True)
class BuildIso(Step):
    """An ISO 9660 image (Joliet and Rock Ridge) with `volume_label` and `files`."""

    path: str
    volume_label: str
    files: tuple[IsoFile, ...]
    source_dir: str | None = None  # also add every file of this directory (configMap, secret, ...)


@dataclass(frozen=True)
class BuildCloudInitIso(Step):
    """A cloud-init data source ISO, as KubeVirt's pkg/cloud-init builds it: NoCloud (label
    `cidata`: `user-data`, `meta-data`, `network-config`) or ConfigDrive (label `config-2`:
    `openstack/latest/{user_data,meta_data.json,network_data.json}`).

    User and network data are inline, or read at preparation from the first existing file of
    `*_sources` (the Secret-mounted files of `secretRef`/`networkDataSecretRef`). `meta_data` is
    the JSON object's fields in order; the SSH keys found in `ssh_key_dirs` (accessCredentials)
    are added as `public-keys` (NoCloud) or `public_keys` (ConfigDrive).
    """

    path: str
    data_source: str  # "noCloud" | "configDrive"
    meta_data: tuple[tuple[str, str], ...]
    user_data: bytes | None = None
    user_data_sources: tuple[str, ...] = ()
    network_data: bytes | None = None
    network_data_sources: tuple[str, ...] = ()
    ssh_key_dirs: tuple[str, ...] = ()


@dataclass(frozen=True)
class WaitForSocket(Step):
    """A unix socket another container serves (vhost-user, virtiofsd); bounded wait."""

    path: str
    what: str
    timeout_seconds: float = 30.0


@dataclass(frozen=True)
class DhcpOptions:
    """`interfaces[].dhcpOptions`: options 67, 66, 42 and private options 224-254."""

    boot_file_name: str = ""
    tftp_server_name: str = ""
    ntp_servers: tuple[str, ...] = ()  # IPv4 addresses, validated by the translator
    private_options: tuple[tuple[int, str], ...] = ()  # (code 224..254, value)


@dataclass(frozen=True)
class DhcpSpec:
    """One DHCP server the launcher runs for the guest on the in-pod bridge (`ch_launcher.dhcp`).

    It answers only `mac`, the guest's MAC. Masquerade: the address and gateway are computed
    here from `vmNetworkCIDR`. Bridge: they come from virt-handler's cache file
    `vif-cache-<pod_interface>.json` at start (`address`/`gateway` stay empty).
    """

    field: str  # spec.domain.devices.interfaces[i]
    interface: str  # the VMI interface name
    binding: str  # "masquerade" | "bridge"
    pod_interface: str  # eth0, pod<hash>, net<i>
    bridge: str  # k6t-<...>: where the server listens
    mac: str
    server_ip: str  # the bridge's own address, sent as the server identifier
    address: str = ""  # masquerade: "10.0.2.2/24"
    gateway: str = ""  # masquerade: "10.0.2.1"
    subdomain: str = ""  # spec.subdomain, prepended to the service search domain
    options: DhcpOptions = DhcpOptions()  # frozen: one shared default is safe


@dataclass(frozen=True)
class RequireVfioDevice(Step):
    """A host device passed through with VFIO: its sysfs directory must exist, a PCI device must
    be bound to vfio-pci, and its IOMMU group's `/dev/vfio/<group>` must be there (the device
    plugin mounts it into the pod). Checked before the VMM sees the device, which would only say
    it cannot open the VFIO container. `root` prefixes every host path (tests)."""

    sysfs_path: str  # /sys/bus/pci/devices/<bdf>/ or /sys/bus/mdev/devices/<uuid>/
    what: str  # e.g. "GPU gpu1 (resource nvidia.com/GP102GL_Tesla_P40)"
    root: str = ""


@dataclass(frozen=True)
class HostTuning:
    """What the launcher does to the pod's processes for a VMI, beside the VmConfig
    (docs/process-model.md; `configure_runtime` and the compute configurator decide it).

    `finds_vmm`: virt-handler's KVM runtime will look for the VMM (VFIO, realtime, memLock
    Required: AdjustResources; dedicated CPUs: HandleHousekeeping), so the process model must
    hold or the Sync fails. `lock_memory`: bytes the VMM must be able to lock when `vm.boot`
    maps guest memory for VFIO DMA (0: none). `housekeeping_cpus`: with an isolated emulator
    thread, where every thread of the pod that is not a vCPU runs. `realtime_vcpus`: vCPUs
    whose threads get SCHED_FIFO priority 1, as virt-handler gives QEMU's."""

    finds_vmm: bool = False
    lock_memory: int = 0
    housekeeping_cpus: tuple[int, ...] = ()
    realtime_vcpus: tuple[int, ...] = ()


@dataclass(frozen=True)
class TpmSpec:
    """One swtpm the launcher runs before boot (`convert.tpm`): `socket` is its control socket
    (Cloud Hypervisor's `tpm.socket`), `state_dir` its `--tpmstate dir` (created if missing)."""

    socket: str
    state_dir: str
    persistent: bool
    log_file: str


@dataclass(frozen=True)
class AgentCredential:
    """One `accessCredentials` entry the guest agent propagates (`convert.agent`): the SSH
    public keys of `secret_dir` into the `authorized_keys` of each of `users` (`kind` "ssh"), or
    the passwords of `secret_dir` (a file per user name, `kind` "password")."""

    field: str  # spec.accessCredentials[i].sshPublicKey | .userPassword
    kind: str  # "ssh" | "password"
    secret_dir: str  # <private-dir>/secret/<secret>-access-cred
    users: tuple[str, ...] = ()


@dataclass(frozen=True)
class GuestAgentSpec:
    """Where the launcher reaches the guest's QEMU guest agent (`convert.agent`): guest vsock
    port `port` through the VM's hybrid-vsock socket `socket`, the vsock device being `device`;
    and what it propagates."""

    socket: str
    port: int
    device: str
    credentials: tuple[AgentCredential, ...] = ()


@dataclass
class Plan:
    """Everything a translation decided about one VM, and the one list of it: the configurators
    fill these fields on the `Translation` (a plan being made), which hands them over as a Plan
    (`Translation.plan`). The launcher's manager edits a running VM's plan in place."""

    config: VmConfig
    steps: list[Step] = field(default_factory=list)
    warnings: list[Degradation] = field(default_factory=list)
    disks: list[DomainDisk] = field(default_factory=list)
    interfaces: list[DomainInterface] = field(default_factory=list)
    host_devices: list[DomainHostDevice] = field(default_factory=list)  # VFIO devices, for the Domain
    serial_socket: str | None = None  # where the VMM's serial console listens, if anywhere
    dhcp: list[DhcpSpec] = field(default_factory=list)  # servers to run before the guest boots
    hotplug_disks: set[str] = field(default_factory=set)  # disk names of hotplugged volumes
    tpm: TpmSpec | None = None  # when the VM has a TPM (swtpm runs before boot)
    guest_agent: GuestAgentSpec | None = None  # where the guest agent is reached (every VM has one)
    migration_blockers: list[tuple[str, str]] = field(default_factory=list)  # why it cannot live-migrate
    host: HostTuning = field(default_factory=HostTuning)
    # disk name -> what the size of each PVC-backed disk follows (resized as its claim grows)
    disk_sizing: dict[str, DiskSizing] = field(default_factory=dict)


PLAN_FIELDS = tuple(f.name for f in fields(Plan))
