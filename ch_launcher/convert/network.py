"""`spec.domain.devices.interfaces` + `spec.networks` -> `net`, VFIO `devices`, DHCP servers.

What each binding becomes on Cloud Hypervisor (decisions in docs/features.md):

- `masquerade` (pod network) and `bridge` (pod or Multus network): a virtio-net device on the tap
  virt-handler created in phase 1 (`tap0`, or `tap<suffix>` for a secondary network, see
  `podnet`), no `mtu` (the VMM keeps the MTU virt-handler gave the tap and offers it to the
  guest), and a DHCP server on the in-pod bridge (`Plan.dhcp`) as virt-launcher runs it
  (`pkg/network/setup/launcher/configurator.go@d923fdb815cd`).
- `sriov`: a VFIO device at the VF's sysfs path; the PCI address comes from the pod's
  network-info file as upstream reads it (`netinfo`), checked before boot (`RequireVfioDevice`).
- a binding plugin (`binding: {name}`): with `domainAttachmentType: managedTap` virt-handler makes
  a bridge and tap like `bridge` binding (no DHCP, as upstream); a plugin that hands the pod a
  vhost-user socket through `downwardAPI: device-info` (the `vhostuser` binding) becomes a
  vhost-user-net device on that socket, with shared guest memory (`vhostuser`).
- `slirp`, `macvtap`, `passt` (removed from KubeVirt in v1.3), `passtBinding`, NIC models other
  than virtio, link state `down`, network boot: unsupported, with the field path.

MAC: `macAddress`, else the MAC of the pod interface as upstream's phase 2 takes it (for
masquerade and bridge the pod's own MAC, which bridge-binding networks may enforce), else a MAC
derived from the VMI uid and interface name (admission, or pods whose links are unknown).
Queues: one pair, or one per vCPU (at most 256) with `networkInterfaceMultiqueue`, which is how
virt-handler created the tap; Cloud Hypervisor opens the tap multi-queue only then.
"""

from __future__ import annotations

import ipaddress
from dataclasses import replace

from ch_launcher.ch.vmconfig import DeviceConfig, NetConfig
from ch_launcher.convert import podnet
from ch_launcher.convert.context import Translation
from ch_launcher.convert.netinfo import DeviceInfo, NetworkInfoError, parse_network_info
from ch_launcher.convert.plan import DhcpOptions, DhcpSpec, RequireVfioDevice
from ch_launcher.convert.vfio import VfioError, domain_host_device, pci_sysfs_path
from ch_launcher.convert.vhostuser import VHOSTUSER_BINDING, vhost_user_interface
from ch_launcher.kubevirt.domain_view import DomainInterface
from ch_launcher.kubevirt.vmi import DHCPOptions, Interface, Network

MAX_QUEUE_PAIRS = 256  # converter/network/virtio-queues.go: MultiQueueMaxQueues
SRIOV_ALIAS_PREFIX = "sriov-"  # pkg/network/deviceinfo/sriov.go
REMOVED_BINDINGS = ("slirp", "macvtap", "passt")


class _Pod:
    """What the translation may know of the pod's network (nothing at admission)."""

    def __init__(self, t: Translation):
        pod = t.env.pod
        self.present = pod is not None
        self.mtu = dict(pod.link_mtu) if pod else {}
        self.mac = dict(pod.link_mac) if pod else {}
        # Link names are only known when the launcher looked; an empty listing means "unknown".
        self.links: set[str] | None = (set(self.mtu) | set(self.mac)) or None
        self.network_info_text = pod.network_info if pod else None


