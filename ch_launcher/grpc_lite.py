"""One unary gRPC call over a unix socket, with nothing but the interpreter's built-in modules.

For the pod's processes that must stay small: `virt-freezer`, which Velero's backup hooks run in
the `compute` container beside the VM (grpcio would add 10+ MiB to the pod's memory while it
runs), and the monitor's last word to virt-handler when the launcher dies (`ch_launcher.monitor`).
The launcher itself speaks gRPC through grpcio.

What it speaks: HTTP/2 with prior knowledge (RFC 9113) on a fresh connection: the preface, an
empty SETTINGS, one request (HEADERS as HPACK literals that are never indexed, then one DATA
frame with the length-prefixed message and END_STREAM); then it reads frames until stream 1 ends,
acknowledging the peer's SETTINGS and PINGs and returning flow-control credit for what it reads.
It decodes no HPACK (so no gRPC status text): a call whose stream ends with exactly one message is
answered by it; a stream that ends without one (a non-OK status), is reset, or a connection that
goes away first is `CallFailed`. The messages are protobuf, written and read by the few helpers
below (`field_*`, `fields`): varints and length-delimited fields, which is all the contract's
small messages use here.

Built-in modules only (`_socket`, not `socket`, which brings `enum` and ~1.2 MiB): it may be
imported by a `python -I -S` process.
"""

from __future__ import annotations

import _socket

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
STREAM = 1
MAX_ANSWER = 16 << 20


class CallFailed(Exception):
    """The call did not return a message; the text says why."""


def call(socket_path: str, method: str, request: bytes, timeout: float) -> bytes:
    """Call `method` ("/package.Service/Method") with the serialized `request`; the serialized
    answer. CallFailed when there is none within `timeout` seconds (an OSError's text included)."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(socket_path)
        headers = b"".join(_literal(k, v) for k, v in (
            (":method", "POST"), (":scheme", "http"), (":path", method), (":authority", "localhost"),
            ("content-type", "application/grpc"), ("te", "trailers")))
        message = b"\0" + len(request).to_bytes(4, "big") + request
        sock.sendall(PREFACE + _frame(SETTINGS, 0, 0, b"") + _frame(HEADERS, END_HEADERS, STREAM, headers)
                     + _frame(DATA, END_STREAM, STREAM, message))
        return _answer(_Frames(sock))
    except OSError as e:
        raise CallFailed(f"{method} on {socket_path}: {e.strerror or e}") from None
    finally:
        sock.close()


def _answer(frames: _Frames) -> bytes:
    body = b""
    while True:
        kind, flags, stream, payload = frames.next()
        if kind == SETTINGS and not flags & ACK:
            frames.send(_frame(SETTINGS, ACK, 0, b""))
        elif kind == PING and not flags & ACK:
            frames.send(_frame(PING, ACK, 0, payload))
        elif kind == GOAWAY:
            raise CallFailed(f"the server went away (HTTP/2 error {int.from_bytes(payload[4:8], 'big')})")
        elif stream != STREAM:
            continue
        elif kind == RST_STREAM:
            raise CallFailed(f"the server reset the call (HTTP/2 error {int.from_bytes(payload[:4], 'big')})")
        elif kind == DATA:
            body += _unpadded(flags, payload)
            if payload:  # give back the credit, so an answer longer than the first window arrives
                credit = len(payload).to_bytes(4, "big")
                frames.send(_frame(WINDOW_UPDATE, 0, 0, credit) + _frame(WINDOW_UPDATE, 0, STREAM, credit))
            if len(body) > MAX_ANSWER:
                raise CallFailed("the answer is too long")
        if kind in (DATA, HEADERS) and flags & END_STREAM:
            break
    if len(body) < 5 or body[0] != 0 or int.from_bytes(body[1:5], "big") != len(body) - 5:
        raise CallFailed("the call ended without an answer (a gRPC error status)")
    return body[5:]


class _Frames:
    def __init__(self, sock: _socket.socket) -> None:
        self._sock = sock
        self._buffer = b""

    def send(self, data: bytes) -> None:
        self._sock.sendall(data)

    def next(self) -> tuple[int, int, int, bytes]:
        header = self._read(9)
        length = int.from_bytes(header[:3], "big")
        return header[3], header[4], int.from_bytes(header[5:9], "big") & 0x7FFFFFFF, self._read(length)

    def _read(self, n: int) -> bytes:
        while len(self._buffer) < n:
            chunk = self._sock.recv(max(65536, n - len(self._buffer)))
            if not chunk:
                raise CallFailed("the server closed the connection before the call ended")
            self._buffer += chunk
        data, self._buffer = self._buffer[:n], self._buffer[n:]
        return data


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload


def _unpadded(flags: int, payload: bytes) -> bytes:
    if flags & PADDED and payload:
        return payload[1:len(payload) - payload[0]]
    return payload


def _literal(name: str, value: str) -> bytes:
    """An HPACK "literal header field never indexed" with a literal name (RFC 7541 §6.2.3)."""
    n, v = name.encode(), value.encode()
    return b"\x10" + _hpack_int(len(n), 7) + n + _hpack_int(len(v), 7) + v


def _hpack_int(value: int, prefix: int) -> bytes:
    """RFC 7541 §5.1, the prefix bits' high bits 0 (string lengths: no Huffman)."""
    limit = (1 << prefix) - 1
    if value < limit:
        return bytes((value,))
    out, value = bytearray((limit,)), value - limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


# --- protobuf ---------------------------------------------------------------------------------


def field_varint(number: int, value: int) -> bytes:
    """A varint field (int32 >= 0, bool); nothing for 0, as proto3 writes it."""
    return _varint(number << 3) + _varint(value) if value else b""


def field_bytes(number: int, value: bytes | str) -> bytes:
    """A length-delimited field (bytes, string, an embedded message); nothing when empty."""
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data if data else b""


def fields(message: bytes) -> dict[int, bytes | int]:
    """A message's fields by number (the last of a repeated one): varints as int, length-delimited
    as bytes; fixed-width fields are skipped. ValueError for a malformed message."""
    found: dict[int, bytes | int] = {}
    pos = 0
    while pos < len(message):
        key, pos = _read_varint(message, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            found[number], pos = _read_varint(message, pos)
        elif wire == 2:
            length, pos = _read_varint(message, pos)
            if pos + length > len(message):
                raise ValueError("truncated field")
            found[number], pos = message[pos:pos + length], pos + length
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise ValueError(f"wire type {wire}")
    if pos != len(message):
        raise ValueError("truncated field")
    return found


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if byte < 128:
            return value, pos
