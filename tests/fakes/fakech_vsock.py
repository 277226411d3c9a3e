"""The simulated VMM's virtio-vsock (`VmConfig.vsock`): Cloud Hypervisor's hybrid vsock, its host
end a unix socket, with the simulated guest's qemu-ga (`fakech_agent.py`) behind it.

Part of `fake_cloud_hypervisor.py` (stdlib only). As CH's muxer (`virtio-devices/src/vsock/
unix/muxer.rs`, `device.rs`@v53.0), measured on the real v53.0 (tests/contract/test_vsock.py):

- the socket is bound when the VM boots (it fails, and so does the boot, if the path exists:
  a VMM that was killed leaves it behind), removed when the VM stops, bound again at a reboot;
- nothing is accepted before the guest's driver activates the device (`activate`), nor while
  the VM is paused (the device thread is paused): a connection then waits, unanswered, in the
  socket's backlog (the kernel's maximum, somaxconn);
- a host connection writes `connect <port>\\n` (any case; at most one line): a port something
  listens on in the guest gets `OK <host port>\\n` (host ports counted from 2**30) and the
  stream is the guest connection; any other port, or a malformed command, closes the stream
  without a word (the guest's reset);
- a guest listener that goes (qemu-ga exits) resets its connections: their streams close; a
  listener serves one connection at a time, as qemu-ga does (the guest kernel accepts the
  others, so they get `OK`, and the agent reads them once the first has closed).

`FAKE_CH_VSOCK_ROOT=<dir>`: the socket is bound at its path under `<dir>`, standing for a pod's own
filesystem (the two VMMs of a migration in one test process would otherwise both bind the path
the received config names, which two pods never share).

The simulated guest starts qemu-ga when told (`FAKE_CH_GUEST_AGENT=<port>`: at each boot, as an
init that runs it; or a command typed on its console, `qemu-ga --method=vsock-listen
--path=<cid>:<port>`, ended by `killall qemu-ga`). `FAKE_CH_VSOCK_DRIVER=never`: a guest without
the vsock driver (as the tiny guest), whose device never activates.
"""

from __future__ import annotations

import contextlib
import functools
import os
import selectors
import shlex
import socket
from collections.abc import Callable
from typing import Any, Protocol

HOST_PORT_BASE = 1 << 30
BACKLOG = 4096  # Rust's UnixListener::bind asks for the most the kernel gives (somaxconn, 4096 here)
MIN_CONNECT = len("connect 0\n")
CONNECT = b"connect "


class Guest(Protocol):
    """The simulated guest behind the device (`fakech_agent.Guest`)."""

    frozen: bool

    def console(self, line: str) -> str: ...


class Agent(Protocol):
    """One qemu-ga process (`fakech_agent.Agent`)."""

    buffer: bytes

    def feed(self, data: bytes) -> bytes: ...


