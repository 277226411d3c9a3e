"""The migration relay on real unix sockets, with a hand-written sender and receiver speaking
Cloud Hypervisor's protocol (vm-migration/src/protocol.rs@v53.0)."""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import tempfile
import threading
import time

import pytest

from ch_launcher.migration.relay import Relay

HEADER = struct.Struct("<H6sQ")
START, CONFIG, STATE, MEMORY, COMPLETE, MEMORY_FD = 1, 2, 3, 4, 5, 7


class Receiver:
    """A receiver that answers Ok to everything (or Error to `refuse`) and counts memory."""

    def __init__(self, path: str, refuse: int | None = None) -> None:
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(1)
        self.refuse = refuse
        self.memory = 0
        self.commands: list[int] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _read(self, conn: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    def _serve(self) -> None:
        conn, _ = self.server.accept()
        try:
            while True:
                command, _, length = HEADER.unpack(self._read(conn, HEADER.size))
                self.commands.append(command)
                payload = self._read(conn, length) if length else b""
                if command == MEMORY:
                    total = sum(struct.unpack_from("<QQ", payload, i)[1] for i in range(0, length, 16))
                    self.memory += len(self._read(conn, total)) if total else 0
                conn.sendall(HEADER.pack(2 if command == self.refuse else 1, b"\0" * 6, 0))
                if command in (COMPLETE, self.refuse):
                    break
        except (EOFError, OSError):
            pass
        conn.close()


class Sender:
    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.sock.settimeout(10)

    def request(self, command: int, payload: bytes = b"", memory: int = 0) -> int | None:
        if command == MEMORY:
            payload = struct.pack("<QQ", 0, memory)
        self.sock.sendall(HEADER.pack(command, b"\0" * 6, len(payload)) + payload)
        left = memory
        chunk = b"\x5a" * (1 << 16)
        while left:
            n = min(left, len(chunk))
            self.sock.sendall(chunk[:n])
            left -= n
        data = self.sock.recv(HEADER.size)
        return HEADER.unpack(data)[0] if len(data) == HEADER.size else None


@pytest.fixture
def sockets():
    d = tempfile.mkdtemp(prefix="kr", dir="/tmp")
    yield os.path.join(d, "relay.sock"), os.path.join(d, "vmm.sock")
    for name in os.listdir(d):
        with contextlib.suppress(FileNotFoundError):  # the relay's thread may remove its socket meanwhile
            os.unlink(os.path.join(d, name))
    os.rmdir(d)


def ended(relay: Relay) -> threading.Event:
    event = threading.Event()
    relay.on_end = lambda outcome, detail: event.set()
    return event


def test_a_whole_migration_goes_through_and_is_counted(sockets):
    listen, upstream = sockets
    receiver = Receiver(upstream)
    relay = Relay(listen, upstream, name="t")
    done = ended(relay)
    relay.start()
    sender = Sender(listen)
    assert sender.request(START) == 1
    assert sender.request(CONFIG, b'{"vm_config": {}}') == 1
    assert sender.request(MEMORY, memory=3 << 20) == 1
    assert sender.request(MEMORY, memory=1 << 20) == 1
    assert relay.progress().iterations == 2 and not relay.progress().complete_forwarded
    assert sender.request(STATE, b"{}") == 1
    assert sender.request(COMPLETE) == 1
    assert done.wait(10)
    p = relay.progress()
    assert relay.outcome == "completed" and p.complete_acked and p.memory_bytes == 4 << 20
    assert receiver.memory == 4 << 20 and receiver.commands == [START, CONFIG, MEMORY, MEMORY, STATE, COMPLETE]
    assert not relay.cut(), "too late once Complete went through"


def test_a_cut_before_complete_ends_both_streams(sockets):
    listen, upstream = sockets
    Receiver(upstream)
    relay = Relay(listen, upstream, name="t")
    done = ended(relay)
    relay.start()
    sender = Sender(listen)
    assert sender.request(START) == 1
    assert relay.cut()
    with pytest.raises(OSError):
        for _ in range(100):  # the sender sees its stream break
            if sender.request(CONFIG, b"{}") is None:
                raise ConnectionResetError
    assert done.wait(10) and relay.outcome == "cut"


def test_the_receivers_error_is_forwarded_and_ends_the_relay(sockets):
    listen, upstream = sockets
    Receiver(upstream, refuse=CONFIG)
    relay = Relay(listen, upstream, name="t")
    done = ended(relay)
    relay.start()
    sender = Sender(listen)
    assert sender.request(START) == 1
    assert sender.request(CONFIG, b"{}") == 2
    assert done.wait(10) and relay.outcome == "refused"


def test_memory_file_descriptors_local_mode_are_refused(sockets):
    listen, upstream = sockets
    Receiver(upstream)
    relay = Relay(listen, upstream, name="t")
    done = ended(relay)
    relay.start()
    sender = Sender(listen)
    assert sender.request(START) == 1
    sender.sock.sendall(HEADER.pack(MEMORY_FD, b"\0" * 6, 8) + b"\0" * 8)
    assert done.wait(10) and relay.outcome == "error" and "local mode" in relay.detail


def test_a_receiver_side_that_disappears_ends_the_relay_without_closing_the_receivers_socket(sockets):
    listen, upstream = sockets
    receiver = Receiver(upstream)
    relay = Relay(listen, upstream, name="t", close_on_end=False)
    done = ended(relay)
    relay.start()
    sender = Sender(listen)
    assert sender.request(START) == 1
    sender.sock.close()  # the sender vanishes between requests
    assert done.wait(10) and relay.outcome == "sender-closed"
    relay.close()
    receiver.thread.join(5)


def test_the_bandwidth_is_limited(sockets):
    listen, upstream = sockets
    Receiver(upstream)
    relay = Relay(listen, upstream, name="t", bandwidth=4 << 20)
    relay.start()
    sender = Sender(listen)
    assert sender.request(START) == 1
    began = time.monotonic()
    assert sender.request(MEMORY, memory=2 << 20) == 1
    assert time.monotonic() - began >= 0.4, "2 MiB at 4 MiB/s take about half a second"
    relay.close()
