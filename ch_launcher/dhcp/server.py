"""The guest's DHCP server: one UDP socket on port 67 in the pod's network namespace, one thread.

virt-launcher runs one single-client DHCPv4 server per masquerade or bridge interface on the
in-pod bridge (`pkg/network/dhcp/server/server.go@d923fdb815cd`). This does the same for every
`Plan.dhcp` entry with one socket: the ingress interface of each request (IP_PKTINFO) picks the
lease, and only the guest's MAC is answered. DISCOVER gets an OFFER, REQUEST an ACK (a NAK when
the client asks for another address, so it starts over; no answer when it names another
server, whose offer it took), everything else is ignored, as upstream does. Replies go out of the bridge the request
came in on, broadcast unless a masquerade guest that already has its address asks by unicast
(a bridge-binding guest shares its address with the pod, so unicast would stay in the pod).

After a server is ready the marker `<private-dir>/dhcp_started-<pod interface>` is written, as
virt-launcher does. Needs CAP_NET_BIND_SERVICE (or root) for port 67, which the compute
container has.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import select
import socket
import struct
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from ch_launcher.convert.context import LauncherEnv
from ch_launcher.convert.plan import DhcpSpec, Plan
from ch_launcher.convert.podnet import bridged_pod_nic_name
from ch_launcher.dhcp import packet as p
from ch_launcher.dhcp.lease import Lease, LeaseError, Resolver, build_lease, parse_resolv_conf, parse_vif_cache

log = logging.getLogger(__name__)

SERVER_PORT, CLIENT_PORT = 67, 68
IP_PKTINFO = getattr(socket, "IP_PKTINFO", 8)  # Linux value; not exported by every Python
_PKTINFO = struct.Struct("=i4s4s")  # struct in_pktinfo
SIOCGIFADDR, SIOCGIFMTU = 0x8915, 0x8921
STOP_TIMEOUT = 5.0


class DhcpError(RuntimeError):
    """A DHCP server could not start; the message names the interface and the cause."""


@dataclass
class _Served:
    lease: Lease
    ifindex: int
    bridge: str


@dataclass
class DhcpHandle:
    """The running servers. `stop()` ends them (idempotent); `served` counts replies by kind."""

    leases: list[Lease] = field(default_factory=list)
    served: dict[str, int] = field(default_factory=dict)
    _sock: socket.socket | None = None
    _thread: threading.Thread | None = None
    _wake: tuple[int, int] | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def run(self, sock: socket.socket, served: list[_Served]) -> None:
        """Serve `served` on `sock` in a thread; the handle owns the socket from now on."""
        self.leases = [s.lease for s in served]
        self._sock, self._wake = sock, os.pipe()
        self._thread = threading.Thread(target=_serve, args=(sock, self._wake[0], served, self.served),
                                        name="dhcp-server", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._wake is not None:
            with contextlib.suppress(OSError):
                os.write(self._wake[1], b"x")
        if self._thread is not None:
            self._thread.join(STOP_TIMEOUT)
            self._thread = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._wake is not None:
            for fd in self._wake:
                os.close(fd)
            self._wake = None


def start_dhcp(plan: Plan, env: LauncherEnv, *, resolv_conf: str = "/etc/resolv.conf", hostname: str | None = None,
               port: int = SERVER_PORT) -> DhcpHandle:
    """Start serving every `plan.dhcp` entry; returns at once with the servers running.

    `env` is the LauncherEnv (its `private_dir` holds virt-handler's vif caches and the markers).
    Raises DhcpError, naming the interface, when a bridge, cache file or resolv.conf is missing
    or malformed, or the port cannot be bound. Entries without IPv4 on their bridge (IPv6-only
    pods) and bridge interfaces whose cache says `IPAMDisabled` get no server, as upstream.
    """
    handle = DhcpHandle()
    if not plan.dhcp:
        return handle
    resolver = _read_resolver(resolv_conf)
    host = hostname if hostname is not None else socket.gethostname()
    served: list[_Served] = []
    for spec in plan.dhcp:
        entry = _prepare(spec, env.private_dir, resolver, host)
        if entry is not None:
            served.append(entry)
    if not served:
        return handle
    handle.run(_bind(port, served), served)
    for entry in served:
        marker = os.path.join(env.private_dir, f"dhcp_started-{entry.lease.spec.pod_interface}")
        try:
            with open(marker, "w"):
                pass
        except OSError as e:
            handle.stop()
            raise DhcpError(f"{entry.lease.spec.field}: cannot write {marker}: {e.strerror}") from None
    return handle


def _read_resolver(path: str) -> Resolver:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return parse_resolv_conf(f.read())
    except OSError as e:
        raise DhcpError(f"cannot read the pod's DNS configuration {path}: {e.strerror}") from None


def _prepare(spec: DhcpSpec, private_dir: str, resolver: Resolver, hostname: str) -> _Served | None:
    try:
        ifindex = socket.if_nametoindex(spec.bridge)
    except OSError:
        raise DhcpError(f"{spec.field}: bridge {spec.bridge} of interface '{spec.interface}' is not in "
                        f"the pod (virt-handler creates it before the first sync)") from None
    bridge_ip = _ipv4_of(spec.bridge)
    if bridge_ip is None:
        log.info("%s: %s has no IPv4 address; no DHCPv4 server (IPv6-only pod)", spec.field, spec.bridge)
        return None
    cached = None
    if spec.binding == "bridge":
        path = os.path.join(private_dir, f"vif-cache-{spec.pod_interface}.json")
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise DhcpError(f"{spec.field}: cannot read virt-handler's cache {path}: {e.strerror}") from None
        try:
            cached = parse_vif_cache(text, path)
        except LeaseError as e:
            raise DhcpError(f"{spec.field}: {e}") from None
        if cached.ipam_disabled:
            log.info("%s: the pod network has no IPAM; no DHCP server", spec.field)
            return None
        try:
            nic = bridged_pod_nic_name(spec.pod_interface)
        except ValueError:  # a name virt-handler could not have made either
            nic = spec.pod_interface
        mtu = _mtu_of(nic) or _mtu_of(spec.pod_interface)
    else:
        mtu = _mtu_of(spec.pod_interface)
    if spec.server_ip and spec.server_ip != bridge_ip:
        log.warning("%s: %s has address %s, not %s; announcing %s", spec.field, spec.bridge, bridge_ip,
                    spec.server_ip, bridge_ip)
    try:
        lease = build_lease(spec, bridge_ip, resolver, hostname, mtu, cached)
    except (LeaseError, ValueError) as e:
        raise DhcpError(f"{spec.field}: {e}") from None
    return _Served(lease=lease, ifindex=ifindex, bridge=spec.bridge)


def _ifreq(name: str, request: int) -> bytes | None:
    """One SIOCGIF* ioctl on `name` in this network namespace; None when it has no such value."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            return fcntl.ioctl(s.fileno(), request, struct.pack("16s24x", name.encode()[:15]))
        except OSError as e:
            if e.errno in (errno.EADDRNOTAVAIL, errno.ENODEV, errno.ENXIO):
                return None
            raise DhcpError(f"cannot read the settings of link {name}: {e.strerror}") from None


def _ipv4_of(name: str) -> str | None:
    raw = _ifreq(name, SIOCGIFADDR)
    return None if raw is None else socket.inet_ntoa(raw[20:24])


def _mtu_of(name: str) -> int | None:
    raw = _ifreq(name, SIOCGIFMTU)
    return None if raw is None else struct.unpack_from("=i", raw, 16)[0]


def _bind(port: int, served: list[_Served]) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        sock.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
        sock.bind(("0.0.0.0", port))
    except OSError as e:
        sock.close()
        names = ", ".join(s.lease.spec.field for s in served)
        raise DhcpError(f"{names}: cannot listen on UDP port {port} for DHCP: {e.strerror}") from None
    return sock


def _serve(sock: socket.socket, wake_fd: int, served: list[_Served], counts: dict[str, int]) -> None:
    by_ifindex = {s.ifindex: s for s in served}
    watched: list[socket.socket | int] = [sock, wake_fd]
    while True:
        try:
            ready, _, _ = select.select(watched, [], [])
        except (OSError, ValueError):
            return
        if wake_fd in ready:
            return
        try:
            data, ancdata, _flags, _source = sock.recvmsg(4096, socket.CMSG_SPACE(_PKTINFO.size))
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EINTR):
                continue
            log.error("DHCP server stopped: %s", e)
            return
        ifindex = _ingress(ancdata)
        entry = by_ifindex.get(ifindex) if ifindex is not None else None
        if entry is None:
            continue
        try:
            request = p.decode(data)
        except p.PacketError as e:
            log.debug("ignoring a malformed DHCP message on %s: %s", entry.bridge, e)
            continue
        reply = answer(entry.lease, request)
        if reply is None:
            continue
        kind = {p.OFFER: "offer", p.ACK: "ack", p.NAK: "nak"}[reply.message_type or 0]
        destination = _destination(entry.lease, request)
        try:
            sock.sendmsg([p.encode(reply)], [(socket.IPPROTO_IP, IP_PKTINFO, _PKTINFO.pack(
                entry.ifindex, socket.inet_aton(entry.lease.server_ip), b"\0" * 4))], 0, destination)
        except OSError as e:
            log.warning("%s: cannot send the DHCP %s: %s", entry.lease.spec.field, kind, e)
            continue
        counts[kind] = counts.get(kind, 0) + 1
        log.info("%s: DHCP %s of %s to %s", entry.lease.spec.field, kind.upper(), entry.lease.client_ip,
                 entry.lease.spec.mac)


