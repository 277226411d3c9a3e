"""What the functional stories about the host share: the memlock limits a launcher pod starts
with and virt-handler raises (docs/process-model.md), a VFIO host tree for a
GPU, and waiting for a condition of the host."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import resource
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from tests.functional import kubevirt_runtime as vh

T = TypeVar("T")

UNLIMITED = vh.can_raise_memlock_to_unlimited()
SOFT, HARD = resource.getrlimit(resource.RLIMIT_MEMLOCK)  # what this process started with


# Where virt-handler's raise to unlimited is not permitted (no CAP_SYS_RESOURCE here), the
# launcher starts with a soft limit below the hard one and the raise goes to the hard limit: the
# VM then locks at most that much.
GUEST = 128 << 20 if UNLIMITED else HARD
START_SOFT = 64 << 10


async def wait_for(predicate: Callable[[], T], timeout: float = 15.0, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not within {timeout} s")
        await asyncio.sleep(0.02)


@contextlib.contextmanager
def soft_memlock(limit: int | None) -> Iterator[None]:
    """Start what starts inside with a lower soft memlock limit (the hard one stays)."""
    if limit is None:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (soft, hard))


BDF = "0000:65:00.0"
RESOURCE = "nvidia.com/GP102GL_Tesla_P40"


def host_tree(root: pathlib.Path, *, bound: bool = True) -> str:
    """A host as sysfs and the device plugin's /dev/vfio show a GPU bound to vfio-pci."""
    device = root / "sys/bus/pci/devices" / BDF
    device.mkdir(parents=True)
    (root / "sys/bus/pci/drivers/vfio-pci").mkdir(parents=True)
    (root / "sys/kernel/iommu_groups/42").mkdir(parents=True)
    os.symlink("../../../bus/pci/drivers/vfio-pci" if bound else "../../../bus/pci/drivers/nvidia", device / "driver")
    os.symlink("../../../../kernel/iommu_groups/42", device / "iommu_group")
    (root / "dev/vfio").mkdir(parents=True)
    for node in ("42", "vfio"):
        (root / "dev/vfio" / node).touch()
    return str(root)