def configure_network(t: Translation) -> None:
    """Translate every interface; report each problem with its field path and carry on."""
    spec = t.vmi.spec
    networks = {n.name: (j, n) for j, n in enumerate(spec.networks)}
    pod = _Pod(t)
    pairs = queue_pairs(t)
    device_info: dict[str, DeviceInfo] | None = None  # parsed on first need
    used_ids = t.device_ids()

    for i, iface in enumerate(spec.domain.devices.interfaces):
        path = f"spec.domain.devices.interfaces[{i}]"
        found = networks.get(iface.name)
        if found is None:
            t.unsupported(f"{path}.name", f"{path}.name '{iface.name}' not found in spec.networks",
                          "FieldValueNotFound")
            continue
        net_index, net = found
        if iface.state == "absent":
            continue  # being hot-unplugged: upstream leaves it out of the domain
        if len(iface.binding_methods) != 1:
            # KubeVirt's wording and cause type (pkg/network/admitter/binding.go@d923fdb815cd)
            t.unsupported(path, f"logical {iface.name} interface must have exactly one binding method "
                          f"or binding plugin", "FieldValueInvalid")
            continue
        if not _check_network_source(t, net_index, net):
            continue
        if not _check_common(t, path, iface):
            continue
        if iface.name.startswith("_"):
            t.unsupported(f"{path}.name", f"{path}.name '{iface.name}' may not start with '_': Cloud "
                          f"Hypervisor reserves such device ids", "FieldValueInvalid")
            continue
        if iface.name in used_ids:
            t.unsupported(f"{path}.name", f"{path}.name '{iface.name}' is also the name of another "
                          f"device (a disk?); Cloud Hypervisor needs unique device ids", "FieldValueInvalid")
            continue
        used_ids.add(iface.name)

        method = iface.binding_method
        if method in ("masquerade", "bridge"):
            _tap_interface(t, i, path, iface, net_index, net, pod, pairs, dhcp=True)
        elif method == "sriov":
            if device_info is None:
                device_info = _device_info(t, path, pod)
            _sriov_interface(t, path, iface, net, pod, device_info)
        elif method.startswith("plugin:"):
            if device_info is None:
                device_info = _device_info(t, path, pod)
            _plugin_interface(t, i, path, iface, net_index, net, pod, pairs, device_info)
        elif method in REMOVED_BINDINGS:
            t.unsupported(f"{path}.{method}", f"{path}.{method}: the {method} binding was removed from "
                          f"KubeVirt in v1.3 and Cloud Hypervisor has no equivalent")
        elif method == "passtBinding":
            t.unsupported(f"{path}.passtBinding", f"{path}.passtBinding is not supported: passt is started "
                          f"by libvirt in virt-launcher, which the Cloud Hypervisor launcher does not run")


def queue_pairs(t: Translation) -> int:
    """Queue pairs of every virtio NIC: 1, or the vCPU count (<= 256) with multi-queue."""
    if not t.vmi.spec.domain.devices.networkInterfaceMultiqueue:
        return 1
    if t.config.cpus is not None:
        vcpus = t.config.cpus.boot_vcpus
    else:  # compute failed or has not run: the topology product, as GetCPUTopology reads it
        cpu = t.vmi.spec.domain.cpu
        vcpus = (max(cpu.sockets, 1) * max(cpu.cores, 1) * max(cpu.threads, 1)) if cpu else 1
    return max(1, min(vcpus, MAX_QUEUE_PAIRS))


def _check_network_source(t: Translation, j: int, net: Network) -> bool:
    if net.pod is None and net.multus is None:
        t.unsupported(f"spec.networks[{j}]", f"spec.networks[{j}] '{net.name}': only pod and multus "
                      f"networks are supported")
        return False
    if net.pod is not None and net.multus is not None:
        # KubeVirt's rule and cause type (pkg/network/admitter/netsource.go@d923fdb815cd)
        t.unsupported(f"spec.networks[{j}]", f"spec.networks[{j}] '{net.name}' should have only one network "
                      f"type", "FieldValueRequired")
        return False
    return True


def _check_common(t: Translation, path: str, iface: Interface) -> bool:
    """Fields every binding shares. False when the interface cannot be translated at all."""
    ok = True
    if iface.model not in ("", "virtio"):
        t.unsupported(f"{path}.model", f"{path}.model '{iface.model}' is not supported: Cloud "
                      f"Hypervisor emulates only virtio-net NICs")
        ok = False
    if iface.state not in ("", "up"):
        if iface.state == "down":
            t.unsupported(f"{path}.state", f"{path}.state 'down' is not supported: Cloud Hypervisor "
                          f"cannot start a NIC with its link down")
        else:
            t.unsupported(f"{path}.state", f"logical {iface.name} interface state value is "
                          f"unsupported: {iface.state}", "FieldValueInvalid")
        ok = False
    if iface.macAddress:
        try:
            podnet.normalise_mac(iface.macAddress)
        except ValueError as e:
            t.unsupported(f"{path}.macAddress", f"{path}.macAddress: {e}", "FieldValueInvalid")
            ok = False
    if iface.bootOrder is not None:
        t.unsupported(f"{path}.bootOrder", f"{path}.bootOrder: network boot (PXE) is not supported by "
                      f"Cloud Hypervisor's firmware")
    if iface.pciAddress:
        t.warn(f"{path}.pciAddress", f"{path}.pciAddress is ignored: Cloud Hypervisor assigns PCI slots itself")
    if iface.acpiIndex is not None:
        t.warn(f"{path}.acpiIndex", f"{path}.acpiIndex is ignored: Cloud Hypervisor sets no ACPI index")
    if iface.tag:
        t.warn(f"{path}.tag", f"{path}.tag: device role tags are not passed to the guest's metadata")
    return ok


