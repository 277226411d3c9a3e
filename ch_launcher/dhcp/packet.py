"""DHCPv4 messages (RFC 2131, options RFC 2132), pure: decode requests, encode replies.

Only what a single-client server needs. `decode()` raises `PacketError` (never anything else) for
bytes that are not a BOOTP/DHCP message. `encode()` writes options in the order given, splits
values longer than 255 bytes into consecutive instances (RFC 3396), ends with the END option and
pads the message to the 300 bytes BOOTP clients expect.
"""

from __future__ import annotations

import ipaddress
import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

BOOTREQUEST, BOOTREPLY = 1, 2
MAGIC_COOKIE = b"\x63\x82\x53\x63"
_HEADER = struct.Struct("!BBBBIHH4s4s4s4s16s64s128s")  # 236 bytes
MIN_MESSAGE = 300
BROADCAST_FLAG = 0x8000

# option codes
PAD, END = 0, 255
SUBNET_MASK, ROUTER, DNS_SERVERS, HOSTNAME, DOMAIN_NAME = 1, 3, 6, 12, 15
INTERFACE_MTU, NTP_SERVERS = 26, 42
REQUESTED_IP, LEASE_TIME, MESSAGE_TYPE, SERVER_ID, PARAMETER_LIST = 50, 51, 53, 54, 55
TFTP_SERVER_NAME, BOOT_FILE_NAME = 66, 67
DOMAIN_SEARCH, CLASSLESS_ROUTES = 119, 121

# message types (option 53)
DISCOVER, OFFER, REQUEST, DECLINE, ACK, NAK, RELEASE, INFORM = range(1, 9)


class PacketError(ValueError):
    """Bytes that are not a DHCP message; the message says what is wrong."""


@dataclass
class Packet:
    op: int
    xid: int
    chaddr: bytes  # client hardware address, hlen bytes
    flags: int = 0
    secs: int = 0
    ciaddr: str = "0.0.0.0"
    yiaddr: str = "0.0.0.0"
    siaddr: str = "0.0.0.0"
    giaddr: str = "0.0.0.0"
    htype: int = 1
    hops: int = 0
    options: dict[int, bytes] = field(default_factory=dict)

    @property
    def message_type(self) -> int | None:
        value = self.options.get(MESSAGE_TYPE, b"")
        return value[0] if len(value) == 1 else None

    def ip_option(self, code: int) -> str | None:
        value = self.options.get(code, b"")
        return str(ipaddress.IPv4Address(value)) if len(value) == 4 else None

    @property
    def parameter_list(self) -> list[int]:
        return list(self.options.get(PARAMETER_LIST, b""))


def decode(data: bytes) -> Packet:
    """Parse a BOOTP/DHCP message; repeated options are concatenated (RFC 3396)."""
    if len(data) < _HEADER.size + len(MAGIC_COOKIE):
        raise PacketError(f"{len(data)} bytes is too short for a DHCP message")
    (op, htype, hlen, hops, xid, secs, flags, ciaddr, yiaddr, siaddr, giaddr, chaddr, _sname,
     _file) = _HEADER.unpack_from(data)
    if op not in (BOOTREQUEST, BOOTREPLY):
        raise PacketError(f"op {op} is neither BOOTREQUEST nor BOOTREPLY")
    if hlen > 16:
        raise PacketError(f"hardware address length {hlen} is over 16")
    if data[_HEADER.size:_HEADER.size + 4] != MAGIC_COOKIE:
        raise PacketError("no DHCP magic cookie")
    options: dict[int, bytes] = {}
    i = _HEADER.size + 4
    while i < len(data):
        code = data[i]
        if code == PAD:
            i += 1
            continue
        if code == END:
            break
        if i + 1 >= len(data):
            raise PacketError(f"option {code} is cut off")
        length = data[i + 1]
        value = data[i + 2:i + 2 + length]
        if len(value) != length:
            raise PacketError(f"option {code} is cut off")
        options[code] = options.get(code, b"") + value
        i += 2 + length
    return Packet(op=op, htype=htype, hops=hops, xid=xid, secs=secs, flags=flags,
                  ciaddr=_ip(ciaddr), yiaddr=_ip(yiaddr), siaddr=_ip(siaddr), giaddr=_ip(giaddr),
                  chaddr=chaddr[:hlen], options=options)


