"""Drives the tiny guest (guest.S) through a serial console socket.

The socket is cloud-hypervisor's own (`serial {mode: Socket}`) or the launcher's
`<private-dir>/<vmi-uid>/virt-serial0`. In a test:

    with GuestConsole(path) as guest:
        guest.hello()               # the guest is up and hears us (retries until it answers)
        guest.command("reboot")     # sends ~r, returns once KCH-GUEST-REBOOT is printed
        guest.wait_ready()          # KCH-GUEST-READY of the next boot

From a shell, for kubevirt-probe's `CHPROBE_GUEST_ACTION` (../shared/tools/README.md):

    python -m tests.guest.console SOCKET|DIR poweroff|reboot|triple-fault|panic|ignore-acpi|honour-acpi|
                                             ignore-eject|honour-eject|hello|emulation-failure|
                                             disk-write|disk-read

where DIR (e.g. the launcher's private dir) holds exactly one `*/virt-serial0`. Exit status 0 once
the guest has acknowledged the command, 1 when it did not within --timeout (the message says what
it printed), 2 for a usage error.

Failure behaviour: every wait has a deadline and raises GuestTimeout naming what was awaited and
what the guest printed; a socket that does not appear within the deadline raises GuestTimeout too.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import socket
import sys
import time
from types import TracebackType

READY = b"KCH-GUEST-READY"
# command name -> (the letter after '~', the line the guest prints before acting)
COMMANDS = {
    "poweroff": (b"p", b"KCH-GUEST-POWEROFF"),
    "reboot": (b"r", b"KCH-GUEST-REBOOT"),
    "triple-fault": (b"t", b"KCH-GUEST-TRIPLE-FAULT"),
    "panic": (b"k", b"KCH-GUEST-PANIC"),
    "ignore-acpi": (b"i", b"KCH-GUEST-IGNORING-ACPI"),
    "honour-acpi": (b"a", b"KCH-GUEST-HONOURING-ACPI"),
    "hello": (b"h", b"KCH-GUEST-HELLO"),
    "emulation-failure": (b"e", b"KCH-GUEST-EMULATION-FAILURE"),
    "ignore-eject": (b"x", b"KCH-GUEST-IGNORING-EJECT"),
    "honour-eject": (b"y", b"KCH-GUEST-HONOURING-EJECT"),
    "flood": (b"f", b"KCH-GUEST-FLOODING"),  # the same letter stops it: FLOOD_STOPPED
    # a line per virtio-blk disk, then DISKS_DONE (`disk_states()` reads them)
    "disk-write": (b"w", b"KCH-GUEST-DISKS-DONE"),
    "disk-read": (b"d", b"KCH-GUEST-DISKS-DONE"),
}
DISK_MARK = b"KCH-GUEST-DISK-MARK\n"  # what disk-write puts at the start of each writable disk
DISK_LINE = re.compile(rb"KCH-GUEST-DISK-(WRITTEN|READ-ONLY|MARKED|UNMARKED|ERROR) (\d+:\d+)\r\n")
NO_PVPANIC = b"KCH-GUEST-NO-PVPANIC"
POWER_BUTTON = b"KCH-GUEST-POWER-BUTTON\r\n"
POWER_BUTTON_IGNORED = b"KCH-GUEST-POWER-BUTTON-IGNORED"
FLOOD_LINE = b"KCH-GUEST-FLOOD 0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ\r\n"  # 80 bytes
FLOOD_STOPPED = b"KCH-GUEST-FLOOD-STOPPED"
# hotplug lines, each followed by "<segment>:<slot>" (PCI) or "<vCPU id>" (CPU) and "\r\n"
PCI_ADDED = b"KCH-GUEST-PCI-ADDED "
PCI_EJECT = b"KCH-GUEST-PCI-EJECT "
PCI_EJECT_IGNORED = b"KCH-GUEST-PCI-EJECT-IGNORED "
CPU_ADDED = b"KCH-GUEST-CPU-ADDED "
CPU_EJECT = b"KCH-GUEST-CPU-EJECT "
CPU_EJECT_IGNORED = b"KCH-GUEST-CPU-EJECT-IGNORED "
HELLO_INTERVAL = 0.25  # seconds between hellos while the guest (or the console bridge) is not up


class GuestTimeout(AssertionError):
    """The guest did not print what was awaited in time."""


class GuestConsole:
    """One connection to a serial console socket; `seen` holds all output not yet consumed."""

    def __init__(self, path: str, *, timeout: float = 10.0) -> None:
        self.path = path
        self.seen = b""
        self.sock = self._connect(timeout)

    def _connect(self, timeout: float) -> socket.socket:
        deadline = time.monotonic() + timeout
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self.path)
                return sock
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                sock.close()
                if time.monotonic() > deadline:
                    raise GuestTimeout(f"cannot connect to the console {self.path} within {timeout} s: {exc}") from None
                time.sleep(0.02)

    def reconnect(self, timeout: float = 10.0) -> None:
        """A new connection: cloud-hypervisor's own serial socket is recreated at every boot
        (the launcher's virt-serial0 is not: its clients stay connected across reboots)."""
        self.sock.close()
        self.seen = b""
        self.sock = self._connect(timeout)

    def __enter__(self) -> GuestConsole:
        return self

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read(self, until: float) -> bool:
        """Reads what arrives before `until`; False once the peer has closed."""
        self.sock.settimeout(max(until - time.monotonic(), 0.001))
        try:
            chunk = self.sock.recv(4096)
        except TimeoutError:
            return True
        except ConnectionResetError:
            return False
        if not chunk:
            return False
        self.seen += chunk
        return True

    def read_until(self, *markers: bytes, timeout: float = 10.0) -> bytes:
        """Output up to and including the first of `markers`, consumed from `seen`; which one
        was found: `out.endswith(marker)`. GuestTimeout when none appears in time."""
        deadline = time.monotonic() + timeout
        while True:
            hits = [(self.seen.find(m), m) for m in markers if m in self.seen]
            if hits:
                at, marker = min(hits)
                out, self.seen = self.seen[: at + len(marker)], self.seen[at + len(marker):]
                return out
            if time.monotonic() >= deadline:
                raise GuestTimeout(f"the guest did not print {b' or '.join(markers)!r} within {timeout} s "
                                   f"on {self.path}; it printed {self.seen[-400:]!r}")
            if not self._read(deadline):
                raise GuestTimeout(f"the console {self.path} closed before the guest printed "
                                   f"{b' or '.join(markers)!r}; it printed {self.seen[-400:]!r}")

    def reported(self, prefix: bytes, timeout: float = 10.0) -> str:
        """The value of the next hotplug line starting with `prefix` (PCI_EJECT, CPU_ADDED, ...):
        "0:6" for a PCI slot, "2" for a vCPU."""
        self.read_until(prefix, timeout=timeout)
        return self.read_until(b"\r\n", timeout=timeout)[:-2].decode()

    def wait_ready(self, timeout: float = 10.0) -> bytes:
        """The next boot's KCH-GUEST-READY (a client that connects after the boot misses it:
        use `hello()`)."""
        return self.read_until(READY, timeout=timeout)

    def hello(self, timeout: float = 10.0) -> None:
        """Returns once the guest answers `~h`, asking again every HELLO_INTERVAL: bytes sent
        before the guest (or the launcher's console bridge) is up are lost, not queued. A
        console that closes meanwhile (cloud-hypervisor's own socket, at a reboot) is
        reconnected."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.send(b"~h")
                self.read_until(COMMANDS["hello"][1],
                                timeout=min(HELLO_INTERVAL, max(deadline - time.monotonic(), 0.001)))
                return
            except (GuestTimeout, OSError) as exc:
                if time.monotonic() >= deadline:
                    raise GuestTimeout(f"the guest did not answer hello within {timeout} s on {self.path}; "
                                       f"it printed {self.seen[-400:]!r}") from None
                if isinstance(exc, OSError) or "closed" in str(exc):
                    self.reconnect(max(deadline - time.monotonic(), 0.001))

    def command(self, name: str, timeout: float = 10.0) -> bytes:
        """Sends command `name` (COMMANDS) once and returns the output up to its acknowledgement.
        Call `hello()` first when the guest may not be up yet. A panic without a pvpanic device
        raises GuestTimeout saying so."""
        letter, ack = COMMANDS[name]
        self.send(b"~" + letter)
        markers = (ack, NO_PVPANIC) if name == "panic" else (ack,)
        out = self.read_until(*markers, timeout=timeout)
        if out.endswith(NO_PVPANIC):
            raise GuestTimeout("the guest has no pvpanic device to signal a panic on")
        return out


def disk_states(out: bytes) -> dict[str, str]:
    """What a disk command printed, by PCI slot ("0:4"): WRITTEN, READ-ONLY, MARKED, UNMARKED or
    ERROR (empty with KCH-GUEST-NO-DISKS)."""
    return {slot.decode(): state.decode() for state, slot in DISK_LINE.findall(out)}


def find_socket(path: str) -> str:
    """`path` itself, or the one `*/virt-serial0` below the directory `path`."""
    if not os.path.isdir(path):
        return path
    found = glob.glob(os.path.join(path, "*", "virt-serial0")) + glob.glob(os.path.join(path, "virt-serial0"))
    if len(found) != 1:
        raise SystemExit(f"console: expected one virt-serial0 under {path}, found {found or 'none'}")
    return found[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.guest.console", description=__doc__.split("\n\n")[0])
    parser.add_argument("socket", help="the console socket, or a directory with one */virt-serial0 (a private dir)")
    parser.add_argument("command", choices=sorted(COMMANDS))
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds to wait for the guest (default 20)")
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.timeout
    try:
        path = find_socket(args.socket)
        with GuestConsole(path, timeout=args.timeout) as guest:
            guest.hello(timeout=max(deadline - time.monotonic(), 0.1))
            out = guest.command(args.command, timeout=max(deadline - time.monotonic(), 0.1))
    except GuestTimeout as exc:
        print(f"console: {exc}", file=sys.stderr)
        return 1
    print(out.decode("latin-1").strip().splitlines()[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
