"""Names and addresses virt-handler uses when it prepares the pod's network (phase 1), pure.

The launcher (phase 2) must find exactly what virt-handler created, so every rule here mirrors
upstream (`kubevirt/kubevirt @d923fdb815cd`):

- pod interface of a network (`pkg/network/namescheme/networknamescheme.go`): the pod network and
  a Multus *default* network use `eth0`; a secondary Multus network uses the hashed name
  `pod` + sha256(network name)[:11] (`GenerateHashedInterfaceName`), or, on pods created before
  the hashed scheme (and kept by `--upgrade-ordinal-ifaces`), the ordinal name `net<i>` where `i`
  counts the secondary Multus networks from 1 in `spec.networks` order. Upstream's phase 2
  (`pkg/network/link/discovery.go`: `DiscoverByNetwork`) tries the hashed name, then the ordinal.
- tap (`pkg/network/link/names.go`: `GenerateTapDeviceName`): `tap0` for the primary network,
  `"tap" + podIfaceName[3:]` for a secondary one.
- in-pod bridge (`GenerateBridgeName`): `k6t-` + pod interface name without the `pod` prefix.
- bridge binding renames the pod interface to `<name>-nic` (`GenerateNewBridgedVmiInterfaceName`)
  and gives the bridge the fake address `169.254.75.1<index>/32` (`pkg/network/link/address.go`).
- masquerade: gateway = first host of `vmNetworkCIDR` (default `10.0.2.0/24`), guest = second
  (`getMasqueradeGwAndHostAddressesFromCIDR`); the bridge MAC `02:00:00:00:00:00` is reserved.

Nothing here raises except `ValueError` with a message for bad input (CIDRs, MACs).
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Iterable, Mapping

from ch_launcher.kubevirt.vmi import Network

PRIMARY_POD_INTERFACE = "eth0"
PRIMARY_TAP = "tap0"
HASHED_PREFIX = "pod"
DEFAULT_VM_CIDR = "10.0.2.0/24"  # api.DefaultVMCIDR
MASQUERADE_BRIDGE_MAC = "02:00:00:00:00:00"  # link.StaticMasqueradeBridgeMAC
MIN_MTU = 1280  # Cloud Hypervisor refuses a smaller NetConfig.mtu
_HASHED_LEN = 11  # namescheme.maxIfaceNameLen
_MAX_LINK_NAME = 15  # IFNAMSIZ - 1


def is_secondary_multus(network: Network) -> bool:
    """A Multus network that is not the pod's default network (`vmispec.IsSecondaryMultusNetwork`)."""
    return network.multus is not None and not network.multus.default


def hashed_pod_interface(network_name: str) -> str:
    """`pod` + the first 11 hex digits of sha256(network name) (`GenerateHashedInterfaceName`)."""
    return HASHED_PREFIX + hashlib.sha256(network_name.encode()).hexdigest()[:_HASHED_LEN]


def ordinal_pod_interface(network_name: str, networks: Iterable[Network]) -> str:
    """`net<i>`: i counts secondary Multus networks from 1 in spec order; "" if not secondary."""
    index = 0
    for net in networks:
        if is_secondary_multus(net):
            index += 1
            if net.name == network_name:
                return f"net{index}"
    return ""


def pod_interface_candidates(network: Network, networks: Iterable[Network],
                             status_pod_interface: str = "") -> list[str]:
    """Pod interface names to look for, in upstream's order of preference.

    Primary network: the name recorded in the VMI status (`podInterfaceName`), else `eth0`.
    Secondary: hashed name, then ordinal name (`DiscoverByNetwork`).
    """
    if not is_secondary_multus(network):
        return [status_pod_interface or PRIMARY_POD_INTERFACE]
    candidates = [hashed_pod_interface(network.name)]
    ordinal = ordinal_pod_interface(network.name, networks)
    if ordinal:
        candidates.append(ordinal)
    return candidates


