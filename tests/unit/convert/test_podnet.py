"""Names virt-handler gives pod links, checked against upstream's own test vectors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ch_launcher.convert import podnet
from ch_launcher.convert.netinfo import NetworkInfoError, parse_network_info
from ch_launcher.convert.vfio import AddressPool, VfioError, normalise_pci_address, resource_env_var
from ch_launcher.jsonmodel import decode
from ch_launcher.kubevirt.vmi import Network

POD = decode(Network, {"name": "default", "pod": {}})
DEFAULT_MULTUS = decode(Network, {"name": "main", "multus": {"networkName": "a", "default": True}})


def secondary(name):
    return decode(Network, {"name": name, "multus": {"networkName": f"ns/{name}"}})


def test_hashed_names_match_upstream_vectors():
    # pkg/network/namescheme/networknamescheme_test.go and pkg/network/link/discovery_test.go
    assert podnet.hashed_pod_interface("network1") == "poda7662f44d65"
    assert podnet.hashed_pod_interface("network2") == "pod27f4a77f94e"
    assert podnet.hashed_pod_interface("blue") == "pod16477688c0e"


def test_tap_bridge_and_nic_names_match_upstream_vectors():
    # pkg/network/link/names_test.go
    assert podnet.tap_name("net1", secondary("s")) == "tap1"
    assert podnet.tap_name("pod16477688c0e", secondary("s")) == "tap16477688c0e"
    assert podnet.tap_name("eth0", POD) == "tap0"
    assert podnet.bridge_name("pod16477688c0e") == "k6t-16477688c0e"
    assert podnet.bridge_name("eth0") == "k6t-eth0"
    assert podnet.bridged_pod_nic_name("pod16477688c0e") == "16477688c0e-nic"
    assert podnet.bridged_pod_nic_name("net12") == "net12-nic"


def test_ordinal_names_count_only_secondary_multus_networks():
    networks = [POD, DEFAULT_MULTUS, secondary("a"), secondary("b")]
    assert podnet.ordinal_pod_interface("b", networks) == "net2"
    assert podnet.ordinal_pod_interface("default", networks) == ""
    assert podnet.pod_interface_candidates(secondary("a"), networks) == [podnet.hashed_pod_interface("a"), "net1"]
    assert podnet.pod_interface_candidates(DEFAULT_MULTUS, networks) == ["eth0"]
    assert podnet.pod_interface_candidates(POD, networks, "ens3") == ["ens3"]


def test_masquerade_addresses_are_the_first_two_hosts():
    gateway, guest = podnet.masquerade_addresses("10.0.2.0/24")
    assert (str(gateway), str(guest)) == ("10.0.2.1/24", "10.0.2.2/24")
    gateway, guest = podnet.masquerade_addresses("fd10:0:2::/120")
    assert (str(gateway), str(guest)) == ("fd10:0:2::1/120", "fd10:0:2::2/120")
    with pytest.raises(ValueError, match="less than 4"):
        podnet.masquerade_addresses("10.0.0.0/31")


@given(st.text(max_size=40), st.text(min_size=1, max_size=40))
def test_derived_macs_are_always_unicast_locally_administered(uid, name):
    mac = podnet.derived_mac(uid, name)
    assert podnet.normalise_mac(mac) == mac
    assert int(mac[:2], 16) & 0x03 == 0x02
    assert mac != podnet.MASQUERADE_BRIDGE_MAC


def test_network_info_maps_networks_to_pci_and_vhost_user_devices():
    parsed = parse_network_info('{"interfaces": [{"network": "a", "deviceInfo": {"type": "pci", '
                                '"pci": {"pci-address": "0000:65:00.2"}}, "mtu": 9000}, {"network": "b"}, '
                                '{"network": "c", "deviceInfo": {"type": "vhost-user", '
                                '"vhost-user": {"mode": "server", "path": "/s"}}}]}')
    assert (parsed["a"].pci_address, parsed["a"].mtu) == ("0000:65:00.2", 9000)
    assert "b" not in parsed
    assert (parsed["c"].vhost_user_mode, parsed["c"].vhost_user_path) == ("server", "/s")
    assert parse_network_info("") == {}


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
                    max_leaves=10))
def test_network_info_never_raises_anything_but_its_own_error(value):
    import json
    try:
        parse_network_info(json.dumps({"interfaces": [value]}))
        parse_network_info(json.dumps(value))
    except NetworkInfoError:
        pass


def test_resource_env_var_follows_upstream():
    assert resource_env_var("PCI_RESOURCE", "nvidia.com/GP102GL_Tesla_P40") \
        == "PCI_RESOURCE_NVIDIA_COM_GP102GL_TESLA_P40"


def test_an_address_taken_by_one_resource_is_gone_from_the_others():
    env = {"PCI_RESOURCE_A": "0000:01:00.1,0000:01:00.2", "PCI_RESOURCE_B": "0000:01:00.1"}
    pool = AddressPool(env, "PCI_RESOURCE", ["a", "b"], normalise_pci_address)
    assert pool.pop("a") == "0000:01:00.1"
    with pytest.raises(VfioError, match="no more devices"):
        pool.pop("b")
