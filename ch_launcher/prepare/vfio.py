"""Is a VFIO device really there for the VMM? (`RequireVfioDevice`; imported only for VFIO VMIs)

Cloud Hypervisor opens the VFIO container `/dev/vfio/vfio` first, then the device's IOMMU group
`/dev/vfio/<group>` found through `<sysfs path>/iommu_group` (vfio-ioctls, legacy
container/group mode). When something is missing its error is only "Cannot create a VFIO
device: failed to open /dev/vfio/vfio container: No such file or directory", after the VMM has
started creating the VM. The device plugins that allocate these devices (KubeVirt's
permittedHostDevices plugin, vendors' GPU plugins, the SR-IOV network device plugin) mount
`/dev/vfio/vfio` and the group's node into the compute container; this check says which part is
missing, for which VMI field, before the VMM sees the device:

1. the sysfs directory exists (`/sys/bus/pci/devices/<bdf>/` or `/sys/bus/mdev/devices/<uuid>/`);
2. a PCI device is bound to a VFIO driver (`vfio-pci` or a variant driver: its name contains
   `vfio`);
3. it has an IOMMU group, whose `/dev/vfio/<group>` and `/dev/vfio/vfio` exist in the pod and can
   be opened for reading and writing by this user.
"""

from __future__ import annotations

import os

from ch_launcher.convert.plan import RequireVfioDevice
from ch_launcher.prepare.errors import PreparationError

VFIO_CONTAINER = "/dev/vfio/vfio"


def require_vfio_device(step: RequireVfioDevice) -> None:
    """Raise PreparationError naming the field, the device and what is missing."""
    root = step.root.rstrip("/")
    sysfs = root + step.sysfs_path

    def fail(why: str) -> None:
        raise PreparationError(step.field, f"{step.field}: {step.what}: {why}")

    if not os.path.isdir(sysfs):
        fail(f"{step.sysfs_path} does not exist on this node: the device plugin allocated a device the host does "
             "not have")
    if "/bus/pci/" in step.sysfs_path:
        try:
            driver = os.path.basename(os.readlink(os.path.join(sysfs, "driver")))
        except OSError:
            driver = ""
        if "vfio" not in driver:
            fail(f"{step.sysfs_path} is bound to {driver or 'no driver'}, not vfio-pci: it cannot be passed through")
    try:
        group = os.path.basename(os.readlink(os.path.join(sysfs, "iommu_group")))
    except OSError:
        fail(f"{step.sysfs_path} has no IOMMU group (is the IOMMU on in the host kernel?)")
    for node in (f"/dev/vfio/{group}", VFIO_CONTAINER):
        path = root + node
        if not os.path.exists(path):
            fail(f"{node} (IOMMU group {group}) is not in the pod: the device plugin did not mount it")
        if not os.access(path, os.R_OK | os.W_OK):
            fail(f"{node} cannot be opened for reading and writing by uid {os.getuid()}")