def encode(packet: Packet) -> bytes:
    header = _HEADER.pack(packet.op, packet.htype, len(packet.chaddr), packet.hops, packet.xid,
                          packet.secs, packet.flags, _raw(packet.ciaddr), _raw(packet.yiaddr),
                          _raw(packet.siaddr), _raw(packet.giaddr), packet.chaddr.ljust(16, b"\0"),
                          b"", b"")
    out = bytearray(header + MAGIC_COOKIE)
    for code, value in packet.options.items():
        if not 0 < code < 255:
            raise ValueError(f"option code {code} cannot be sent")
        chunks = [value[k:k + 255] for k in range(0, len(value), 255)] or [b""]
        for chunk in chunks:
            out += bytes((code, len(chunk))) + chunk
    out.append(END)
    if len(out) < MIN_MESSAGE:
        out += bytes(MIN_MESSAGE - len(out))
    return bytes(out)


def _ip(raw: bytes) -> str:
    return str(ipaddress.IPv4Address(raw))


def _raw(ip: str) -> bytes:
    return ipaddress.IPv4Address(ip).packed


# --- option values -----------------------------------------------------------------------------

def ips(addresses: Iterable[str]) -> bytes:
    return b"".join(ipaddress.IPv4Address(a).packed for a in addresses)


def u16(value: int) -> bytes:
    return struct.pack("!H", value)


def u32(value: int) -> bytes:
    return struct.pack("!I", value)


def classless_routes(routes: Iterable[tuple[str, str]]) -> bytes:
    """RFC 3442 option 121 from (destination CIDR, gateway) pairs; default routes go last, so
    the route to a gateway exists before the default route through it (as upstream sorts them)."""
    ordered = sorted(routes, key=lambda r: ipaddress.IPv4Network(r[0], strict=False).prefixlen == 0)
    out = bytearray()
    for destination, gateway in ordered:
        net = ipaddress.IPv4Network(destination, strict=False)
        width = net.prefixlen
        significant = (width + 7) // 8
        out += bytes((width,)) + net.network_address.packed[:significant]
        out += ipaddress.IPv4Address(gateway or "0.0.0.0").packed
    return bytes(out)


# A domain as upstream accepts it in resolv.conf (pkg/network/dhcp/server/server.go): lower-case
# LDH labels, at most 253 characters.
_SEARCH_DOMAIN = re.compile(r"^(?:[_a-z0-9](?:[_a-z0-9-]{0,61}[a-z0-9])?\.)*(?:[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?)?$")


def valid_search_domain(domain: str) -> bool:
    return len(domain) <= 253 and bool(_SEARCH_DOMAIN.match(domain))


def domain_search(domains: Iterable[str]) -> bytes:
    """RFC 3397 option 119: each domain as RFC 1035 labels, no compression."""
    out = bytearray()
    for domain in domains:
        for label in domain.split("."):
            if label:
                out += bytes((len(label),)) + label.encode("ascii")
        out.append(0)
    return bytes(out)


def ordered_options(options: Mapping[int, bytes], requested: Iterable[int]) -> dict[int, bytes]:
    """Message type, server id and lease time first, then what the client asked for in its
    order, then everything else by code."""
    first = [c for c in (MESSAGE_TYPE, SERVER_ID, LEASE_TIME) if c in options]
    asked = [c for c in dict.fromkeys(requested) if c in options and c not in first]
    rest = sorted(c for c in options if c not in first and c not in asked)
    return {c: options[c] for c in (*first, *asked, *rest)}
