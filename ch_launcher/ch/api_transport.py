"""HTTP/1.1 over a unix socket for the Cloud Hypervisor REST client (`ch.api`): one connection per
request, one request at a time per socket path (the lock every client of that path shares), and
reading an answer's body without waiting for a close that never comes (`read_body`).

The standard library's `http.client` on an `AF_UNIX` socket: one request at a time over a local
socket needs no pooling, proxies, cookies or encodings, and no third-party HTTP stack in every
launcher's memory.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading

# One lock per VMM API socket path, shared by every client of it in this process (ch.api).
_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def lock_for(path: str) -> threading.Lock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(path, threading.Lock())


def read_body(resp: http.client.HTTPResponse, *, want: bool) -> bytes:
    """The body of `resp`. A framed one (Content-Length, chunked, none for 1xx/204/304: all CH
    sends, micro_http frames every answer) is read whole. An unframed one ends where the server
    closes the connection (RFC 9112 §6.3), but a server that keeps it open (an HTTP/1.1 server
    that forgot Content-Length) would hold the reader until the timeout: such a body is read only
    until it holds one complete JSON value (every CH body is one), or the connection closes, or
    the read times out (what came stands: the status has arrived); and not at all when `want` is
    False (a success whose body the caller does not use)."""
    if resp.length is not None or resp.chunked or resp.status < 200 or resp.status in (204, 304):
        return resp.read()
    if not want:
        return b""
    data = b""
    while True:
        try:
            chunk = resp.read1(65536)
        except TimeoutError:
            return data
        if not chunk:
            return data
        data += chunk
        if _one_json_value(data):
            return data


def _one_json_value(data: bytes) -> bool:
    text = data.decode("utf-8", errors="replace").strip()
    if not text or text[0] not in "[{\"":
        return False  # plain text (<= v46 errors) has no end of its own: read to close or timeout
    try:
        json.loads(text, strict=False)
    except ValueError:
        return False
    return True


class UnixConnection(http.client.HTTPConnection):
    """An HTTP/1.1 connection to a unix socket; `timeout` bounds the connect and every read."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self._path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock
