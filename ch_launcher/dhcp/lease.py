"""What the guest is offered, from the plan, the pod's resolv.conf and virt-handler's cache (pure).

Mirrors upstream's DHCP configuration (`kubevirt/kubevirt @d923fdb815cd`):

- masquerade (`pkg/network/dhcp/masquerade.go`): the guest address and gateway of the VM network
  (computed by the translator), the MTU of the pod interface.
- bridge (`pkg/network/dhcp/bridge.go`, `pkg/network/setup/netpod/discoverbridge.go`): the pod's
  own address, gateway and non-local routes as virt-handler cached them in
  `vif-cache-<pod interface>.json` (Go field names of `cache.DHCPConfig`, Go's JSON encoding:
  `net.IP` as text, `net.IPMask` and `net.HardwareAddr` as base64); no server when the cache says
  `IPAMDisabled`; the MTU of `<pod interface>-nic`.
- both (`pkg/network/dhcp/configurator.go`, `pkg/network/dns/resolveconf.go`,
  `pkg/network/dhcp/server/server.go`): IPv4 name servers of the pod's resolv.conf (8.8.8.8 when
  it has none at all), its search domains (`cluster.local` when none) with
  `<subdomain>.<longest service domain>` first when the VMI has a subdomain, the domain name (the
  longest search domain), the pod's host name, an infinite lease (999 days) and the VMI's
  `dhcpOptions`.

Functions raise `LeaseError` with a message naming the file or value at fault.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import logging
from dataclasses import dataclass
from typing import Any

from ch_launcher.convert.plan import DhcpSpec
from ch_launcher.dhcp import packet as p

log = logging.getLogger(__name__)

LEASE_SECONDS = 999 * 24 * 3600  # upstream's "infinite" lease
DEFAULT_DNS = "8.8.8.8"
DEFAULT_SEARCH_DOMAIN = "cluster.local"
MAX_SEARCH_OPTION = 255


class LeaseError(ValueError):
    """The lease cannot be computed; the message names what is missing or malformed."""


@dataclass(frozen=True)
class Resolver:
    nameservers: tuple[str, ...]  # IPv4 only: DHCPv4 cannot carry others
    search: tuple[str, ...]


def parse_resolv_conf(text: str) -> Resolver:
    """`nameserver` and `search` lines as upstream reads them, defaults included."""
    v4: list[str] = []
    any_ns = False
    search: list[str] = []
    for line in text.splitlines():
        if line.startswith("nameserver"):
            fields = line.split()
            if len(fields) != 2:
                continue
            try:
                ip = ipaddress.ip_address(fields[1])
            except ValueError:
                continue
            any_ns = True
            if ip.version == 4:
                v4.append(str(ip))
            elif ip.ipv4_mapped is not None:
                v4.append(str(ip.ipv4_mapped))
        elif line.startswith("search"):
            search += [d.lower() for d in line[len("search"):].split()]
    if not any_ns:
        v4.append(DEFAULT_DNS)
    return Resolver(tuple(v4), tuple(search or [DEFAULT_SEARCH_DOMAIN]))


def domain_with_subdomain(search: tuple[str, ...], subdomain: str) -> str:
    """`<subdomain>.<longest *.svc.* search domain>` unless empty or already there."""
    if not subdomain:
        return ""
    service = [d for d in search if ".svc." in d]
    longest = max(service, key=len, default="")
    if longest and not longest.startswith(subdomain + "."):
        return f"{subdomain}.{longest}"
    return ""


@dataclass(frozen=True)
class CachedInterface:
    """The parts of virt-handler's `cache.DHCPConfig` a bridge-binding lease uses."""

    address: ipaddress.IPv4Interface | None
    gateway: str
    routes: tuple[tuple[str, str], ...]  # (destination CIDR, gateway)
    ipam_disabled: bool
    mac: str


