"""Hot-unplug and resize as the real VMM does them (cloud-hypervisor `vmm/src/device_manager.rs`,
`vmm/src/memory_manager.rs`, `virtio-devices/src/mem.rs` @v53.0), on the simulated VMM.

`vm.remove-device` takes the device out of the config at once and asks the guest (ACPI); the
device, its PCI slot and its image lock stay until the guest ejects it (on the real VMM the tiny
guest ejects as a Linux guest does, or ignores it when told to), and only then comes
`vm:device-removed`. `vm.resize` of virtio-mem memory asks the guest's driver for more; the VM's
`memory_actual_size` grows only as the driver plugs it.
"""

from __future__ import annotations

import fcntl
import os
import struct
from collections.abc import Callable

import pytest

from ch_launcher.ch.api import Conflict, InternalError
from tests.contract.harness import FAKE, Backend, Vmm
from tests.guest.console import PCI_EJECT_IGNORED, GuestConsole

MiB = 1 << 20


def _image(vmm: Vmm, name: str) -> str:
    path = os.path.join(vmm.dir, name)
    with open(path, "wb") as f:
        f.truncate(MiB)
    return path


def _write_locked(path: str) -> bool:
    """Whether another open file description holds a lock on `path` (F_OFD_GETLK)."""
    fd = os.open(path, os.O_RDWR)
    try:
        probe = struct.pack("hhqqi", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        kind = struct.unpack("hhqqi", fcntl.fcntl(fd, fcntl.F_OFD_GETLK, probe))[0]
        return kind != fcntl.F_UNLCK
    finally:
        os.close(fd)


def test_a_removed_disk_leaves_the_config_at_once_and_the_vm_only_when_the_guest_ejects_it(
        start: Callable[..., Vmm]) -> None:
    vmm = start(FAKE, env={"FAKE_CH_EJECT_DELAY": "0.3"})
    c = vmm.client
    c.create(vmm.config())
    c.boot()
    image = _image(vmm, "hot.img")
    info = c.add_disk({"id": "hot", "path": image, "image_type": "Raw"})
    assert info is not None and info.id == "hot" and _write_locked(image)
    vmm.events.set_mark()
    c.remove_device("hot")
    assert "hot" not in [d["id"] for d in c.info().config.get("disks") or []]
    assert "hot" in (c.info().device_tree or {})  # still in the VM: the guest has not ejected it
    with pytest.raises(Conflict, match="Failed to find device corresponding to the given identifier: hot"):
        c.remove_device("hot")  # already on its way out
    removed = vmm.events.wait_for("vm:device-removed", timeout=5)
    assert removed.properties == {"id": "hot", "bdf": info.bdf}
    assert "hot" not in (c.info().device_tree or {}) and not _write_locked(image)


def test_the_guest_ejects_a_removed_disk_then_the_vm_drops_it_and_its_lock(guest_backend: Backend,
                                                                          start: Callable[..., Vmm]) -> None:
    vmm = start(guest_backend)
    c = vmm.client
    c.create(vmm.guest_config())
    c.boot()
    if guest_backend.real:
        vmm.guest_does("hello")  # up, its ACPI set up
    image = _image(vmm, "hot.img")
    info = c.add_disk({"id": "hot", "path": image, "image_type": "Raw"})
    assert info is not None and _write_locked(image)
    vmm.events.set_mark()
    c.remove_device("hot")
    removed = vmm.events.wait_for("vm:device-removed", timeout=10)
    assert removed.properties == {"id": "hot", "bdf": info.bdf}
    assert "hot" not in (c.info().device_tree or {}) and not _write_locked(image)
    with pytest.raises(Conflict, match="Failed to find device corresponding to the given identifier: hot"):
        c.remove_device("hot")


def test_a_guest_that_never_ejects_keeps_the_device_and_a_reboot_drops_it(guest_backend: Backend,
                                                                         start: Callable[..., Vmm]) -> None:
    vmm = start(guest_backend, env={"FAKE_CH_EJECT_DELAY": "never"})
    c = vmm.client
    c.create(vmm.guest_config())
    c.boot()
    image = _image(vmm, "hot.img")
    if guest_backend.real:
        # one console connection throughout: a client reconnecting at once may miss the first
        # bytes, which CH still writes to the old connection
        with GuestConsole(vmm.serial_socket) as console:
            console.hello()
            console.command("ignore-eject")
            c.add_disk({"id": "hot", "path": image, "image_type": "Raw"})
            c.remove_device("hot")
            console.reported(PCI_EJECT_IGNORED)  # asked, and ignored
    else:
        c.add_disk({"id": "hot", "path": image, "image_type": "Raw"})
        c.remove_device("hot")
    assert "hot" in (c.info().device_tree or {}) and _write_locked(image)
    c.reboot()  # the VM is rebuilt from its config, which no longer has the disk
    assert "hot" not in (c.info().device_tree or {}) and not _write_locked(image)
    assert "vm:device-removed" not in vmm.events.names()


def test_virtio_mem_resize_asks_the_guest_and_the_actual_size_follows_its_driver(backend: Backend,
                                                                                start: Callable[..., Vmm]) -> None:
    vmm = start(backend, env={"FAKE_CH_VIRTIO_MEM_DELAY": "never"})  # no driver, as the real VMM's guest
    c = vmm.client
    c.create(vmm.config(memory={"size": 256 * MiB, "hotplug_method": "VirtioMem", "hotplug_size": 512 * MiB}))
    c.boot()
    c.resize(desired_ram=512 * MiB)
    info = c.info()
    assert info.config["memory"]["size"] == 256 * MiB and info.config["memory"]["hotplugged_size"] == 256 * MiB
    assert info.memory_actual_size == 256 * MiB  # no virtio-mem driver in this guest: nothing plugged
    with pytest.raises(InternalError) as same:
        c.resize(desired_ram=512 * MiB)
    assert "are identical" in same.value.root_cause
    for bad, text in ((1024 * MiB, "bigger than region_size"), (128 * MiB, "below boot size"),
                      (300 * MiB + 4096, "not aligned")):
        with pytest.raises(InternalError) as refused:
            c.resize(desired_ram=bad)
        assert text in " ".join(refused.value.messages), refused.value.messages


def test_a_guest_with_a_virtio_mem_driver_plugs_what_was_asked(start: Callable[..., Vmm]) -> None:
    vmm = start(FAKE, env={"FAKE_CH_VIRTIO_MEM_DELAY": "0"})
    c = vmm.client
    c.create(vmm.config(memory={"size": 256 * MiB, "hotplug_method": "VirtioMem", "hotplug_size": 512 * MiB}))
    c.boot()
    c.resize(desired_ram=640 * MiB)
    # the simulated driver plugs at once (delay 0): the next request already sees it
    assert c.info().memory_actual_size == 640 * MiB
