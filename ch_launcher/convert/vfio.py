"""VFIO passthrough devices from what the device plugins put in the pod, pure.

Device plugins tell the pod which host device it got through environment variables
(`pkg/virt-launcher/virtwrap/device/hostdevice/addresspool.go@d923fdb815cd`): the name is
`<prefix>_<resource name>` upper-cased with `/` and `.` turned into `_` (`util.ResourceNameToEnvVar`),
the value a comma-separated list of addresses. Prefixes (`api/core/v1/types.go`):
`PCI_RESOURCE` (PCI addresses `dddd:bb:dd.f`), `MDEV_PCI_RESOURCE` (mediated-device UUIDs),
`USB_RESOURCE` (`bus:device`). Taking an address removes it from every resource, so two
devices never get the same one (`AddressPool.Pop`).

Cloud Hypervisor takes a VFIO device by its sysfs directory (`DeviceConfig.path`,
cloud-hypervisor.md §7.2). It has no USB controller, so USB host devices cannot be passed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

from ch_launcher.ch.vmconfig import DeviceConfig
from ch_launcher.kubevirt.domain_view import DomainHostDevice

PCI_RESOURCE_PREFIX = "PCI_RESOURCE"
MDEV_RESOURCE_PREFIX = "MDEV_PCI_RESOURCE"
USB_RESOURCE_PREFIX = "USB_RESOURCE"

_PCI = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-1][0-9a-fA-F]\.[0-7]$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


class VfioError(ValueError):
    """A device plugin variable is missing or malformed; the message names it."""


def resource_env_var(prefix: str, resource: str) -> str:
    """`nvidia.com/GP102GL_Tesla_P40` -> `PCI_RESOURCE_NVIDIA_COM_GP102GL_TESLA_P40`."""
    return f"{prefix}_{resource.upper().replace('/', '_').replace('.', '_')}"


def normalise_pci_address(address: str) -> str:
    """`0000:65:00.2` (any case) -> lower case; VfioError unless it is `dddd:bb:dd.f`."""
    address = address.strip()
    if not _PCI.match(address):
        raise VfioError(f"{address!r} is not a PCI address of the form dddd:bb:dd.f")
    return address.lower()


def pci_sysfs_path(address: str) -> str:
    return f"/sys/bus/pci/devices/{normalise_pci_address(address)}/"


def mdev_sysfs_path(uuid: str) -> str:
    if not _UUID.match(uuid.strip()):
        raise VfioError(f"{uuid!r} is not a mediated-device UUID")
    return f"/sys/bus/mdev/devices/{uuid.strip().lower()}/"


def domain_host_device(device: DeviceConfig) -> DomainHostDevice:
    """The Domain's view of a VFIO device this module made (its id is the user alias)."""
    name = device.path.rstrip("/").rsplit("/", 1)[-1]
    if "/bus/mdev/" in device.path:
        return DomainHostDevice(alias=device.id or "", mdev_uuid=name)
    return DomainHostDevice(alias=device.id or "", pci_address=name)


class AddressPool:
    """Addresses per resource, read from one prefix of the pod environment.

    A resource whose variable is absent is unknown to the pool (`has()` is False); a variable
    that is set but empty means the plugin gave no device. `validate` checks each address, and
    a malformed one raises VfioError naming the variable.
    """

    def __init__(self, environ: Mapping[str, str], prefix: str, resources: Iterable[str],
                 validate: Callable[[str], str] | None = None) -> None:
        self.prefix = prefix
        self._addresses: dict[str, list[str]] = {}
        self._malformed: dict[str, str] = {}  # resource -> why its variable is unusable
        for resource in dict.fromkeys(resources):
            var = resource_env_var(prefix, resource)
            if var not in environ:
                continue
            values = [v.strip() for v in environ[var].strip().rstrip(",").split(",") if v.strip()]
            try:
                values = [validate(v) for v in values] if validate is not None else values
            except VfioError as e:
                self._malformed[resource] = f"{var}={environ[var]!r}: {e}"
                values = []
            self._addresses[resource] = values

    def has(self, resource: str) -> bool:
        return resource in self._addresses

    def pop(self, resource: str) -> str:
        """The next free address of `resource`; VfioError when the plugin gave no more, or when
        its variable is malformed (the message names the variable and its value)."""
        if resource in self._malformed:
            raise VfioError(self._malformed[resource])
        addresses = self._addresses.get(resource)
        if not addresses:
            raise VfioError(f"{resource_env_var(self.prefix, resource)} lists no more devices "
                            f"for resource {resource!r}")
        chosen = addresses[0]
        for name, values in self._addresses.items():
            self._addresses[name] = [a for a in values if a != chosen]
        return chosen


class DevicePluginPools:
    """The PCI, mediated-device and USB pools for a set of resource names."""

    def __init__(self, environ: Mapping[str, str], resources: Iterable[str]):
        resources = list(resources)
        self.pci = AddressPool(environ, PCI_RESOURCE_PREFIX, resources, normalise_pci_address)
        self.mdev = AddressPool(environ, MDEV_RESOURCE_PREFIX, resources, _check_uuid)
        self.usb = AddressPool(environ, USB_RESOURCE_PREFIX, resources)

    def device_for(self, resource: str, device_id: str) -> DeviceConfig:
        """A VFIO DeviceConfig for one device of `resource`.

        Raises VfioError when the resource is USB (no USB in Cloud Hypervisor), or when no
        variable for it exists, naming the variables looked for.
        """
        if self.pci.has(resource):
            return DeviceConfig(path=pci_sysfs_path(self.pci.pop(resource)), id=device_id)
        if self.mdev.has(resource):
            return DeviceConfig(path=mdev_sysfs_path(self.mdev.pop(resource)), id=device_id)
        if self.usb.has(resource):
            raise VfioError(f"resource {resource!r} is a USB device "
                            f"({resource_env_var(USB_RESOURCE_PREFIX, resource)}); Cloud Hypervisor "
                            f"has no USB controller")
        raise VfioError(f"the pod environment has neither {resource_env_var(PCI_RESOURCE_PREFIX, resource)} "
                        f"nor {resource_env_var(MDEV_RESOURCE_PREFIX, resource)} for resource "
                        f"{resource!r}; was it requested from a device plugin?")


def _check_uuid(value: str) -> str:
    mdev_sysfs_path(value)
    return value.lower()
