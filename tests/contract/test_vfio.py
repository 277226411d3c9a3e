"""A VFIO device in the VM config, as far as a host without VFIO can show it (this one: its kernel
has no CONFIG_VFIO, so there is no /dev/vfio): `vm.create` takes the device as sent and
`vm.info` echoes it; `vm.boot` fails creating it with the VMM's own words, leaving the VM
created but not running (the launcher then deletes it, test_runtime_probe.py). The launcher
checks the device before the VMM sees it (prepare/vfio.py); these are the VMM's answers when
something is missing anyway. Both backends; what needs a device is in docs/testing.md."""

from __future__ import annotations

import os

import pytest

from ch_launcher.ch.api import InternalError
from tests.contract.harness import Vmm

DEVICE = {"path": "/sys/bus/pci/devices/0000:65:00.0/", "id": "gpu-gpu1"}


@pytest.fixture
def without_vfio() -> None:
    if os.path.exists("/dev/vfio/vfio"):
        pytest.skip("this host has VFIO: the missing-container answer cannot be seen here")


def test_vm_create_takes_a_vfio_device_as_sent_and_vm_boot_fails_opening_the_container(vmm: Vmm, without_vfio):
    vmm.client.create(vmm.config(devices=[DEVICE]))
    assert vmm.client.info().config["devices"][0]["path"] == DEVICE["path"]
    with pytest.raises(InternalError) as e:
        vmm.client.boot()
    assert e.value.messages[:5] == [
        "Error from API", "The VM could not boot", "Error from device manager", "Cannot create a VFIO device",
        "failed to open /dev/vfio/vfio container: No such file or directory (os error 2)"]
    assert vmm.client.info().state == "Created"  # nothing runs; the config stays until deleted
