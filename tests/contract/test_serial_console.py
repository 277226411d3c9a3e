"""The serial port in Socket mode, as the launcher's console bridge sees it (simulated guest)."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ch_launcher.ch.api import InternalError
from tests.contract.harness import FAKE, Vmm


def _read_until(s: socket.socket, marker: bytes, timeout: float = 5.0) -> bytes:
    s.settimeout(0.2)
    data = b""
    deadline = time.monotonic() + timeout
    while marker not in data:
        if time.monotonic() > deadline:
            raise AssertionError(f"{marker!r} not received; got {data!r}")
        try:
            chunk = s.recv(4096)
        except TimeoutError:
            continue
        if not chunk:
            raise AssertionError(f"closed before {marker!r}; got {data!r}")
        data += chunk
    return data


def _connect(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s


@pytest.fixture
def serial_vmm(start: Callable[..., Vmm]) -> tuple[Vmm, str]:
    vmm = start(FAKE, no_shutdown=True)
    path = os.path.join(vmm.dir, "serial.sock")
    vmm.client.create(vmm.config(serial={"mode": "Socket", "socket": path}))
    return vmm, path


def test_serial_socket_appears_at_boot_and_buffers_the_boot_log(serial_vmm: tuple[Vmm, str]) -> None:
    vmm, path = serial_vmm
    assert not os.path.exists(path)
    vmm.client.boot()
    assert os.path.exists(path)
    s = _connect(path)  # connected after the guest printed: the output was buffered (v53)
    try:
        data = _read_until(s, b"login: ")
        assert b"Linux version" in data
    finally:
        s.close()


def test_what_a_client_types_is_echoed_by_the_guest(serial_vmm: tuple[Vmm, str]) -> None:
    vmm, path = serial_vmm
    vmm.client.boot()
    s = _connect(path)
    try:
        _read_until(s, b"login: ")
        s.sendall(b"root\r")
        assert b"root\r\nfake-guest login: " in _read_until(s, b"root\r\nfake-guest login: ")
    finally:
        s.close()


def test_a_new_client_displaces_the_previous_one(serial_vmm: tuple[Vmm, str]) -> None:
    vmm, path = serial_vmm
    vmm.client.boot()
    first = _connect(path)
    _read_until(first, b"login: ")
    second = _connect(path)
    try:
        first.settimeout(5)
        assert first.recv(100) == b""  # the first one is shut down
        second.sendall(b"x")
        _read_until(second, b"x")
    finally:
        first.close()
        second.close()


def test_shutdown_removes_the_serial_socket_and_reboot_rebinds_it(serial_vmm: tuple[Vmm, str]) -> None:
    vmm, path = serial_vmm
    vmm.client.boot()
    s = _connect(path)
    _read_until(s, b"login: ")
    vmm.signal(signal.SIGUSR2)  # guest reboot: the VM is rebuilt, the client disconnected
    vmm.events.wait_for("vm:rebooted", after_mark=False)
    s.settimeout(5)
    assert s.recv(4096) == b""
    s.close()
    s = _connect(path)
    _read_until(s, b"login: ")
    s.close()
    vmm.client.shutdown()
    assert not os.path.exists(path)


def test_boot_fails_when_the_serial_socket_path_is_taken(serial_vmm: tuple[Vmm, str]) -> None:
    vmm, path = serial_vmm
    with open(path, "w"):
        pass
    with pytest.raises(InternalError) as info:
        vmm.client.boot()
    assert info.value.messages[2] == "Error creating console devices"
    assert info.value.root_cause == "Address already in use (os error 98)"


def test_pty_mode_reports_its_path_in_vm_info(start: Callable[..., Vmm]) -> None:
    vmm = start(FAKE)
    vmm.client.create(vmm.config(serial={"mode": "Pty"}))
    vmm.client.boot()
    pty = vmm.client.info().config["serial"]["file"]
    assert pty.startswith("/dev/pts/")


def test_file_mode_writes_the_console_output_to_the_file(start: Callable[..., Vmm]) -> None:
    vmm = start(FAKE)
    path = os.path.join(vmm.dir, "serial.log")
    vmm.client.create(vmm.config(serial={"mode": "File", "file": path}))
    vmm.client.boot()
    assert b"login: " in Path(path).read_bytes()
