"""One unary gRPC call over a unix socket, with nothing but the interpreter's built-in modules.

For the pod's processes that must stay small: `virt-freezer`, which Velero's backup hooks run in
the `compute` container beside the VM (grpcio would add 10+ MiB to the pod's memory while it
runs), and the monitor's last word to virt-handler when the launcher dies (`ch_launcher.monitor`).
The launcher itself speaks gRPC through grpcio.

What it speaks: HTTP/2 with prior knowledge (RFC 9113) on a fresh connection: the preface, an
empty SETTINGS, one request (HEADERS as HPACK literals that are never indexed, with the deadline
as `grpc-timeout`, then the length-prefixed message in DATA frames of at most 16 KiB, as the
peer's flow-control windows allow, the last with END_STREAM); then it reads frames until stream 1
ends, acknowledging the peer's SETTINGS and PINGs and returning flow-control credit for what it
reads. `timeout` bounds the whole call, however the server trickles. The answer is the one
message of a stream whose trailers say `grpc-status: 0`; any other status, a stream that is reset,
a GOAWAY that leaves stream 1 unprocessed, or a connection that closes first is `CallFailed`. Of
HPACK it reads only what finding `grpc-status` needs: the representations' structure, the name
plain or Huffman-coded, the status's digits plain or Huffman-coded (never its text). The
messages are protobuf, written and read by the few helpers below (`field_*`, `fields`): varints
and length-delimited fields, which is all the contract's small messages use here.

Built-in modules only (`_socket`, not `socket`, which brings `enum` and ~1.2 MiB): it may be
imported by a `python -I -S` process.
"""

from __future__ import annotations

import _socket
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
SETTINGS_INITIAL_WINDOW_SIZE = 4
STREAM = 1
MAX_FRAME = 16384  # every peer accepts frames this long (RFC 9113 §4.2)
FIRST_WINDOW = 65535  # both flow-control windows before the peer says otherwise (§6.9.2)
MAX_ANSWER = 16 << 20
STATUS_NAME = b"grpc-status"
STATUS_NAME_HUFFMAN = bytes.fromhex("9acac8b21234da8f")  # "grpc-status" Huffman-coded (RFC 7541 Appendix B)
HUFFMAN_DIGITS = {"00000": "0", "00001": "1", "00010": "2", "011001": "3", "011010": "4", "011011": "5",
                  "011100": "6", "011101": "7", "011110": "8", "011111": "9"}


class CallFailed(Exception):
    """The call did not return a message; the text says why."""


def call(socket_path: str, method: str, request: bytes, timeout: float) -> bytes:
    """Call `method` ("/package.Service/Method") with the serialized `request`; the serialized
    answer. CallFailed when there is none within `timeout` seconds (an OSError's text included)."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        frames = _Frames(sock, time.monotonic() + timeout)
        frames.connect(socket_path)
        headers = b"".join(_literal(k, v) for k, v in (
            (":method", "POST"), (":scheme", "http"), (":path", method), (":authority", "localhost"),
            ("content-type", "application/grpc"), ("te", "trailers"),
            ("grpc-timeout", f"{max(1, min(int(timeout * 1000), 99_999_999))}m")))
        frames.send(PREFACE + _frame(SETTINGS, 0, 0, b"") + _frame(HEADERS, END_HEADERS, STREAM, headers))
        stream = _Call(frames)
        stream.send(b"\0" + len(request).to_bytes(4, "big") + request)
        return stream.answer()
    except OSError as e:
        raise CallFailed(f"{method} on {socket_path}: {e.strerror or e}") from None
    finally:
        sock.close()


class _Call:
    """Stream 1 of the connection: the request's DATA as the windows allow, then the answer."""

    def __init__(self, frames: _Frames) -> None:
        self._frames = frames
        self._windows = [FIRST_WINDOW, FIRST_WINDOW]  # the connection's, the stream's
        self._initial = FIRST_WINDOW
        self._body = b""
        self._block = b""  # the header block being read (HEADERS, then CONTINUATION)
        self._block_ends_stream = False
        self._status: str | None = None
        self._ended = False

    def send(self, message: bytes) -> None:
        while True:
            room = min(self._windows[0], self._windows[1], MAX_FRAME)
            if room > 0:
                chunk, message = message[:room], message[room:]
                self._frames.send(_frame(DATA, 0 if message else END_STREAM, STREAM, chunk))
                self._windows = [w - len(chunk) for w in self._windows]
                if not message:
                    return
                continue
            self._read_one()  # the windows are spent: wait for the peer's credit
            if self._ended:  # answered before reading it all (an error status): answer() says which
                return

    def answer(self) -> bytes:
        while not self._ended:
            self._read_one()
        if self._status != "0":
            status = "no status" if self._status is None else f"status {self._status}"
            raise CallFailed(f"the call ended without an answer (gRPC {status})")
        body = self._body
        if len(body) < 5 or body[0] != 0 or int.from_bytes(body[1:5], "big") != len(body) - 5:
            raise CallFailed("the call ended without an answer (not one message)")
        return body[5:]

    def _read_one(self) -> None:
        kind, flags, stream, payload = self._frames.next()
        if kind == SETTINGS and not flags & ACK:
            for at in range(0, len(payload) - 5, 6):
                if int.from_bytes(payload[at:at + 2], "big") == SETTINGS_INITIAL_WINDOW_SIZE:
                    value = int.from_bytes(payload[at + 2:at + 6], "big")
                    self._windows[1] += value - self._initial
                    self._initial = value
            self._frames.reply(_frame(SETTINGS, ACK, 0, b""))
        elif kind == PING and not flags & ACK:
            self._frames.reply(_frame(PING, ACK, 0, payload))
        elif kind == GOAWAY:
            if int.from_bytes(payload[:4], "big") & 0x7FFFFFFF < STREAM:  # our stream was not processed
                raise CallFailed(f"the server went away (HTTP/2 error {int.from_bytes(payload[4:8], 'big')})")
        elif kind == WINDOW_UPDATE and stream in (0, STREAM):
            self._windows[stream] += int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
        elif stream != STREAM:
            return
        elif kind == RST_STREAM:
            raise CallFailed(f"the server reset the call (HTTP/2 error {int.from_bytes(payload[:4], 'big')})")
        elif kind == DATA:
            self._body += _unpadded(flags, payload)
            if payload and not flags & END_STREAM:  # give back the credit: longer answers arrive too
                credit = len(payload).to_bytes(4, "big")
                self._frames.reply(_frame(WINDOW_UPDATE, 0, 0, credit) + _frame(WINDOW_UPDATE, 0, STREAM, credit))
            if len(self._body) > MAX_ANSWER:
                raise CallFailed("the answer is too long")
            self._ended = bool(flags & END_STREAM)
        elif kind in (HEADERS, CONTINUATION):
            if kind == HEADERS:
                self._block, self._block_ends_stream = _header_fragment(flags, payload), bool(flags & END_STREAM)
            else:
                self._block += payload
            if flags & END_HEADERS:
                status = _grpc_status(self._block)
                self._status = status if status is not None else self._status
                self._ended = self._block_ends_stream


