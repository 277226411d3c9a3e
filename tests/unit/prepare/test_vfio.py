"""The check of a VFIO device before the VMM sees it: each missing part named, with the field."""

from __future__ import annotations

import os
import pathlib

import pytest

from ch_launcher.convert.plan import RequireVfioDevice
from ch_launcher.prepare import PreparationError, execute

BDF = "0000:65:00.0"
FIELD = "spec.domain.devices.gpus[0]"


def host(root: pathlib.Path, *, driver: str | None = "vfio-pci", group: str | None = "42",
         dev_group: bool = True, container: bool = True) -> pathlib.Path:
    """A host tree as sysfs and the device plugin's /dev/vfio show it."""
    device = root / "sys/bus/pci/devices" / BDF
    device.mkdir(parents=True)
    if driver is not None:
        (root / "sys/bus/pci/drivers" / driver).mkdir(parents=True)
        os.symlink(f"../../../bus/pci/drivers/{driver}", device / "driver")
    if group is not None:
        (root / "sys/kernel/iommu_groups" / group).mkdir(parents=True)
        os.symlink(f"../../../../kernel/iommu_groups/{group}", device / "iommu_group")
    (root / "dev/vfio").mkdir(parents=True)
    if dev_group and group is not None:
        (root / "dev/vfio" / group).touch()
    if container:
        (root / "dev/vfio/vfio").touch()
    return root


def check(root: pathlib.Path, path: str = f"/sys/bus/pci/devices/{BDF}/") -> None:
    execute([RequireVfioDevice(field=FIELD, sysfs_path=path, what="GPU gpu1 (nvidia.com/T4)", root=str(root))])


def test_a_bound_device_with_its_group_in_the_pod_passes(tmp_path):
    check(host(tmp_path))


@pytest.mark.parametrize("kwargs, says", [
    ({"driver": "nvidia"}, "is bound to nvidia, not vfio-pci"),
    ({"driver": None}, "is bound to no driver, not vfio-pci"),
    ({"group": None}, "has no IOMMU group"),
    ({"dev_group": False}, "/dev/vfio/42 (IOMMU group 42) is not in the pod"),
    ({"container": False}, "/dev/vfio/vfio (IOMMU group 42) is not in the pod"),
])
def test_each_missing_part_is_named_with_the_field(tmp_path, kwargs, says):
    with pytest.raises(PreparationError) as e:
        check(host(tmp_path, **kwargs))
    assert e.value.field == FIELD
    assert e.value.message.startswith(f"{FIELD}: GPU gpu1 (nvidia.com/T4): ") and says in e.value.message


def test_a_device_the_host_does_not_have_is_named(tmp_path):
    with pytest.raises(PreparationError, match=f"/sys/bus/pci/devices/{BDF}/ does not exist on this node"):
        check(tmp_path)


def test_a_variant_vfio_driver_is_fine(tmp_path):
    check(host(tmp_path, driver="mlx5_vfio_pci"))


def test_a_mediated_device_needs_no_driver_but_its_group(tmp_path):
    uuid = "4b20d080-1b54-4048-85b3-a6a62d165c01"
    mdev = tmp_path / "sys/bus/mdev/devices" / uuid
    mdev.mkdir(parents=True)
    (tmp_path / "sys/kernel/iommu_groups/7").mkdir(parents=True)
    os.symlink("../../../../kernel/iommu_groups/7", mdev / "iommu_group")
    (tmp_path / "dev/vfio").mkdir(parents=True)
    (tmp_path / "dev/vfio/7").touch()
    (tmp_path / "dev/vfio/vfio").touch()
    check(tmp_path, f"/sys/bus/mdev/devices/{uuid}/")