def _guest_mac(t: Translation, iface: Interface, pod: _Pod, pod_interface: str, fallback: str = "") -> str:
    if iface.macAddress:
        return podnet.normalise_mac(iface.macAddress)
    return (podnet.pod_link_mac(pod.mac, pod_interface) or fallback
            or podnet.derived_mac(t.vmi.metadata.uid, iface.name))


def _pod_interface(t: Translation, path: str, iface: Interface, net: Network, pod: _Pod) -> str | None:
    status = next((s.podInterfaceName for s in t.vmi.status.interfaces if s.name == iface.name), "")
    candidates = podnet.pod_interface_candidates(net, t.vmi.spec.networks, status)
    name = podnet.choose_pod_interface(candidates, pod.links)
    if pod.links is not None and name not in pod.links:
        t.unsupported(path, f"{path}: the pod has no interface {' or '.join(candidates)} for network "
                      f"'{net.name}'; was the network attached to the pod?", "FieldValueNotFound")
        return None
    return name


def _pod_mtu(pod: _Pod, *links: str) -> int | None:
    """The MTU of the first of `links` the pod has (the tap's, virt-handler set it from the pod
    interface), for the Domain and DHCP; never sent to Cloud Hypervisor (see `_tap_interface`)."""
    return next((pod.mtu[link] for link in links if link in pod.mtu), None)


def _tap_interface(t: Translation, i: int, path: str, iface: Interface, net_index: int, net: Network,
                   pod: _Pod, pairs: int, *, dhcp: bool) -> None:
    """masquerade, bridge and managedTap plugins: virtio-net on the tap virt-handler made."""
    method = iface.binding_method
    if method == "masquerade":
        if net.pod is None:
            t.unsupported(f"{path}.name", "Masquerade interface only implemented with pod network",
                          "FieldValueInvalid")
            return
        if iface.macAddress and podnet.normalise_mac(iface.macAddress) == podnet.MASQUERADE_BRIDGE_MAC:
            t.unsupported(f"{path}.macAddress", "The requested MAC address is reserved for the in-pod "
                          "bridge. Please choose another one.", "FieldValueInvalid")
            return
    pod_interface = _pod_interface(t, path, iface, net, pod)
    if pod_interface is None:
        return
    tap = podnet.tap_name(pod_interface, net)
    if pod.links is not None and tap not in pod.links:
        t.unsupported(path, f"{path}: tap device {tap} is not in the pod; virt-handler creates it "
                      f"before the first sync (a plugin with domainAttachmentType tap, rather than "
                      f"managedTap, gives no tap Cloud Hypervisor can open)", "FieldValueNotFound")
        return
    mac = _guest_mac(t, iface, pod, pod_interface)
    mtu = _pod_mtu(pod, tap, pod_interface)
    # No NetConfig.mtu: Cloud Hypervisor v53 sets the tap's MTU whenever it is given (SIOCSIFMTU,
    # even to the value the tap has), which needs CAP_NET_ADMIN, and the compute container runs
    # the VMM without any capability. Without it, CH reads the MTU of the tap virt-handler made
    # (SIOCGIFMTU) and still offers it to the guest as VIRTIO_NET_F_MTU
    # (cloud-hypervisor virtio-devices/src/net.rs@v53 `new_with_tap`, net_util/src/open_tap.rs@v53).
    t.config.net = [*(t.config.net or []),
                    NetConfig(id=iface.name, tap=tap, mac=mac, num_queues=2 * pairs)]
    t.interfaces.append(DomainInterface(alias=iface.name, mac=mac, tap=tap, mtu=mtu,
                                        queues=pairs if pairs > 1 else None))
    if not dhcp:
        return
    options = dhcp_options(t, path, iface.dhcpOptions)
    spec = DhcpSpec(field=path, interface=iface.name, binding=method, pod_interface=pod_interface,
                    bridge=podnet.bridge_name(pod_interface), mac=mac, server_ip="",
                    subdomain=t.vmi.spec.subdomain, options=options)
    if method == "masquerade":
        assert net.pod is not None
        cidr = net.pod.vmNetworkCIDR or podnet.DEFAULT_VM_CIDR
        try:
            gateway, guest = podnet.masquerade_addresses(cidr)
            if gateway.version != 4:
                raise ValueError(f"{cidr!r} is not an IPv4 CIDR")
        except ValueError as e:
            t.unsupported(f"spec.networks[{net_index}].pod.vmNetworkCIDR",
                          f"spec.networks[{net_index}].pod.vmNetworkCIDR: {e}", "FieldValueInvalid")
            return
        if net.pod.vmIPv6NetworkCIDR:
            try:
                podnet.masquerade_addresses(net.pod.vmIPv6NetworkCIDR)
            except ValueError as e:
                t.unsupported(f"spec.networks[{net_index}].pod.vmIPv6NetworkCIDR",
                              f"spec.networks[{net_index}].pod.vmIPv6NetworkCIDR: {e}", "FieldValueInvalid")
                return
        spec = replace(spec, server_ip=str(gateway.ip), address=str(guest), gateway=str(gateway.ip))
    else:
        spec = replace(spec, server_ip=podnet.fake_bridge_ip(i))
    t.dhcp.append(spec)