def _ingress(ancdata: Iterable[tuple[int, int, bytes]]) -> int | None:
    for level, kind, data in ancdata:
        if level == socket.IPPROTO_IP and kind == IP_PKTINFO and len(data) >= _PKTINFO.size:
            return int(_PKTINFO.unpack_from(data)[0])
    return None


def _destination(lease: Lease, request: p.Packet) -> tuple[str, int]:
    unicast = (lease.spec.binding == "masquerade" and request.ciaddr != "0.0.0.0"
               and not request.flags & p.BROADCAST_FLAG)
    return (request.ciaddr if unicast else "255.255.255.255", CLIENT_PORT)


def answer(lease: Lease, request: p.Packet) -> p.Packet | None:
    """The reply to `request` for `lease`, or None when it is not ours to answer (pure)."""
    if request.op != p.BOOTREQUEST or request.htype != 1 or request.chaddr != lease.client_mac:
        return None
    kind = request.message_type
    if kind == p.DISCOVER:
        return _reply(lease, request, p.OFFER)
    if kind != p.REQUEST:
        return None  # DECLINE, RELEASE, INFORM: ignored, as upstream does
    server_id = request.ip_option(p.SERVER_ID)
    if server_id is not None and server_id != lease.server_ip:
        return None  # the client chose another server
    wanted = request.ip_option(p.REQUESTED_IP) or (request.ciaddr if request.ciaddr != "0.0.0.0" else None)
    if wanted is not None and wanted != lease.client_ip:
        return _nak(lease, request)
    return _reply(lease, request, p.ACK)


def _reply(lease: Lease, request: p.Packet, kind: int) -> p.Packet:
    options = {p.MESSAGE_TYPE: bytes((kind,)), p.SERVER_ID: p.ips([lease.server_ip]), **lease.options}
    return p.Packet(op=p.BOOTREPLY, xid=request.xid, chaddr=request.chaddr, flags=request.flags,
                    yiaddr=lease.client_ip, giaddr=request.giaddr,
                    options=p.ordered_options(options, request.parameter_list))


def _nak(lease: Lease, request: p.Packet) -> p.Packet:
    return p.Packet(op=p.BOOTREPLY, xid=request.xid, chaddr=request.chaddr, flags=request.flags | p.BROADCAST_FLAG,
                    giaddr=request.giaddr,
                    options={p.MESSAGE_TYPE: bytes((p.NAK,)), p.SERVER_ID: p.ips([lease.server_ip])})
