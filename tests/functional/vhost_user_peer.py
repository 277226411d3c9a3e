"""A vhost-user backend that completes the handshake Cloud Hypervisor makes at boot (net, and
with `features=` any other device: virtio-fs's virtiofsd stand-in).

Enough of the vhost-user protocol (QEMU `docs/interop/vhost-user.rst`; the frontend is
`virtio-devices/src/vhost_user/{net.rs,vu_common_ctrl.rs}@v53.0`) for the VMM to create its
vhost-user-net device. When it creates the device CH connects (or, in server mode, accepts)
and sends SET_OWNER, GET_FEATURES, then (if the backend offers VHOST_USER_F_PROTOCOL_FEATURES)
GET_PROTOCOL_FEATURES and SET_PROTOCOL_FEATURES, and (if MQ was agreed) GET_QUEUE_NUM; boot
fails if the backend has fewer queues than asked. The rest (SET_MEM_TABLE, SET_VRING_*) comes
only once the guest's driver activates the device, which the tiny guest never does; it is
answered anyway: GET_* with zeros, every message that asks for a reply (REPLY_ACK) with 0, and
file descriptors are received and closed.

`VhostUserPeer(path, listen=True)` is the switch owning the socket (the VM's `client` mode);
`listen=False` connects to the socket the VMM creates (`server` mode). `requests` lists the
names of the messages received, in order, per connection.
"""

from __future__ import annotations

import array
import contextlib
import os
import socket
import struct
import threading
import time

HEADER = struct.Struct("<III")
FLAG_VERSION, FLAG_REPLY, FLAG_NEED_REPLY = 0x1, 0x4, 0x8
NAMES = {1: "GET_FEATURES", 2: "SET_FEATURES", 3: "SET_OWNER", 4: "RESET_OWNER", 5: "SET_MEM_TABLE",
         6: "SET_LOG_BASE", 7: "SET_LOG_FD", 8: "SET_VRING_NUM", 9: "SET_VRING_ADDR", 10: "SET_VRING_BASE",
         11: "GET_VRING_BASE", 12: "SET_VRING_KICK", 13: "SET_VRING_CALL", 14: "SET_VRING_ERR",
         15: "GET_PROTOCOL_FEATURES", 16: "SET_PROTOCOL_FEATURES", 17: "GET_QUEUE_NUM", 18: "SET_VRING_ENABLE",
         24: "GET_CONFIG", 25: "SET_CONFIG", 36: "GET_MAX_MEM_SLOTS", 37: "ADD_MEM_REG", 38: "REM_MEM_REG"}
VIRTIO_F_VERSION_1 = 1 << 32
VHOST_USER_F_PROTOCOL_FEATURES = 1 << 30
VIRTIO_NET_F_MRG_RXBUF = 1 << 15
VIRTIO_NET_F_CSUM, VIRTIO_NET_F_GUEST_CSUM = 1 << 0, 1 << 1
PROTOCOL_MQ, PROTOCOL_REPLY_ACK, PROTOCOL_CONFIGURE_MEM_SLOTS = 1 << 0, 1 << 3, 1 << 15


class VhostUserPeer:
    """The switch's end of one vhost-user-net port (see the module docstring)."""

    def __init__(self, path: os.PathLike[str] | str, *, listen: bool = True, queues: int = 2,
                 owner: int | None = None, features: int | None = None) -> None:
        self.path = str(path)
        self.queues = queues
        self.features = features if features is not None else (
            VIRTIO_F_VERSION_1 | VHOST_USER_F_PROTOCOL_FEATURES | VIRTIO_NET_F_MRG_RXBUF
            | VIRTIO_NET_F_CSUM | VIRTIO_NET_F_GUEST_CSUM)
        self.protocol_features = PROTOCOL_MQ | PROTOCOL_REPLY_ACK | PROTOCOL_CONFIGURE_MEM_SLOTS
        self.connections: list[list[str]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        if listen:
            self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._listener.bind(self.path)
            self._listener.listen(4)
            self._listener.settimeout(0.1)
            if owner is not None:  # the switch hands its port to the pod's user
                os.chown(self.path, owner, owner)
        self._thread = threading.Thread(target=self._run, name="vhost-user-peer", daemon=True)
        self._thread.start()

    @property
    def requests(self) -> list[str]:
        """Messages of the first connection that said anything (a probe that only connects and
        closes, as the simulated VMM's, says nothing)."""
        return next((c for c in self.connections if c), [])

    def wait_for(self, name: str, timeout: float = 10.0) -> list[str]:
        deadline = time.monotonic() + timeout
        while name not in self.requests:
            if time.monotonic() > deadline:
                raise AssertionError(f"no {name} within {timeout} s; got {self.connections} {self.errors}")
            time.sleep(0.01)
        return self.requests

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        if self._listener is not None:
            self._listener.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            conn = self._next_connection()
            if conn is None:
                continue
            with conn:
                self._serve(conn)
            if self._listener is None:
                return

    def _next_connection(self) -> socket.socket | None:
        if self._listener is not None:
            try:
                conn, _ = self._listener.accept()
            except (TimeoutError, OSError):
                return None
            return conn
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.path)
        except OSError:
            conn.close()
            time.sleep(0.01)
            return None
        return conn

    def _serve(self, conn: socket.socket) -> None:
        seen: list[str] = []
        self.connections.append(seen)
        conn.settimeout(0.1)
        buffered = b""
        while not self._stop.is_set():
            try:
                data, fds = _recv(conn)
            except TimeoutError:
                continue
            except OSError as e:
                self.errors.append(str(e))
                return
            for fd in fds:
                os.close(fd)
            if not data:
                return
            buffered += data
            while len(buffered) >= HEADER.size:
                request, flags, size = HEADER.unpack_from(buffered)
                if len(buffered) < HEADER.size + size:
                    break
                payload, buffered = buffered[HEADER.size:HEADER.size + size], buffered[HEADER.size + size:]
                seen.append(NAMES.get(request, str(request)))
                reply = self._answer(request, payload)
                if reply is None and flags & FLAG_NEED_REPLY:
                    reply = struct.pack("<Q", 0)  # REPLY_ACK: success
                if reply is not None:
                    conn.sendall(HEADER.pack(request, FLAG_VERSION | FLAG_REPLY, len(reply)) + reply)

    def _answer(self, request: int, payload: bytes) -> bytes | None:
        if request == 1:
            return struct.pack("<Q", self.features)
        if request == 15:
            return struct.pack("<Q", self.protocol_features)
        if request == 17:
            return struct.pack("<Q", self.queues)
        if request == 36:
            return struct.pack("<Q", 32)
        if request == 11:  # GET_VRING_BASE: the vring state, index then num
            return payload[:4] + struct.pack("<I", 0)
        if request == 24:  # GET_CONFIG: offset, size, flags, then that many bytes
            offset, size, flags = struct.unpack_from("<III", payload)
            return struct.pack("<III", offset, size, flags) + bytes(size)
        return None


def _recv(conn: socket.socket) -> tuple[bytes, list[int]]:
    fds = array.array("i")
    data, ancdata, _, _ = conn.recvmsg(65536, socket.CMSG_SPACE(16 * fds.itemsize))
    for level, kind, cdata in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            with contextlib.suppress(ValueError):
                fds.frombytes(cdata[: len(cdata) - len(cdata) % fds.itemsize])
    return data, list(fds)
