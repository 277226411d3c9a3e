"""Runs a VMM (the simulated one, or a real `cloud-hypervisor`) for contract tests.

The same tests run against both. The real binary is `CH_BINARY`, else `../shared/vmm/
cloud-hypervisor`; it runs when `/dev/kvm` can be opened read-write; its guest is `CH_FIRMWARE`
or `CH_KERNEL` (+ `CH_CMDLINE`) when given, else the tiny guest of tests/guest/ (see
tests/real_vmm.py). Otherwise `real_vmm_unavailable()` says why, and the real-VMM variants are
skipped with that reason (a failure when ../shared is beside the checkout: tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import select
import shutil
import signal
import socket
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from ch_launcher.ch.api import CloudHypervisorClient, VmmUnavailable
from ch_launcher.ch.events import Event, EventFifo, EventStreamParser, open_event_fifo
from ch_launcher.ch.process import VmmProcess
from tests import real_vmm
from tests.guest.build import guest_payload
from tests.guest.console import GuestConsole

REPO = pathlib.Path(__file__).resolve().parents[2]
FAKE_CH = REPO / "tests" / "fakes" / "fake_cloud_hypervisor.py"
# What the simulated guest does on a signal (fake_cloud_hypervisor.py); the tiny guest does it on
# a console command. A triple fault is a reset for cloud-hypervisor, like a reboot.
SIMULATED_GUEST_SIGNALS = {"poweroff": signal.SIGUSR1, "reboot": signal.SIGUSR2, "triple-fault": signal.SIGUSR2,
                           "panic": signal.SIGURG, "emulation-failure": signal.SIGPWR}


def real_vmm_unavailable() -> str | None:
    """None when a real VMM can run here, else the reason it cannot (tests/real_vmm.py)."""
    return real_vmm.unavailable()


@dataclass
class Backend:
    """Which VMM to run: `fake` (the simulated one) or `real`."""

    name: str
    binary: str

    @property
    def real(self) -> bool:
        return self.name == "real"

    def payload(self, directory: str) -> dict[str, Any]:
        """A `PayloadConfig` that boots on this backend."""
        if self.real:
            return real_vmm.payload()
        firmware = os.path.join(directory, "hypervisor-fw")
        if not os.path.exists(firmware):
            with open(firmware, "wb") as f:
                f.write(b"\x7fELF fake firmware")
        return {"firmware": firmware}


FAKE = Backend("fake", str(FAKE_CH))


def real_backend() -> Backend:
    return Backend("real", real_vmm.binary())


class EventLog:
    """Reads the event FIFO; keeps every event seen so far."""

    def __init__(self, fifo: EventFifo) -> None:
        self.fifo = fifo
        self.parser = EventStreamParser()
        self.seen: list[Event] = []
        self.mark = 0

    def poll(self, wait: float = 0.0) -> list[Event]:
        if wait > 0:
            select.select([self.fifo.read_fd], [], [], wait)
        new = self.parser.feed(self.fifo.read_available())
        self.seen.extend(new)
        return new

    def names(self) -> list[str]:
        self.poll()
        return [e.name for e in self.seen]

    def since_mark(self) -> list[str]:
        """Names of the events after the last `set_mark()`."""
        self.poll()
        return [e.name for e in self.seen[self.mark :]]

    def set_mark(self) -> None:
        self.poll()
        self.mark = len(self.seen)

    def wait_for(self, name: str, timeout: float = 5.0, after_mark: bool = True) -> Event:
        """The first event called `name` (after the mark); AssertionError on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            start = self.mark if after_mark else 0
            for e in self.seen[start:]:
                if e.name == name:
                    return e
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {name} event within {timeout} s; seen: {[e.name for e in self.seen]}")
            self.poll(min(left, 0.1))