class Conn:
    """One host connection: reading its `connect` line, then joined to a guest listener."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.command = b""
        self.port = -1
        self.host_port = 0


class Vsock:
    """One VM's vsock device and the guest's listeners on it (see the module docstring)."""

    def __init__(self, sel: selectors.BaseSelector, log: Callable[[str, str], None],
                 make_guest: Callable[[dict[str, Any], Callable[[str], None]], Guest],
                 make_agent: Callable[[Guest], Agent]) -> None:
        self.sel = sel
        self.log = log
        self.make_guest = make_guest  # a booting VM's guest (its config; what guest-shutdown does)
        self.make_agent = make_agent  # qemu-ga starting in that guest
        self.listener: socket.socket | None = None
        self.path = ""
        self.active = False
        self.paused = False
        self.pending: list[Conn] = []            # reading their connect line
        self.agent_port: int | None = None       # the port qemu-ga listens on, if it runs
        self.agent_queue: list[Conn] = []        # its connections: the first is served
        self.agent: Agent | None = None
        self.guest: Guest | None = None
        self.next_host_port = HOST_PORT_BASE
        self.registered: set[int] = set()

    # --- the device -----------------------------------------------------------------------

    def start(self, config: dict[str, Any], on_shutdown: Callable[[str], None]) -> None:
        """At boot: bind the socket (OSError as CH's bind fails), and a fresh guest."""
        vsock = config.get("vsock")
        self.guest = self.make_guest(config, on_shutdown)
        if not isinstance(vsock, dict) or not vsock.get("socket"):
            return
        root = os.environ.get("FAKE_CH_VSOCK_ROOT", "").rstrip("/")
        path = root + str(vsock["socket"])
        if root:  # the directory the target pod's launcher made in its own filesystem
            os.makedirs(os.path.dirname(path), exist_ok=True)
        lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            lst.bind(path)
        except OSError:
            lst.close()
            raise
        lst.listen(BACKLOG)
        lst.setblocking(False)
        self.listener, self.path = lst, path

    def activate(self) -> None:
        """The guest's driver drives the device: connections are accepted from now on."""
        if self.listener is None or self.active:
            return
        self.active = True
        self._watch()

    def set_paused(self, paused: bool) -> None:
        self.paused = paused
        if paused:
            for fd in list(self.registered):
                with contextlib.suppress(KeyError, ValueError):
                    self.sel.unregister(fd)
            self.registered.clear()
        else:
            self._watch()

    def stop(self) -> None:
        """The VM stops (or reboots): everything closes, the socket file is removed, the guest is gone."""
        self.stop_agent()
        for conn in self.pending:
            self._close(conn)
        self.pending = []
        if self.listener is not None:
            self._unwatch(self.listener)
            self.listener.close()
            self.listener = None
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        self.active = False
        self.guest = None

    # --- the guest's agent ----------------------------------------------------------------

    def console(self, line: str) -> str:
        """A command line typed on the guest's console: qemu-ga's start and stop, the rest the
        guest's shell (fakech_agent.Guest.console)."""
        try:
            words = shlex.split(line)
        except ValueError:
            words = []
        if words[:1] == ["qemu-ga"]:
            return self.start_agent_from(words[1:])
        if words in (["killall", "qemu-ga"], ["pkill", "qemu-ga"]):
            if self.agent_port is None:
                return "killall: qemu-ga: no process killed\r\n"
            self.stop_agent()
            return ""
        return self.guest.console(line) if self.guest is not None else ""

    def start_agent_from(self, args: list[str]) -> str:
        method, path = "virtio-serial", ""
        it = iter(a for a in args if a not in ("-d", "--daemonize", "&"))
        for arg in it:
            if arg.startswith("--method="):
                method = arg.split("=", 1)[1]
            elif arg in ("-m", "--method"):
                method = next(it, "")
            elif arg.startswith("--path="):
                path = arg.split("=", 1)[1]
            elif arg in ("-p", "--path"):
                path = next(it, "")
        if method != "vsock-listen":
            return ("critical: error opening channel '/dev/virtio-ports/org.qemu.guest_agent.0': No such file or "
                    "directory\r\n")
        cid, _, port = path.partition(":")
        if not cid.isdigit() or not port.isdigit():
            return f"critical: Failed to parse cid '{cid}'\r\n" if not cid.isdigit() else \
                f"critical: Failed to parse port '{port}'\r\n"
        self.start_agent(int(port))
        return ""

    def start_agent(self, port: int) -> None:
        if self.agent_port is not None or self.guest is None:
            return
        self.agent_port = port
        self.agent = self.make_agent(self.guest)
        self.log("INFO", f"simulated guest: qemu-ga listens on vsock port {port}")

    def stop_agent(self) -> None:
        """qemu-ga exits: the guest resets its connections."""
        if self.agent_port is None:
            return
        self.log("INFO", f"simulated guest: qemu-ga on vsock port {self.agent_port} exits")
        for conn in self.agent_queue:
            self._close(conn)
        self.agent_queue = []
        self.agent_port = None
        self.agent = None
        if self.guest is not None:
            self.guest.frozen = False  # qemu-ga thaws what it froze when it exits

    # --- the muxer ------------------------------------------------------------------------

    def _watch(self) -> None:
        if self.paused or not self.active:
            return
        if self.listener is not None:
            self._register(self.listener, self._accept)
        for conn in self.pending:
            self._register(conn.sock, functools.partial(self._read_command, conn))
        if self.agent_queue:
            self._register(self.agent_queue[0].sock, functools.partial(self._agent_input, self.agent_queue[0]))
        self._accept(None)  # what waited in the backlog meanwhile

    def _register(self, sock: socket.socket, callback: Callable[[Any], None]) -> None:
        fd = sock.fileno()
        if fd < 0 or fd in self.registered:
            return
        self.sel.register(sock, selectors.EVENT_READ, callback)
        self.registered.add(fd)

    def _unwatch(self, sock: socket.socket) -> None:
        fd = sock.fileno()
        if fd in self.registered:
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(sock)
            self.registered.discard(fd)

    def _close(self, conn: Conn) -> None:
        self._unwatch(conn.sock)
        with contextlib.suppress(OSError):
            conn.sock.close()

    def _accept(self, _: Any) -> None:
        while self.listener is not None and self.active and not self.paused:
            try:
                sock, _addr = self.listener.accept()
            except (BlockingIOError, OSError):
                return
            sock.setblocking(False)
            conn = Conn(sock)
            self.pending.append(conn)
            self._register(sock, functools.partial(self._read_command, conn))

    def _read_command(self, conn: Conn, _key: Any = None) -> None:
        # CH reads at least "connect 0\n"'s length, then a byte at a time, up to the newline
        want = max(MIN_CONNECT - len(conn.command), 1)
        try:
            data = conn.sock.recv(want)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop_pending(conn)
            return
        conn.command += data
        if b"\n" not in conn.command:
            if len(conn.command) >= 32:  # CH's command buffer is full without a newline: invalid
                self._drop_pending(conn)
            return
        line = conn.command.split(b"\n", 1)[0]
        if line[:len(CONNECT)].lower() != CONNECT or not line[len(CONNECT):].strip().isdigit():
            self._drop_pending(conn)
            return
        conn.port = int(line[len(CONNECT):].strip())
        self.pending.remove(conn)
        self._unwatch(conn.sock)
        if conn.port != self.agent_port:
            self._close(conn)  # nothing listens on that guest port: the guest resets it
            return
        conn.host_port = self.next_host_port
        self.next_host_port += 1
        try:
            conn.sock.sendall(f"OK {conn.host_port}\n".encode())
        except OSError:
            self._close(conn)
            return
        self.agent_queue.append(conn)
        if len(self.agent_queue) == 1:
            self._register(conn.sock, functools.partial(self._agent_input, conn))

    def _drop_pending(self, conn: Conn) -> None:
        if conn in self.pending:
            self.pending.remove(conn)
        self._close(conn)

    def _agent_input(self, conn: Conn, _key: Any = None) -> None:
        try:
            data = conn.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        agent = self.agent
        if not data or agent is None:
            self._agent_closed(conn)
            return
        replies = agent.feed(data)
        if replies:
            try:
                conn.sock.sendall(replies)
            except OSError:
                self._agent_closed(conn)

    def _agent_closed(self, conn: Conn) -> None:
        """The host closed the agent's connection: qemu-ga takes the next one."""
        self._close(conn)
        if conn in self.agent_queue:
            self.agent_queue.remove(conn)
        if self.agent is not None:
            self.agent.buffer = b""  # a new client: what the last one left unparsed is gone
        if self.agent_queue and not self.paused:
            head = self.agent_queue[0]
            self._register(head.sock, functools.partial(self._agent_input, head))
