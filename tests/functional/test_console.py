"""Serial console: real unix sockets between CH's serial socket (an in-test stand-in, then the
simulated VMM as a real child process), the launcher's bridge, and console clients (virt-handler's
role)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import signal
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from ch_launcher.ch.process import VmmProcess
from ch_launcher.console import ConsoleError, SerialConsole
from tests.polling import until

BOOT_LOG = b"[    0.000000] Linux version 6.8\r\nWelcome\r\n\r\ntestvm login: "


def run(fn: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """Run an async test in a fresh event loop, bounded in time."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(asyncio.wait_for(fn(*args, **kwargs), 30))
    return wrapper


@pytest.fixture
def sockdir() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="kc", dir="/tmp")  # unix socket paths must stay short
    yield d
    shutil.rmtree(d, ignore_errors=True)


class FakeChSerial:
    """CH's serial socket in `Socket` mode: CH listens; one client at a time (a new one displaces
    the old); on connect it sends what the guest printed so far; it echoes what it receives."""

    def __init__(self, path: str, greeting: bytes = BOOT_LOG) -> None:
        self.path = path
        self.greeting = greeting
        self.received = bytearray()
        self.server: asyncio.base_events.Server | None = None
        self.current: asyncio.StreamWriter | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_unix_server(self._serve, path=self.path)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.current is not None:
            self.current.close()
        self.current = writer
        writer.write(self.greeting)
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(4096):
                self.received += data
                writer.write(data)  # the guest's tty echoes
        writer.close()

    def guest_prints(self, data: bytes) -> None:
        assert self.current is not None
        self.current.write(data)

    async def stop(self) -> None:
        """The VM goes away (reboot or shutdown): CH closes the connection and the socket."""
        if self.current is not None:
            self.current.close()
            self.current = None
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


async def read_until(reader: asyncio.StreamReader, needle: bytes, timeout: float = 5.0) -> bytes:
    buf = b""
    async with asyncio.timeout(timeout):
        while needle not in buf:
            chunk = await reader.read(4096)
            if not chunk:
                raise AssertionError(f"EOF before {needle!r}; got {buf!r}")
            buf += chunk
    return buf