@dataclass
class Vmm:
    """A running VMM with its client, event log and directory."""

    backend: Backend
    dir: str
    proc: VmmProcess
    events: EventLog
    fifo: EventFifo
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def client(self) -> CloudHypervisorClient:
        return self.proc.client

    @property
    def api_socket(self) -> str:
        return self.proc.api_socket

    @property
    def major(self) -> int:
        return int((self.proc.version or "0").split(".")[0])

    def config(self, **extra: Any) -> dict[str, Any]:
        """A minimal bootable VmConfig for this backend; `extra` keys override."""
        cfg: dict[str, Any] = {
            "payload": self.backend.payload(self.dir),
            "cpus": {"boot_vcpus": 1, "max_vcpus": 2},
            "memory": {"size": 256 << 20},
            "serial": {"mode": "Null"},
            "console": {"mode": "Off"},
        }
        cfg.update(extra)
        return cfg

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    @property
    def serial_socket(self) -> str:
        return os.path.join(self.dir, f"{self.proc.api_socket.rsplit('/', 1)[-1]}.serial")

    def guest_config(self, **extra: Any) -> dict[str, Any]:
        """`config()` for a guest-driven test: the serial port on a socket, and on the real VMM
        the tiny guest (tests/guest/), whose console commands `guest_does` types."""
        cfg = self.config(serial={"mode": "Socket", "socket": self.serial_socket}, **extra)
        if self.backend.real:
            cfg["payload"] = {"firmware": str(guest_payload())}
        return cfg

    def guest_does(self, action: str) -> None:
        """The guest powers off, reboots, panics, ignores ACPI (tests/guest/console.py COMMANDS):
        a signal to the simulated VMM (where it has one), a console command to the tiny guest.
        Returns once the simulated VMM has acted on it, or the tiny guest has acknowledged it."""
        if not self.backend.real:
            self.signal(SIMULATED_GUEST_SIGNALS[action])
            with contextlib.suppress(VmmUnavailable):  # a poweroff may end it
                self.client.ping()  # the simulated VMM acts on a signal before answering the next request
            return
        with GuestConsole(self.serial_socket) as guest:
            guest.hello()
            guest.command(action)

    def stop(self) -> None:
        try:
            self.proc.terminate(shutdown_timeout=2.0, term_timeout=2.0)
        finally:
            self.proc.close()
            self.fifo.close()


def short_dir() -> str:
    """A directory with a short path (unix socket paths are limited to 107 bytes)."""
    return tempfile.mkdtemp(prefix="kc", dir="/tmp")


def launch(
    backend: Backend,
    directory: str,
    *,
    version: str | None = None,
    no_shutdown: bool = False,
    env: dict[str, str] | None = None,
    wait: bool = True,
    name: str = "ch",
) -> Vmm:
    """Starts a VMM in `directory` with a FIFO event monitor; waits until it answers."""
    fifo = open_event_fifo(os.path.join(directory, f"{name}.events"))
    full_env = dict(os.environ)
    full_env.update(env or {})
    if version is not None:
        full_env["FAKE_CH_VERSION"] = version
    try:
        proc = VmmProcess.spawn(
            backend.binary,
            api_socket=os.path.join(directory, f"{name}.sock"),
            event_monitor=fifo.path,
            log_file=os.path.join(directory, f"{name}.log"),
            no_shutdown=no_shutdown,
            env=full_env,
        )
    except BaseException:
        fifo.close()
        raise
    vmm = Vmm(backend, directory, proc, EventLog(fifo), fifo)
    if wait:
        try:
            proc.wait_ready(10.0)
        except BaseException:
            vmm.stop()
            raise
    return vmm


def raw_request(path: str, request: bytes, timeout: float = 5.0) -> bytes:
    """Sends raw bytes on a new connection and returns everything read until the answer is
    complete (by Content-Length, or the blank line for a bodyless answer) or the peer closes."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
        s.sendall(request)
        return read_response(s)
    finally:
        s.close()


def read_response(s: socket.socket) -> bytes:
    data = b""
    while True:
        head_end = data.find(b"\r\n\r\n")
        if head_end >= 0:
            head = data[:head_end].decode("latin-1").lower()
            length = 0
            for line in head.split("\r\n")[1:]:
                if line.startswith("content-length:"):
                    length = int(line.split(":", 1)[1])
            if len(data) >= head_end + 4 + length:
                return data
        try:
            chunk = s.recv(65536)
        except TimeoutError:
            return data
        if not chunk:
            return data
        data += chunk


def remove_tree(directory: str) -> None:
    shutil.rmtree(directory, ignore_errors=True)
