"""Inputs of a translation and the working state configurators share.

`LauncherEnv` holds the launcher's directories (from its flags) and, inside a pod, the facts of
that pod (`PodFacts`). The admission webhook translates with `pod=None`: every configurator
must then check what it can without the pod and leave pod-dependent values as placeholders, so
the webhook and the launcher agree on what is supported. What the webhook knows instead, from
the cluster's KubeVirt CR, is which host-device resources are USB (`PermittedHostDevices`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from ch_launcher.ch.vmconfig import VmConfig
from ch_launcher.convert.errors import Degradation, Reason, UnsupportedFeature, UnsupportedFeatures
from ch_launcher.convert.plan import PLAN_FIELDS, Plan
from ch_launcher.convert.topology import HostTopology
from ch_launcher.kubevirt import paths
from ch_launcher.kubevirt.quantity import parse_quantity
from ch_launcher.kubevirt.vmi import Quantity, VirtualMachineInstance


@dataclass(frozen=True)
class PodFacts:
    """What the launcher reads from its pod before translating (none of it exists at admission)."""

    environ: Mapping[str, str] = field(default_factory=dict)  # PCI_RESOURCE_*, POD_NAME, ...
    cpuset: tuple[int, ...] = ()  # CPUs of the compute container's cpuset
    link_mtu: Mapping[str, int] = field(default_factory=dict)  # link name (tap0, eth0, ...) -> MTU
    link_mac: Mapping[str, str] = field(default_factory=dict)  # link name -> MAC (eth0's is the guest's)
    network_info: str | None = None  # text of /etc/podinfo/network-info (SR-IOV, vhost-user); None: absent
    memory_nodes: tuple[int, ...] = ()  # NUMA nodes of the container's cpuset.mems (empty: unknown)
    topology: HostTopology | None = None  # the host's NUMA cells and cores from sysfs (None: unknown)
    host_root: str = ""  # prefixes host paths the launcher checks (VFIO devices); "" in a pod, a directory in tests


@dataclass(frozen=True)
class PermittedHostDevices:
    """The resource names the KubeVirt CR permits as host devices
    (`spec.configuration.permittedHostDevices`: `pciHostDevices[]`, `mediatedDevices[]`, `usb[]`,
    each entry's `resourceName`): a resource's kind before any pod exists (in a pod, the device
    plugin's variable tells it: `convert/vfio.py`). Empty: nothing known (no CR at hand).

    KubeVirt keeps no name out of two lists; a name listed as USB and as PCI or mediated is
    whichever a node's device plugin serves, so it counts as neither.
    """

    pci: frozenset[str] = frozenset()
    mediated: frozenset[str] = frozenset()
    usb: frozenset[str] = frozenset()

    def is_usb(self, resource: str) -> bool:
        """Permitted as USB only: every device of it is USB."""
        return resource in self.usb and resource not in self.pci and resource not in self.mediated

    def is_vfio(self, resource: str) -> bool:
        """Permitted as PCI or mediated only: every device of it is one Cloud Hypervisor passes."""
        return resource not in self.usb and (resource in self.pci or resource in self.mediated)


@dataclass(frozen=True)
class LauncherEnv(paths.LauncherPaths):
    """Directories of the launcher (every path derives from the flags: docs/architecture.md), the pod's facts
    in the launcher, the KubeVirt CR's permitted host devices and default eviction strategy at
    admission."""

    root_swtpm_dir: str = paths.ROOT_SWTPM_DIR
    pod: PodFacts | None = None
    permitted_host_devices: PermittedHostDevices = field(default_factory=PermittedHostDevices)
    # The KubeVirt CR's spec.configuration.evictionStrategy, which applies to a VMI without its
    # own ("": not known, or none)
    eviction_strategy: str = ""


@dataclass(frozen=True)
class SMBios:
    manufacturer: str = ""
    product: str = ""
    version: str = ""
    sku: str = ""
    family: str = ""


@dataclass(frozen=True)
class LauncherOptions:
    """The parts of `VirtualMachineOptions` (Sync request) that translation uses."""

    smbios: SMBios = field(default_factory=SMBios)
    interface_domain_attachment: Mapping[str, str] = field(default_factory=dict)
    preallocated_volumes: tuple[str, ...] = ()
    serial_console_log_disabled: bool = False
    free_page_reporting_disabled: bool = False
    topology: HostTopology | None = None  # the node's topology virt-handler sends (VirtualMachineOptions.topology)


@dataclass(frozen=True)
class GuestNumaCell:
    """One guest NUMA node of `numa.guestMappingPassthrough`: the host cell it mirrors, its vCPUs,
    its memory, and its distances to the other guest nodes."""

    guest_id: int
    host_id: int
    vcpus: tuple[int, ...]
    memory: int = 0
    distances: tuple[tuple[int, int], ...] = ()  # (guest id, distance)


class Translation(Plan):
    """One translation: a plan being made (every field of `Plan`), its inputs, and what was found.

    Configurators read `vmi`, `env` and `options`, fill the plan's fields (`config`, `steps`,
    `disks`, `interfaces`, ...), and report with `unsupported()` / `warn()`. A configurator may
    also raise `UnsupportedFeature`; `checking()` records it and lets the others run, so the user
    sees every problem at once. `plan()` hands the result over.
    """

    def __init__(self, vmi: VirtualMachineInstance, env: LauncherEnv, options: LauncherOptions):
        super().__init__(config=VmConfig())
        self.vmi = vmi
        self.env = env
        self.options = options
        self.problems: list[UnsupportedFeature] = []
        self.shared_memory_reasons: list[str] = []  # devices that need memory.shared (or hugepages)
        self.guest_numa: list[GuestNumaCell] = []  # compute decides, memory sizes (numa passthrough)

    def plan(self) -> Plan:
        """The plan made (sharing this translation's values: the translation is done with)."""
        return Plan(**{name: getattr(self, name) for name in PLAN_FIELDS})

    @property
    def vmi_dir(self) -> str:
        """`<private-dir>/<vmi-uid>`: console sockets and per-VM files live here."""
        return f"{self.env.private_dir}/{self.vmi.metadata.uid}"

    def unsupported(self, field_path: str, message: str, reason: Reason = "FieldValueNotSupported") -> None:
        self.problems.append(UnsupportedFeature(field_path, message, reason))

    def quantity(self, field_path: str, value: Quantity) -> Decimal | None:
        """`value` as an exact number, or None after reporting it as invalid: not a quantity, or
        less than 0."""
        try:
            n = parse_quantity(value)
        except ValueError as e:
            self.unsupported(field_path, f"{field_path} '{value}' is not a valid quantity: {e}", "FieldValueInvalid")
            return None
        if n < 0:
            self.unsupported(field_path, f"{field_path} '{value}': must be greater than or equal to 0.",
                             "FieldValueInvalid")
            return None
        return n

    def warn(self, field_path: str, message: str) -> None:
        self.warnings.append(Degradation(field_path, message))

    def device_ids(self) -> set[str]:
        """Ids already given to devices of the config. Cloud Hypervisor needs them unique across
        every device type (cloud-hypervisor vmm/src/config.rs@v53.0, IdentifierNotUnique)."""
        c = self.config
        ids: set[str] = set()
        for devices in (c.disks, c.net, c.fs, c.devices):
            ids.update(d.id for d in devices or () if d.id)
        return ids

    def need_shared_memory(self, why: str) -> None:
        """Record that a device (virtio-fs, vhost-user, ...) needs guest memory shared."""
        self.shared_memory_reasons.append(why)

    @contextlib.contextmanager
    def checking(self) -> Iterator[None]:
        """Run a configurator step; record an UnsupportedFeature it raises and carry on."""
        try:
            yield
        except UnsupportedFeatures as e:
            self.problems.extend(e.problems)
        except UnsupportedFeature as e:
            self.problems.append(e)
