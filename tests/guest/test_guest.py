"""The tiny guest really runs on the real cloud-hypervisor: it prints its marker on COM1,
echoes what is typed there, and powers the VM off on command (the VMM then exits 0)."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time

import pytest

from ch_launcher.ch.process import VmmProcess
from tests import real_vmm
from tests.guest.build import guest_payload

pytestmark = pytest.mark.real_vmm


def _real_binary() -> str:
    reason = real_vmm.unavailable(tiny_guest=True)
    if reason:
        pytest.skip(reason)
    return real_vmm.binary()


def _read_until(conn: socket.socket, marker: bytes, timeout: float) -> bytes:
    deadline = time.monotonic() + timeout
    seen = b""
    while marker not in seen:
        conn.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            chunk = conn.recv(4096)
        except TimeoutError:
            break
        if not chunk:
            break
        seen += chunk
    assert marker in seen, f"{marker!r} not printed within {timeout} s; the guest printed {seen!r}"
    return seen


def test_the_guest_prints_its_marker_echoes_and_powers_off_on_command():
    binary = _real_binary()
    directory = tempfile.mkdtemp(prefix="kg", dir="/tmp")
    serial = os.path.join(directory, "serial.sock")
    vmm = VmmProcess.spawn(
        binary,
        api_socket=os.path.join(directory, "api.sock"),
        event_monitor=os.path.join(directory, "events.json"),
        log_file=os.path.join(directory, "ch.log"),
    )
    try:
        vmm.wait_ready(10.0)
        vmm.client.create(
            {
                "payload": {"firmware": str(guest_payload())},
                "cpus": {"boot_vcpus": 1, "max_vcpus": 1},
                "memory": {"size": 64 << 20},
                "serial": {"mode": "Socket", "socket": serial},
                "console": {"mode": "Off"},
            }
        )
        vmm.client.boot()
        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(serial)
            _read_until(conn, b"KCH-GUEST-READY", 10.0)
            conn.sendall(b"echo-me\n")
            _read_until(conn, b"echo-me", 10.0)
            conn.sendall(b"~p")
            assert vmm.wait(10.0) == 0, f"the VMM did not exit 0 after the guest's poweroff:\n{vmm.log_tail()}"
    finally:
        vmm.terminate()
        vmm.close()
        shutil.rmtree(directory, ignore_errors=True)