def parse_vif_cache(text: str, path: str) -> CachedInterface:
    try:
        data = json.loads(text)
    except ValueError as e:
        raise LeaseError(f"{path} is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise LeaseError(f"{path} must hold a JSON object")
    try:
        ipam_disabled = bool(data.get("IPAMDisabled", False))
        address = _go_ipnet(data.get("IP"))
        gateway = _go_ip(data.get("Gateway"))
        routes = []
        for route in data.get("Routes") or []:
            if not isinstance(route, dict):
                raise ValueError(f"route {route!r} is not an object")
            dst = _go_ipnet(route.get("Dst"))
            if dst is not None and dst.version != 4:
                continue
            routes.append((str(dst.network) if dst is not None else "0.0.0.0/0", _go_ip(route.get("Gw"))))
        mac = _go_mac(data.get("MAC"))
    except (ValueError, TypeError, binascii.Error) as e:
        raise LeaseError(f"{path}: {e}") from None
    v4 = address if isinstance(address, ipaddress.IPv4Interface) else None
    if not ipam_disabled and v4 is None:
        raise LeaseError(f"{path} has no IPv4 address for the guest")
    return CachedInterface(v4, gateway, tuple(routes), ipam_disabled, mac)


def _go_ip(value: Any) -> str:
    """A Go `net.IP` as encoding/json writes it: text, "" or null when unset."""
    if value in (None, ""):
        return ""
    ip = ipaddress.ip_address(str(value))
    return str(ip.ipv4_mapped) if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped else str(ip)


def _go_ipnet(value: Any) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface | None:
    """A Go `*net.IPNet` (or a `netlink.Addr` embedding one): {"IP": text, "Mask": base64}."""
    if value is None:
        return None
    if isinstance(value, str):  # tolerate "10.0.0.5/24"
        return ipaddress.ip_interface(value) if value else None
    if not isinstance(value, dict):
        raise ValueError(f"{value!r} is not an address")
    ip = _go_ip(value.get("IP"))
    if not ip:
        return None
    mask = value.get("Mask")
    if mask in (None, ""):
        raise ValueError(f"address {ip} has no mask")
    raw = base64.b64decode(mask, validate=True)
    prefix = int.from_bytes(raw, "big").bit_count()
    return ipaddress.ip_interface(f"{ip}/{prefix}")


def _go_mac(value: Any) -> str:
    if value in (None, ""):
        return ""
    raw = base64.b64decode(value, validate=True)
    return ":".join(f"{b:02x}" for b in raw)


@dataclass(frozen=True)
class Lease:
    """Everything one client is offered. `options` excludes message type and server id."""

    spec: DhcpSpec
    client_mac: bytes
    client_ip: str
    server_ip: str
    options: dict[int, bytes]


def build_lease(spec: DhcpSpec, server_ip: str, resolver: Resolver, hostname: str, mtu: int | None,
                cached: CachedInterface | None = None) -> Lease:
    """The lease of `spec`. Bridge binding needs `cached` (the vif cache)."""
    if spec.binding == "masquerade":
        address = ipaddress.IPv4Interface(spec.address)
        router = spec.gateway
        routes: tuple[tuple[str, str], ...] = ()
    else:
        if cached is None or cached.address is None:
            raise LeaseError(f"{spec.field}: no cached address for bridge interface {spec.pod_interface}")
        address = cached.address
        router, routes = cached.gateway, cached.routes
        if cached.mac and cached.mac != spec.mac:
            log.warning("%s: virt-handler cached MAC %s but the guest has %s; serving the guest's",
                        spec.field, cached.mac, spec.mac)
    opts: dict[int, bytes] = {}
    if resolver.nameservers:
        opts[p.DNS_SERVERS] = p.ips(resolver.nameservers)
    if mtu:
        opts[p.INTERFACE_MTU] = p.u16(mtu)
    opts[p.SUBNET_MASK] = address.netmask.packed
    if router:
        opts[p.ROUTER] = p.ips([router])
    if routes:
        opts[p.CLASSLESS_ROUTES] = p.classless_routes(routes)
    search = list(resolver.search)
    extra = domain_with_subdomain(resolver.search, spec.subdomain)
    if extra:
        search.insert(0, extra)
    search = _usable_search_domains(spec, search)
    if search:
        opts[p.DOMAIN_SEARCH] = p.domain_search(search)
        opts[p.DOMAIN_NAME] = max(search, key=len).encode()
    if hostname:
        opts[p.HOSTNAME] = hostname.encode()
    opts[p.LEASE_TIME] = p.u32(LEASE_SECONDS)
    o = spec.options
    if o.tftp_server_name:
        opts[p.TFTP_SERVER_NAME] = o.tftp_server_name.encode()
    if o.boot_file_name:
        opts[p.BOOT_FILE_NAME] = o.boot_file_name.encode()
    if o.ntp_servers:
        opts[p.NTP_SERVERS] = p.ips(o.ntp_servers)
    for code, value in o.private_options:
        opts[code] = value.encode()
    return Lease(spec=spec, client_mac=bytes.fromhex(spec.mac.replace(":", "")),
                 client_ip=str(address.ip), server_ip=server_ip, options=opts)


def _usable_search_domains(spec: DhcpSpec, domains: list[str]) -> list[str]:
    """Drop what option 119 cannot carry (upstream refuses to start instead; a guest without one
    search domain is better off than a guest without an address)."""
    usable: list[str] = []
    size = 0
    for domain in dict.fromkeys(domains):
        if not p.valid_search_domain(domain):
            log.warning("%s: search domain %r of resolv.conf is not valid; not offered", spec.field, domain)
            continue
        encoded = len(p.domain_search([domain]))
        if size + encoded > MAX_SEARCH_OPTION:
            log.warning("%s: search domain %r does not fit in the DHCP option; not offered", spec.field, domain)
            continue
        usable.append(domain)
        size += encoded
    return usable