class _Frames:
    def __init__(self, sock: _socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline
        self._buffer = b""

    def connect(self, path: str) -> None:
        self._sock.settimeout(self._remaining())
        self._sock.connect(path)

    def send(self, data: bytes) -> None:
        self._sock.settimeout(self._remaining())
        self._sock.sendall(data)

    def reply(self, data: bytes) -> None:
        """Send a frame the peer may no longer need: one that has finished the call and closed
        its side (after a GOAWAY) has its answer in our receive buffer still."""
        try:  # noqa: SIM105 (contextlib is no built-in module)
            self.send(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def next(self) -> tuple[int, int, int, bytes]:
        header = self._read(9)
        length = int.from_bytes(header[:3], "big")
        if length > MAX_ANSWER:
            raise CallFailed("a frame longer than any answer")
        return header[3], header[4], int.from_bytes(header[5:9], "big") & 0x7FFFFFFF, self._read(length)

    def _remaining(self) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        return left

    def _read(self, n: int) -> bytes:
        while len(self._buffer) < n:
            self._sock.settimeout(self._remaining())
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


def _header_fragment(flags: int, payload: bytes) -> bytes:
    """A HEADERS frame's header block fragment: without its padding and priority fields."""
    if flags & PADDED and payload:
        payload = payload[1:len(payload) - payload[0]]
    return payload[5:] if flags & PRIORITY else payload


def _grpc_status(block: bytes) -> str | None:
    """The value of `grpc-status` in an HPACK header block, if it has one that reads as digits.
    Fields given by index never are it: it is not in the static table, and a fresh connection's
    dynamic table could only hold it from this very block."""
    pos, found = 0, None
    try:
        while pos < len(block):
            first = block[pos]
            if first & 0x80:  # indexed field
                _, pos = _hpack_read_int(block, pos, 7)
                continue
            if first & 0xE0 == 0x20:  # dynamic table size update
                _, pos = _hpack_read_int(block, pos, 5)
                continue
            index, pos = _hpack_read_int(block, pos, 6 if first & 0x40 else 4)
            name: tuple[bool, bytes] | None = None
            if index == 0:
                name, pos = _hpack_read_string(block, pos)
            value, pos = _hpack_read_string(block, pos)
            if name in ((False, STATUS_NAME), (True, STATUS_NAME_HUFFMAN)):
                found = _huffman_digits(value[1]) if value[0] else value[1].decode("latin-1")
    except IndexError:
        return None
    return found if found is not None and found.isdigit() else None


def _hpack_read_int(data: bytes, pos: int, prefix: int) -> tuple[int, int]:
    limit = (1 << prefix) - 1
    value, pos = data[pos] & limit, pos + 1
    if value < limit:
        return value, pos
    shift = 0
    while True:
        byte, pos = data[pos], pos + 1
        value += (byte & 0x7F) << shift
        shift += 7
        if byte < 128:
            return value, pos


def _hpack_read_string(data: bytes, pos: int) -> tuple[tuple[bool, bytes], int]:
    huffman = bool(data[pos] & 0x80)
    length, pos = _hpack_read_int(data, pos, 7)
    if pos + length > len(data):
        raise IndexError("truncated string")
    return (huffman, data[pos:pos + length]), pos + length


def _huffman_digits(coded: bytes) -> str | None:
    """Huffman-coded decimal digits (RFC 7541 Appendix B: 5 bits for 0-2, 6 for 3-9, then at most
    7 bits of padding, all ones); None for anything else."""
    bits = "".join(f"{b:08b}" for b in coded)
    out, pos = "", 0
    while len(bits) - pos >= 5:
        digit = HUFFMAN_DIGITS.get(bits[pos:pos + 5]) or HUFFMAN_DIGITS.get(bits[pos:pos + 6])
        if digit is None:
            break
        pos += 5 if digit in "012" else 6
        out += digit
    rest = bits[pos:]
    return out if out and len(rest) < 8 and rest == "1" * len(rest) else None


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