def dhcp_options(t: Translation, path: str, given: DHCPOptions | None) -> DhcpOptions:
    """`interfaces[].dhcpOptions` checked the way upstream's DHCP server would use them."""
    if given is None:
        return DhcpOptions()
    base = f"{path}.dhcpOptions"
    ntp: list[str] = []
    for k, server in enumerate(given.ntpServers):
        try:
            ntp.append(str(ipaddress.IPv4Address(server)))
        except ValueError:
            t.unsupported(f"{base}.ntpServers[{k}]", f"{base}.ntpServers[{k}]: could not parse NTP server "
                          f"as IPv4 address: {server}", "FieldValueInvalid")
    private: list[tuple[int, str]] = []
    for k, opt in enumerate(given.privateOptions):
        if not 224 <= opt.option <= 254:
            t.unsupported(f"{base}.privateOptions[{k}].option", f"{base}.privateOptions[{k}].option: "
                          f"DHCP private options must be in the range 224-254", "FieldValueInvalid")
            continue
        private.append((opt.option, opt.value))
    return DhcpOptions(boot_file_name=given.bootFileName, tftp_server_name=given.tftpServerName,
                       ntp_servers=tuple(ntp), private_options=tuple(private))


def _device_info(t: Translation, path: str, pod: _Pod) -> dict[str, DeviceInfo]:
    if pod.network_info_text is None:
        return {}
    try:
        return parse_network_info(pod.network_info_text)
    except NetworkInfoError as e:
        t.unsupported(path, f"{path}: {e}", "FieldValueInvalid")
        return {}


def _sriov_interface(t: Translation, path: str, iface: Interface, net: Network, pod: _Pod,
                     device_info: dict[str, DeviceInfo]) -> None:
    if not podnet.is_secondary_multus(net):
        t.unsupported(f"{path}.sriov", f"{path}.sriov: SR-IOV needs a secondary multus network",
                      "FieldValueInvalid")
        return
    if not pod.present:
        return  # admission: the VF is allocated with the pod
    info = device_info.get(iface.name)
    if info is None or info.type != "pci" or not info.pci_address:
        t.unsupported(path, f"{path}: no PCI address for SR-IOV network '{iface.name}' in the pod's "
                      f"network-info (/etc/podinfo/network-info)", "FieldValueNotFound")
        return
    try:
        device = DeviceConfig(path=pci_sysfs_path(info.pci_address), id=SRIOV_ALIAS_PREFIX + iface.name)
    except VfioError as e:
        t.unsupported(path, f"{path}: network-info of '{iface.name}': {e}", "FieldValueInvalid")
        return
    t.config.devices = [*(t.config.devices or []), device]
    t.host_devices.append(domain_host_device(device))
    t.steps.append(RequireVfioDevice(field=path, sysfs_path=device.path, what=f"SR-IOV VF of interface {iface.name}",
                                     root=t.env.pod.host_root if t.env.pod is not None else ""))


def _plugin_interface(t: Translation, i: int, path: str, iface: Interface, net_index: int, net: Network,
                      pod: _Pod, pairs: int, device_info: dict[str, DeviceInfo]) -> None:
    assert iface.binding is not None
    plugin = iface.binding.name
    if t.options.interface_domain_attachment.get(iface.name) == "tap":
        # managedTap (virt-handler made bridge + tap) or tap: the same virtio-net on the tap; no DHCP.
        _tap_interface(t, i, path, iface, net_index, net, pod, pairs, dhcp=False)
        return
    info = device_info.get(iface.name)
    if pod.present:
        if info is not None and info.type == "vhost-user":
            vhost_user_interface(t, path, iface, info, pairs)
            return
        t.unsupported(f"{path}.binding", f"{path}.binding: network binding plugin '{plugin}' is not "
                      f"supported: it neither attaches a managedTap nor hands over a vhost-user socket "
                      f"through downwardAPI device-info, and libvirt hook sidecars do not run")
        return
    if plugin == VHOSTUSER_BINDING:
        vhost_user_interface(t, path, iface, None, pairs)
        return
    t.warn(f"{path}.binding", f"{path}.binding: the plugin runs only with a managedTap or a vhost-user socket")
