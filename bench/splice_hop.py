"""One extra socket hop for bench/migration.py's floor: a unix socket that forwards a single
connection to another unix socket, both ways, with splice(2) through a 1 MiB pipe, as the
launchers' relays move a migration's bulk (ch_launcher/migration/relay.py) but without reading
the protocol, counting or throttling. Put between a bare VMM and its proxy socket, two of them
add the relays' extra hops to Cloud Hypervisor's own send/receive and nothing else.

`start()` listens; the first connection accepted is forwarded once the upstream connect
succeeds; each direction ends with EOF (shut down on the other side) or an error (both
sockets shut down). `close()` ends everything and removes the socket file. Not for production.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import threading

PIPE_SIZE = 1 << 20
CHUNK = 1 << 20
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


class SpliceHop:
    def __init__(self, listen_path: str, upstream_path: str) -> None:
        self.listen_path, self.upstream_path = listen_path, upstream_path
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._server.bind(self.listen_path)
        self._server.listen(1)
        self._spawn(self._accept)

    def close(self) -> None:
        for s in [self._server, *self._sockets]:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        for thread in self._threads:
            thread.join(5)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.listen_path)

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        try:
            a, _ = self._server.accept()
        except OSError:
            return
        b = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sockets += [a, b]
        try:
            b.connect(self.upstream_path)
        except OSError:
            a.close()
            return
        self._spawn(_forward, a, b)
        self._spawn(_forward, b, a)


def _forward(src: socket.socket, dst: socket.socket) -> None:
    pipe_r, pipe_w = os.pipe2(os.O_CLOEXEC)
    with contextlib.suppress(OSError):
        fcntl.fcntl(pipe_w, F_SETPIPE_SZ, PIPE_SIZE)
    try:
        while True:
            got = os.splice(src.fileno(), pipe_w, CHUNK)
            if got == 0:
                dst.shutdown(socket.SHUT_WR)
                return
            moved = 0
            while moved < got:
                moved += os.splice(pipe_r, dst.fileno(), got - moved)
    except OSError:
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
    finally:
        os.close(pipe_r)
        os.close(pipe_w)