async def wait_for(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    await until(cond, timeout)


def read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class Setup:
    def __init__(self, d: str) -> None:
        self.vmm_path = os.path.join(d, "ch-serial.sock")
        self.console_path = os.path.join(d, "uid", "virt-serial0")
        self.log_path = os.path.join(d, "uid", "virt-serial0-log")
        self.ch = FakeChSerial(self.vmm_path)
        self.console = SerialConsole(self.vmm_path, self.console_path, self.log_path)

    async def __aenter__(self) -> Setup:
        await self.ch.start()
        await self.console.start()
        await self.console.attach_vmm()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.console.close()
        await self.ch.stop()


@run
async def test_guest_output_reaches_the_client_and_the_log_and_input_reaches_the_guest(sockdir: str) -> None:
    async with Setup(sockdir) as s:
        await wait_for(lambda: BOOT_LOG in read_file(s.log_path))
        reader, writer = await asyncio.open_unix_connection(s.console_path)
        writer.write(b"root\r")
        await read_until(reader, b"root\r")  # the guest's echo came back through the bridge
        assert bytes(s.ch.received) == b"root\r"
        await wait_for(lambda: read_file(s.log_path).endswith(b"login: root\r"))
        writer.close()


@run
async def test_client_can_detach_and_reattach_without_losing_the_vm(sockdir: str) -> None:
    async with Setup(sockdir) as s:
        _r1, w1 = await asyncio.open_unix_connection(s.console_path)
        await wait_for(lambda: s.console.client_attached)
        w1.close()
        await wait_for(lambda: not s.console.client_attached)
        s.ch.guest_prints(b"printed while nobody watched\r\n")
        await wait_for(lambda: b"nobody watched" in read_file(s.log_path))
        assert s.console.vmm_attached
        r2, w2 = await asyncio.open_unix_connection(s.console_path)
        await wait_for(lambda: s.console.client_attached)
        s.ch.guest_prints(b"hello again\r\n")
        await read_until(r2, b"hello again")
        w2.write(b"ls\r")
        await read_until(r2, b"ls\r")
        w2.close()


@run
async def test_second_client_displaces_the_first(sockdir: str) -> None:
    async with Setup(sockdir) as s:
        r1, w1 = await asyncio.open_unix_connection(s.console_path)
        await wait_for(lambda: s.console.client_attached)
        r2, w2 = await asyncio.open_unix_connection(s.console_path)
        async with asyncio.timeout(5):
            await r1.read()  # returns only at EOF: the first client was closed
        assert r1.at_eof()
        s.ch.guest_prints(b"for the newcomer\r\n")
        await read_until(r2, b"for the newcomer")
        w1.close()
        w2.close()


@run
async def test_reattach_after_a_reboot_keeps_logging_and_serving(sockdir: str) -> None:
    async with Setup(sockdir) as s:
        reader, writer = await asyncio.open_unix_connection(s.console_path)
        await wait_for(lambda: s.console.client_attached)
        await s.ch.stop()  # reboot: CH tears the serial socket down ...
        await wait_for(lambda: not s.console.vmm_attached)
        s.ch = FakeChSerial(s.vmm_path, b"second boot\r\n")
        await s.ch.start()  # ... and serves a new one
        await s.console.attach_vmm()
        await read_until(reader, b"second boot")  # the same client sees the new boot
        await wait_for(lambda: read_file(s.log_path).endswith(b"second boot\r\n"))
        assert read_file(s.log_path).startswith(BOOT_LOG)  # the log is appended, not truncated
        writer.close()


@run
async def test_a_reattach_first_keeps_what_the_old_connection_still_held(sockdir: str) -> None:
    """The guest printed and CH rebuilt the VM (a reboot) before the launcher read the old
    connection (its event loop was busy): the re-attach that vm:rebooted triggers must log those
    bytes before the new boot's, not drop them with the connection."""
    import socket

    vmm_path = os.path.join(sockdir, "ch-serial.sock")
    log_path = os.path.join(sockdir, "uid", "virt-serial0-log")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # CH's side, driven step by step
    listener.bind(vmm_path)
    listener.listen(4)
    console = SerialConsole(vmm_path, os.path.join(sockdir, "uid", "virt-serial0"), log_path)
    await console.start()
    try:
        await console.attach_vmm()
        first, _ = listener.accept()  # connected: it is in the backlog
        first.sendall(b"first boot\r\n")
        first.close()                 # the reboot closes it; the launcher has not run meanwhile
        await console.attach_vmm()    # vm:rebooted
        second, _ = listener.accept()
        second.sendall(b"second boot\r\n")
        await wait_for(lambda: read_file(log_path).endswith(b"second boot\r\n"))
        assert read_file(log_path) == b"first boot\r\nsecond boot\r\n"
        second.close()
    finally:
        await console.close()
        listener.close()


@run
async def test_attach_waits_briefly_for_the_vmm_to_create_its_socket(sockdir: str) -> None:
    s = Setup(sockdir)
    await s.console.start()
    try:
        async def late_vmm() -> None:
            await asyncio.sleep(0.3)
            await s.ch.start()
        starter = asyncio.create_task(late_vmm())
        await s.console.attach_vmm(timeout=5)
        await starter
        await wait_for(lambda: BOOT_LOG in read_file(s.log_path))
    finally:
        await s.console.close()
        await s.ch.stop()


@run
async def test_attach_gives_up_with_a_clear_error_when_the_socket_never_appears(sockdir: str) -> None:
    s = Setup(sockdir)
    await s.console.start()
    try:
        with pytest.raises(ConsoleError, match=r"did not accept a connection within 0\.3 s"):
            await s.console.attach_vmm(timeout=0.3)
    finally:
        await s.console.close()


@run
async def test_log_file_exists_from_start_and_socket_is_removed_on_close(sockdir: str) -> None:
    s = Setup(sockdir)
    with open(os.path.join(sockdir, "stale"), "w"):
        pass
    os.makedirs(os.path.dirname(s.console_path))
    os.rename(os.path.join(sockdir, "stale"), s.console_path)  # a stale file where we listen
    await s.console.start()
    assert os.path.getsize(s.log_path) == 0
    reader, writer = await asyncio.open_unix_connection(s.console_path)
    writer.write(b"typed before boot\r")  # no VMM yet: dropped, no crash
    await writer.drain()
    await wait_for(lambda: s.console.client_attached)
    await s.console.close()
    assert not os.path.exists(s.console_path)
    async with asyncio.timeout(5):
        assert await reader.read() == b""
    writer.close()


@run
async def test_a_client_that_never_reads_does_not_stall_the_log(sockdir: str) -> None:
    async with Setup(sockdir) as s:
        _reader, writer = await asyncio.open_unix_connection(s.console_path)  # never reads
        await wait_for(lambda: s.console.client_attached)
        chunk = b"x" * 65536
        for _ in range(64):  # 4 MiB, more than the kernel and client buffers hold
            s.ch.guest_prints(chunk)
            await asyncio.sleep(0)
        expected = len(BOOT_LOG) + 64 * len(chunk)
        await wait_for(lambda: logged_size(s.log_path) == expected, timeout=15)
        writer.close()


def logged_size(log_path: str) -> int:
    """Bytes in the serial log and its rotated backups."""
    return sum(os.path.getsize(p) for p in [log_path, *(f"{log_path}.{i}" for i in range(3))] if os.path.exists(p))


@run
async def test_a_guest_that_floods_its_console_leaves_a_log_as_bounded_as_virtlogds(sockdir: str) -> None:
    """9 MiB of numbered lines: the log and its three backups keep the last lines, whole, at
    most 2 MiB each (virtlogd's defaults), and virt-tail's file is a fresh one."""
    async with Setup(sockdir) as s:
        lines = [b"line %07d %s\r\n" % (i, b"x" * (i % 97)) for i in range(150_000)]
        total = sum(map(len, lines))
        assert total > 9 << 20
        await wait_for(lambda: s.ch.current is not None)
        for i in range(0, len(lines), 500):
            s.ch.guest_prints(b"".join(lines[i:i + 500]))
            await asyncio.sleep(0)
        await wait_for(lambda: read_file(s.log_path).endswith(lines[-1]), timeout=20)
        files = [f"{s.log_path}.{i}" for i in (2, 1, 0)] + [s.log_path]
        sizes = [os.path.getsize(f) for f in files]
        assert all(size <= 2 << 20 for size in sizes) and sum(sizes) > 6 << 20, sizes
        assert not os.path.exists(f"{s.log_path}.3")
        kept = b"".join(read_file(f) for f in files)
        assert (BOOT_LOG + b"".join(lines)).endswith(kept)  # the newest bytes, in order
        assert all(read_file(f).endswith(b"\r\n") for f in files[:-1])  # cut after a line


@run
async def test_console_start_fails_clearly_when_the_directory_cannot_be_made(sockdir: str) -> None:
    blocker = os.path.join(sockdir, "file")
    with open(blocker, "w"):
        pass
    console = SerialConsole(os.path.join(sockdir, "ch.sock"), os.path.join(blocker, "virt-serial0"), None)
    with pytest.raises(ConsoleError, match="cannot serve the serial console"):
        await console.start()
    await console.close()


# --- against the simulated VMM (tests/fakes/fake_cloud_hypervisor.py) as a real child process ---

FAKE_CH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fakes",
                       "fake_cloud_hypervisor.py")


