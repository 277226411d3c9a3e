"""The simulated VMM's serial port (the legacy UART, `VmConfig.serial`), with a toy guest on it.

Part of `fake_cloud_hypervisor.py` (stdlib only). Modes as CH (`vmm/src/console_devices.rs@v53.0`,
`vmm/src/serial_manager.rs@v53.0`):

- `Socket`: CH binds and listens on `socket` when the VM boots (bind fails if the path exists),
  accepts one client at a time (a new client displaces the previous one), buffers output while
  nobody is connected (v53+; older versions drop it), and removes the socket file when the VM
  is shut down. A reboot rebuilds the VM, so the socket is removed and bound again and the
  client is disconnected.
- `File`: output written to `file` (created/truncated at boot). `Pty`: a new pty whose path CH
  reports in `vm.info` `config.serial.file`. `Tty`: CH's stdout. `Null`/`Off`: nothing.

The guest prints a short boot log and a login prompt at each boot and echoes what it receives
(Enter gives a new prompt), which is enough for console tests. A line typed before Enter goes to
`on_line` (the guest's shell: qemu-ga and a few file commands, `fakech_vsock.Vsock.console`),
whose answer is printed before the prompt.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
from collections.abc import Callable
from typing import Any

BOOT_LOG = (
    b"[    0.000000] Linux version 6.6.0-fake (fake-cloud-hypervisor guest)\r\n"
    b"[    0.000000] Command line: console=ttyS0\r\n"
    b"[    0.120000] Run /sbin/init as init process\r\n"
    b"\r\nWelcome to the simulated guest\r\n\r\n"
)
PROMPT = b"fake-guest login: "
MAX_BUFFER = 1 << 20


class SerialPort:
    """One VM's serial port; `start` at boot, `stop` when the VM is dropped."""

    def __init__(self, sel: selectors.BaseSelector, buffer_when_detached: bool, log: Callable[[str, str], None],
                 on_line: Callable[[str], str] | None = None):
        self.sel = sel
        self.buffer_when_detached = buffer_when_detached
        self.log = log
        self.on_line = on_line
        self.line = bytearray()  # what was typed since the last Enter
        self.mode = "Off"
        self.listener: socket.socket | None = None
        self.client: socket.socket | None = None
        self.socket_path: str | None = None
        self.out_fd: int | None = None  # File / Pty master / Tty
        self.pty_slave: int | None = None
        self.pending = bytearray()
        self.started = False
        self.last_input = 0

    def start(self, config: dict[str, Any]) -> str | None:
        """Creates the console transport; returns the pty path in Pty mode. Idempotent."""
        if self.started:
            return None
        serial = config.get("serial") or {"mode": "Null"}
        mode = serial.get("mode", "Null")
        pty_path = None
        if mode == "Socket" and serial.get("socket"):
            lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                lst.bind(serial["socket"])
            except OSError:
                lst.close()
                raise
            lst.listen(4)
            lst.setblocking(False)
            self.listener, self.socket_path = lst, serial["socket"]
            self.sel.register(lst, selectors.EVENT_READ, self._accept)
        elif mode == "File" and serial.get("file"):
            self.out_fd = os.open(serial["file"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        elif mode == "Pty":
            master, slave = os.openpty()
            os.set_blocking(master, False)
            self.out_fd, self.pty_slave = master, slave
            pty_path = os.ttyname(slave)
            self.sel.register(master, selectors.EVENT_READ, self._pty_input)
        elif mode == "Tty":
            self.out_fd = os.dup(1)
        self.mode = mode
        self.started = True
        return pty_path

    def boot(self) -> None:
        self.write(BOOT_LOG + PROMPT)

    def stop(self) -> None:
        """Closes everything; a Socket-mode path is removed (SerialManager's Drop)."""
        for s in (self.client, self.listener):
            if s is not None:
                with contextlib.suppress(KeyError, ValueError):
                    self.sel.unregister(s)
                s.close()
        self.client = self.listener = None
        if self.socket_path:
            with contextlib.suppress(OSError):
                os.unlink(self.socket_path)
            self.socket_path = None
        if self.out_fd is not None:
            if self.mode == "Pty":
                with contextlib.suppress(KeyError, ValueError):
                    self.sel.unregister(self.out_fd)
            os.close(self.out_fd)
            self.out_fd = None
        if self.pty_slave is not None:
            os.close(self.pty_slave)
            self.pty_slave = None
        self.pending.clear()
        self.started = False
        self.mode = "Off"

    # --- output ---------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self.mode == "Socket":
            if self.client is None:
                if self.buffer_when_detached:
                    self.pending += data
                    del self.pending[:-MAX_BUFFER]
                return
            self._send(data)
        elif self.out_fd is not None:
            with contextlib.suppress(OSError):
                os.write(self.out_fd, data)

    def _send(self, data: bytes) -> None:
        assert self.client is not None
        try:
            self.client.sendall(data)
        except OSError:
            self._drop_client()

    # --- input ----------------------------------------------------------------------------

    def _accept(self, _: Any) -> None:
        assert self.listener is not None
        try:
            conn, _addr = self.listener.accept()
        except BlockingIOError:
            return
        if self.client is not None:  # a new client displaces the previous one
            self.log("INFO", "serial: a new client displaces the previous one")
            self._drop_client()
        conn.setblocking(True)
        conn.settimeout(1.0)
        self.client = conn
        self.sel.register(conn, selectors.EVENT_READ, self._client_input)
        if self.pending:
            data, self.pending = bytes(self.pending), bytearray()
            self._send(data)

    def _drop_client(self) -> None:
        if self.client is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(self.client)
            with contextlib.suppress(OSError):
                self.client.shutdown(socket.SHUT_RDWR)
            self.client.close()
            self.client = None

    def _client_input(self, _: Any) -> None:
        assert self.client is not None
        try:
            data = self.client.recv(4096)
        except OSError:
            data = b""
        if not data:
            self._drop_client()
            return
        self.write(self._echo(data))

    def _pty_input(self, _: Any) -> None:
        try:
            data = os.read(self.out_fd or -1, 4096)
        except OSError:
            return
        if data:
            self.write(self._echo(data))

    def _echo(self, data: bytes) -> bytes:
        """What a getty on ttyS0 sends back: the characters, and a new prompt on Enter
        (CR, LF or CR LF, possibly split across reads)."""
        out = bytearray()
        for b in data:
            if b == 0x0A and self.last_input == 0x0D:
                pass
            elif b in (0x0D, 0x0A):
                line, self.line = self.line.decode(errors="replace").strip(), bytearray()
                answer = self.on_line(line) if self.on_line is not None and line else ""
                out += b"\r\n" + answer.encode() + PROMPT
            else:
                out.append(b)
                self.line.append(b)
            self.last_input = b
        return bytes(out)
