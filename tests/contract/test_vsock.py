"""Cloud Hypervisor's hybrid vsock as the launcher's guest-agent link meets it (`ch_launcher.ch.vsock`),
on the simulated and the real VMM.

The real VMM runs the tiny guest, which has no virtio-vsock driver: what a guest that never
activates the device looks like (the simulated guest's `FAKE_CH_VSOCK_DRIVER=never`). A guest
that drives it (nothing listening on a port: the connection is closed; qemu-ga listening: `OK
<port>`) is the simulated guest here and the Linux guest on the real node (tests/cluster).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from ch_launcher.ch import vsock
from ch_launcher.ch.api import ChApiError
from tests.contract.harness import FAKE, Backend, Vmm

NO_DRIVER = {"FAKE_CH_VSOCK_DRIVER": "never"}
SOMAXCONN = int(Path("/proc/sys/net/core/somaxconn").read_text())


def _vsock_vmm(start: Callable[..., Vmm], backend: Backend, *, name: str = "ch", cid: int = 3,
               env: dict[str, str] | None = None) -> tuple[Vmm, str]:
    vmm = start(backend, name=name, no_shutdown=True, env=env)
    path = os.path.join(vmm.dir, f"{name}.vsock")
    config = vmm.guest_config(vsock={"cid": cid, "socket": path}) if backend.real else vmm.config(
        vsock={"cid": cid, "socket": path})
    vmm.client.create(config)
    return vmm, path


def _connect(path: str, port: int, timeout: float) -> None:
    async def attempt() -> None:
        _, writer = await vsock.connect(path, port, timeout)
        writer.close()

    asyncio.run(attempt())


def test_the_socket_is_bound_at_boot_and_removed_when_the_vm_stops(backend: Backend,
                                                                   start: Callable[..., Vmm]) -> None:
    vmm, path = _vsock_vmm(start, backend, env=NO_DRIVER)
    assert not os.path.exists(path)  # vm.create makes no device
    vmm.client.boot()
    assert os.path.exists(path)
    vmm.client.reboot()  # the VM is rebuilt: the device binds its socket again
    assert os.path.exists(path)
    vmm.client.shutdown()
    assert not os.path.exists(path)


def test_a_socket_left_behind_fails_the_next_boot(backend: Backend, start: Callable[..., Vmm]) -> None:
    vmm, path = _vsock_vmm(start, backend, env=NO_DRIVER)
    leftover = socket.socket(socket.AF_UNIX)
    leftover.bind(path)  # what a killed VMM leaves: the file, nobody listening
    leftover.close()
    with pytest.raises(ChApiError) as failed:
        vmm.client.boot()
    assert failed.value.messages[-4:] == ["Error from device manager", "Cannot create virtio-vsock backend",
                                       "Error binding to the host-side Unix socket",
                                       "Address already in use (os error 98)"], failed.value.messages


def test_a_guest_that_never_drives_its_vsock_device_answers_no_connection(guest_backend: Backend,
                                                                        start: Callable[..., Vmm]) -> None:
    vmm, path = _vsock_vmm(start, guest_backend, env=NO_DRIVER)
    vmm.client.boot()
    if guest_backend.real:
        vmm.guest_does("hello")  # the tiny guest runs (and drives no vsock device)
    with pytest.raises(vsock.VsockTimeout, match="did not answer"):
        _connect(path, 1023, 0.5)  # it waits in the VMM's backlog, unanswered
    # ... and so does every connection given up, until the device runs: the backlog is what
    # Rust's UnixListener::bind asks for, the kernel's maximum (somaxconn), before attempts fail at once
    assert _backlog(path) == SOMAXCONN
    vmm.client.ping()  # none of it harms the VMM
    assert vmm.client.info().state == "Running"


def _backlog(path: str) -> int:
    """The listen() backlog of the unix socket at `path` (`ss -xl`'s Send-Q)."""
    listing = subprocess.run(["ss", "-xlH"], capture_output=True, text=True, check=True, timeout=10).stdout
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[4] == path:
            return int(fields[3])
    raise AssertionError(f"{path} is not a listening unix socket:\n{listing}")


def test_without_a_vm_there_is_nobody_to_connect_to(backend: Backend, start: Callable[..., Vmm]) -> None:
    vmm, path = _vsock_vmm(start, backend, env=NO_DRIVER)
    with pytest.raises(vsock.VsockUnavailable):
        _connect(path, 1023, 1.0)  # before vm.boot: no socket
    vmm.client.boot()
    vmm.stop()  # the VMM is gone; a SIGKILL would leave the file behind: nobody listens on it
    if not os.path.exists(path):
        socket.socket(socket.AF_UNIX).bind(path)
    with pytest.raises(vsock.VsockUnavailable):
        _connect(path, 1023, 1.0)


def test_the_same_cid_in_two_vms_of_one_host_is_no_conflict(backend: Backend, start: Callable[..., Vmm]) -> None:
    """Hybrid vsock never registers the CID with the host kernel: every VM can have CID 3."""
    first, _ = _vsock_vmm(start, backend, name="ch0", env=NO_DRIVER)
    second, _ = _vsock_vmm(start, backend, name="ch1", env=NO_DRIVER)
    first.client.boot()
    second.client.boot()
    assert first.client.info().state == second.client.info().state == "Running"


# --- a guest that drives its device (the simulated guest; the Linux guest: tests/cluster) ---------


def test_a_port_nobody_listens_on_is_closed_and_a_listening_agent_answers(start: Callable[..., Vmm]) -> None:
    vmm, path = _vsock_vmm(start, FAKE, env={"FAKE_CH_GUEST_AGENT": "1023"})
    vmm.client.boot()
    vmm.events.wait_for("virtio-device:activated")

    async def story() -> None:
        with pytest.raises(vsock.VsockRefused, match="nothing listens on vsock port 100"):
            await vsock.connect(path, 100, 2.0)
        reader, writer = await vsock.connect(path, 1023, 2.0)
        writer.write(b'{"execute":"guest-sync-delimited","arguments":{"id":7}}')
        assert await reader.readline() == b'\xff{"return": 7}\n'
        writer.close()

    asyncio.run(story())


def test_a_paused_vm_answers_once_resumed(start: Callable[..., Vmm]) -> None:
    vmm, path = _vsock_vmm(start, FAKE, env={"FAKE_CH_GUEST_AGENT": "1023"})
    vmm.client.boot()
    vmm.events.wait_for("virtio-device:activated")
    vmm.client.pause()

    async def story() -> None:
        with pytest.raises(vsock.VsockTimeout):
            await vsock.connect(path, 1023, 0.5)
        vmm.client.resume()
        _, writer = await vsock.connect(path, 1023, 2.0)
        writer.close()

    asyncio.run(story())