@pytest.fixture
def booted_vmm(sockdir: str) -> Iterator[tuple[VmmProcess, str]]:
    """A simulated VMM with a booted VM whose serial port is in Socket mode."""
    firmware = os.path.join(sockdir, "hypervisor-fw")
    with open(firmware, "wb") as f:
        f.write(b"\0" * 4096)
    serial = os.path.join(sockdir, "ch-serial.sock")
    vmm = VmmProcess.spawn(FAKE_CH, api_socket=os.path.join(sockdir, "api.sock"),
                           event_monitor=os.path.join(sockdir, "events"), log_file=os.path.join(sockdir, "ch.log"))
    try:
        vmm.wait_ready(10)
        vmm.client.create({"cpus": {"boot_vcpus": 1, "max_vcpus": 1}, "memory": {"size": 256 << 20},
                           "payload": {"firmware": firmware}, "serial": {"mode": "Socket", "socket": serial},
                           "console": {"mode": "Off"}})
        vmm.client.boot()
        yield vmm, serial
    finally:
        vmm.terminate(2, 2)
        vmm.close()


@run
async def test_console_of_the_simulated_vmm_logs_the_boot_and_echoes_input(
        sockdir: str, booted_vmm: tuple[VmmProcess, str]) -> None:
    _vmm, serial = booted_vmm
    console_path = os.path.join(sockdir, "uid", "virt-serial0")
    log_path = os.path.join(sockdir, "uid", "virt-serial0-log")
    console = SerialConsole(serial, console_path, log_path)
    await console.start()
    try:
        await console.attach_vmm()
        # CH (v53) buffered the boot output until we connected: nothing lost.
        await wait_for(lambda: read_file(log_path).endswith(b"fake-guest login: "))
        assert b"Linux version" in read_file(log_path)
        reader, writer = await asyncio.open_unix_connection(console_path)
        await wait_for(lambda: console.client_attached)
        writer.write(b"root\r")
        await read_until(reader, b"root\r\nfake-guest login: ")
        writer.close()
    finally:
        await console.close()


@run
async def test_console_survives_a_guest_reboot_of_the_simulated_vmm(
        sockdir: str, booted_vmm: tuple[VmmProcess, str]) -> None:
    vmm, serial = booted_vmm
    console_path = os.path.join(sockdir, "uid", "virt-serial0")
    log_path = os.path.join(sockdir, "uid", "virt-serial0-log")
    console = SerialConsole(serial, console_path, log_path)
    await console.start()
    try:
        await console.attach_vmm()
        reader, writer = await asyncio.open_unix_connection(console_path)
        await wait_for(lambda: console.client_attached)
        os.kill(vmm.pid, signal.SIGUSR2)  # the guest reboots: CH rebuilds the VM and its serial socket
        await wait_for(lambda: not console.vmm_attached)
        await console.attach_vmm()  # what the launcher does on the vm:rebooted event
        await read_until(reader, b"Linux version")  # the same client sees the second boot
        await wait_for(lambda: read_file(log_path).count(b"Linux version") == 2)
        writer.close()
    finally:
        await console.close()