def choose_pod_interface(candidates: list[str], links: Iterable[str] | None) -> str:
    """The first candidate that exists among `links`; the first candidate when links are unknown
    (admission) or none exists (the caller reports the missing link)."""
    if links is not None:
        present = set(links)
        for name in candidates:
            if name in present:
                return name
    return candidates[0]


def tap_name(pod_interface: str, network: Network) -> str:
    """`tap0`, or `"tap" + podIfaceName[3:]` for a secondary Multus network."""
    if is_secondary_multus(network):
        return "tap" + pod_interface[3:]
    return PRIMARY_TAP


def bridge_name(pod_interface: str) -> str:
    """`k6t-` + the pod interface name with its hashed `pod` prefix trimmed."""
    trimmed = pod_interface.removeprefix(HASHED_PREFIX)
    return "k6t-" + trimmed


def bridged_pod_nic_name(pod_interface: str) -> str:
    """Where bridge binding moves the pod interface: `<name>-nic` (hashed prefix trimmed)."""
    trimmed = pod_interface.removeprefix(HASHED_PREFIX)
    name = f"{trimmed}-nic"
    if len(name) > _MAX_LINK_NAME:
        raise ValueError(f"generated interface name {name!r} exceeds {_MAX_LINK_NAME} characters")
    return name


def fake_bridge_ip(interface_index: int) -> str:
    """The link-local address virt-handler puts on a bridge-binding bridge (DHCP server id)."""
    return f"169.254.75.1{interface_index}"


def masquerade_addresses(cidr: str) -> tuple[ipaddress.IPv4Interface | ipaddress.IPv6Interface,
                                             ipaddress.IPv4Interface | ipaddress.IPv6Interface]:
    """(gateway, guest) interfaces of a masquerade VM network: its first and second host.

    Raises ValueError when the CIDR does not parse or has fewer than 4 addresses, as upstream.
    """
    try:
        net = ipaddress.ip_network(cidr, strict=False)
    except ValueError as e:
        raise ValueError(f"{cidr!r} is not a valid CIDR: {e}") from None
    if net.num_addresses < 4:
        raise ValueError(f"{cidr!r} has less than 4 addresses")
    gateway = ipaddress.ip_interface(f"{net.network_address + 1}/{net.prefixlen}")
    guest = ipaddress.ip_interface(f"{net.network_address + 2}/{net.prefixlen}")
    return gateway, guest


_MAC = re.compile(r"^[0-9a-fA-F]{2}([:-])[0-9a-fA-F]{2}(\1[0-9a-fA-F]{2}){4}$")


def normalise_mac(mac: str) -> str:
    """`AA-BB-CC-DD-EE-FF` or `aa:bb:...` -> `aa:bb:cc:dd:ee:ff`; ValueError for anything else
    (Cloud Hypervisor and the guest take a 6-byte Ethernet address only)."""
    if not _MAC.match(mac):
        raise ValueError(f"{mac!r} is not a MAC address of the form xx:xx:xx:xx:xx:xx")
    return mac.replace("-", ":").lower()


def derived_mac(vmi_uid: str, interface_name: str) -> str:
    """A locally administered unicast MAC derived from the VMI uid and the interface name.

    Stable for the VMI (known before boot, the same after a launcher restart), different per
    interface. Used when neither the VMI nor the pod gives a MAC (e.g. at admission).
    """
    digest = bytearray(hashlib.sha256(f"{vmi_uid}/{interface_name}".encode()).digest()[:6])
    digest[0] = (digest[0] & 0xFE) | 0x02  # unicast, locally administered
    mac = ":".join(f"{b:02x}" for b in digest)
    if mac == MASQUERADE_BRIDGE_MAC:  # practically impossible; keep the reserved address free
        mac = "02:00:00:00:00:01"
    return mac


def pod_link_mac(links: Mapping[str, str] | None, name: str) -> str:
    """The MAC of pod link `name` if the pod facts know it and it parses, else ""."""
    if not links or name not in links:
        return ""
    try:
        return normalise_mac(links[name])
    except ValueError:
        return ""
