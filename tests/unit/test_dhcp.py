"""DHCP wire format, what a lease offers, how requests are answered, and start-up errors."""

from __future__ import annotations

import base64
import contextlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ch_launcher.ch.vmconfig import VmConfig
from ch_launcher.convert.context import LauncherEnv
from ch_launcher.convert.plan import DhcpOptions, DhcpSpec, Plan
from ch_launcher.dhcp import DhcpError, answer, start_dhcp
from ch_launcher.dhcp import packet as p
from ch_launcher.dhcp.lease import LEASE_SECONDS, LeaseError, Resolver, build_lease, parse_resolv_conf, parse_vif_cache

MAC = "52:54:00:12:34:56"
MASQ = DhcpSpec(field="spec.domain.devices.interfaces[0]", interface="default", binding="masquerade",
                pod_interface="eth0", bridge="k6t-eth0", mac=MAC, server_ip="10.0.2.1",
                address="10.0.2.2/24", gateway="10.0.2.1")
RESOLVER = Resolver(("10.96.0.10",), ("default.svc.cluster.local", "svc.cluster.local", "cluster.local"))


def request(kind, mac=MAC, options=None):
    opts = {p.MESSAGE_TYPE: bytes((kind,)), **(options or {})}
    return p.Packet(op=p.BOOTREQUEST, xid=0x1234, chaddr=bytes.fromhex(mac.replace(":", "")), options=opts)


# --- wire format --------------------------------------------------------------------------------

def test_a_reply_round_trips_and_is_padded_to_300_bytes():
    packet = p.Packet(op=p.BOOTREPLY, xid=7, chaddr=bytes(6), yiaddr="10.0.2.2",
                      options={p.MESSAGE_TYPE: bytes((p.OFFER,)), p.HOSTNAME: b"vm"})
    raw = p.encode(packet)
    assert len(raw) == 300
    back = p.decode(raw)
    assert (back.op, back.xid, back.yiaddr, back.message_type, back.options[p.HOSTNAME]) == (
        p.BOOTREPLY, 7, "10.0.2.2", p.OFFER, b"vm")


def test_options_longer_than_255_bytes_are_split_and_joined_again():
    value = bytes(range(256)) * 2
    raw = p.encode(p.Packet(op=p.BOOTREPLY, xid=1, chaddr=bytes(6), options={240: value}))
    assert p.decode(raw).options[240] == value


@given(st.binary(max_size=600))
def test_decoding_arbitrary_bytes_raises_only_packet_error(data):
    with contextlib.suppress(p.PacketError):
        p.decode(data)


@given(st.binary(max_size=300))
def test_decoding_garbage_after_a_valid_header_raises_only_packet_error(tail):
    header = p.encode(p.Packet(op=p.BOOTREQUEST, xid=1, chaddr=bytes(6)))[:240]
    with contextlib.suppress(p.PacketError):
        p.decode(header + tail)


def test_classless_routes_put_the_default_route_last():
    # RFC 3442 example encoding; upstream sorts the default route last
    assert p.classless_routes([("0.0.0.0/0", "10.1.2.3"), ("10.0.0.0/8", "10.1.2.3"),
                               ("192.168.1.0/24", "192.168.2.3")]) == bytes(
        [8, 10, 10, 1, 2, 3, 24, 192, 168, 1, 192, 168, 2, 3, 0, 10, 1, 2, 3])


def test_domain_search_uses_rfc1035_labels():
    assert p.domain_search(["example.com"]) == b"\x07example\x03com\x00"


# --- what is offered ----------------------------------------------------------------------------

def test_resolv_conf_gives_ipv4_name_servers_and_lower_case_search_domains():
    r = parse_resolv_conf("search NS.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\n"
                          "nameserver fd00::10\nnameserver bogus\nnameserver 1.2.3.4 extra\n")
    assert r == Resolver(("10.96.0.10",), ("ns.svc.cluster.local", "svc.cluster.local"))


def test_resolv_conf_without_name_servers_or_search_gets_upstreams_defaults():
    assert parse_resolv_conf("options ndots:5\n") == Resolver(("8.8.8.8",), ("cluster.local",))


def test_a_masquerade_lease_carries_what_upstream_sends():
    lease = build_lease(MASQ, "10.0.2.1", RESOLVER, "testvmi", 1400)
    o = lease.options
    assert lease.client_ip == "10.0.2.2"
    assert o[p.SUBNET_MASK] == bytes([255, 255, 255, 0]) and o[p.ROUTER] == bytes([10, 0, 2, 1])
    assert o[p.DNS_SERVERS] == bytes([10, 96, 0, 10]) and o[p.INTERFACE_MTU] == (1400).to_bytes(2, "big")
    assert o[p.HOSTNAME] == b"testvmi" and o[p.DOMAIN_NAME] == b"default.svc.cluster.local"
    assert o[p.LEASE_TIME] == LEASE_SECONDS.to_bytes(4, "big")
    assert p.CLASSLESS_ROUTES not in o


def test_the_subdomain_is_searched_first():
    spec = DhcpSpec(**{**MASQ.__dict__, "subdomain": "mysub"})
    lease = build_lease(spec, "10.0.2.1", RESOLVER, "vm", None)
    assert lease.options[p.DOMAIN_SEARCH].startswith(b"\x05mysub\x07default\x03svc")
    assert lease.options[p.DOMAIN_NAME] == b"mysub.default.svc.cluster.local"
    assert p.INTERFACE_MTU not in lease.options  # unknown MTU: not offered


def test_invalid_or_oversized_search_domains_are_left_out_instead_of_failing():
    resolver = Resolver(("10.96.0.10",), ("Bad_Domain!", *[f"d{i}." + "x" * 60 + ".example" for i in range(6)]))
    lease = build_lease(MASQ, "10.0.2.1", resolver, "vm", None)
    assert len(lease.options[p.DOMAIN_SEARCH]) <= 255
    assert b"Bad" not in lease.options[p.DOMAIN_SEARCH]


def test_kubelets_search_dot_is_no_search_domain_and_no_warning(caplog):
    """A pod without search domains gets `search .` from kubelet (the real node of tests/cluster,
    whose kubelet has no cluster DNS): the root domain, nothing to offer and nothing wrong."""
    resolver = parse_resolv_conf("search .\nnameserver 127.0.0.1\n")
    with caplog.at_level("WARNING"):
        lease = build_lease(MASQ, "10.0.2.1", resolver, "vm", None)
    assert p.DOMAIN_SEARCH not in lease.options and p.DOMAIN_NAME not in lease.options
    assert lease.options[p.DNS_SERVERS] == bytes([127, 0, 0, 1])
    assert caplog.records == []


def test_vmi_dhcp_options_are_offered():
    spec = DhcpSpec(**{**MASQ.__dict__,
                       "options": DhcpOptions("boot.efi", "tftp.example", ("10.0.0.5",), ((250, "v"),))})
    o = build_lease(spec, "10.0.2.1", RESOLVER, "vm", None).options
    assert (o[p.BOOT_FILE_NAME], o[p.TFTP_SERVER_NAME], o[p.NTP_SERVERS], o[250]) == (
        b"boot.efi", b"tftp.example", bytes([10, 0, 0, 5]), b"v")


def go_cache(**over):
    base = {"Name": "eth0", "IP": {"IP": "10.244.1.5", "Mask": base64.b64encode(bytes([255, 255, 255, 0])).decode(),
                                   "Label": ""},
            "MAC": base64.b64encode(bytes.fromhex("0a580af40105")).decode(), "Gateway": "10.244.1.1",
            "Routes": [{"Dst": None, "Gw": "10.244.1.1"},
                       {"Dst": {"IP": "10.96.0.0", "Mask": base64.b64encode(bytes([255, 240, 0, 0])).decode()},
                        "Gw": "10.244.1.1"}], "Mtu": 1450, "IPAMDisabled": False, "Subdomain": ""}
    return json.dumps({**base, **over})


def test_virt_handlers_cache_is_read_with_go_encodings():
    cached = parse_vif_cache(go_cache(), "vif-cache-eth0.json")
    assert str(cached.address) == "10.244.1.5/24" and cached.gateway == "10.244.1.1"
    assert cached.routes == (("0.0.0.0/0", "10.244.1.1"), ("10.96.0.0/12", "10.244.1.1"))
    assert cached.mac == "0a:58:0a:f4:01:05" and not cached.ipam_disabled


@pytest.mark.parametrize("text, words", [
    ("{", "not valid JSON"), ("[]", "JSON object"),
    (go_cache(IP={"IP": "10.0.0.1", "Mask": "!!"}), "vif-cache-eth0.json"),
    (go_cache(IP=None), "no IPv4 address"),
])
def test_a_bad_cache_file_is_a_clear_error(text, words):
    with pytest.raises(LeaseError, match=words):
        parse_vif_cache(text, "vif-cache-eth0.json")


def test_a_cache_without_ipam_needs_no_address():
    assert parse_vif_cache(go_cache(IP={"Label": ""}, IPAMDisabled=True), "x").ipam_disabled


# --- answering ----------------------------------------------------------------------------------

LEASE = build_lease(MASQ, "10.0.2.1", RESOLVER, "vm", 1500)


def test_discover_is_offered_and_request_acknowledged():
    offer = answer(LEASE, request(p.DISCOVER, options={p.PARAMETER_LIST: bytes([p.INTERFACE_MTU, p.ROUTER])}))
    assert offer.message_type == p.OFFER and offer.yiaddr == "10.0.2.2" and offer.xid == 0x1234
    assert list(offer.options)[:5] == [p.MESSAGE_TYPE, p.SERVER_ID, p.LEASE_TIME, p.INTERFACE_MTU, p.ROUTER]
    ack = answer(LEASE,
                 request(p.REQUEST, options={p.REQUESTED_IP: bytes([10, 0, 2, 2]), p.SERVER_ID: bytes([10, 0, 2, 1])}))
    assert ack.message_type == p.ACK and ack.yiaddr == "10.0.2.2"


def test_another_mac_gets_no_answer():
    assert answer(LEASE, request(p.DISCOVER, mac="52:54:00:00:00:01")) is None


def test_a_request_for_another_address_is_refused_so_the_client_starts_over():
    nak = answer(LEASE, request(p.REQUEST, options={p.REQUESTED_IP: bytes([10, 0, 2, 9])}))
    assert nak.message_type == p.NAK and nak.yiaddr == "0.0.0.0" and nak.flags & p.BROADCAST_FLAG


def test_a_request_to_another_server_is_ignored():
    assert answer(LEASE, request(p.REQUEST, options={p.SERVER_ID: bytes([10, 0, 2, 99])})) is None


@pytest.mark.parametrize("kind", [p.DECLINE, p.RELEASE, p.INFORM])
def test_other_messages_are_ignored_as_upstream_does(kind):
    assert answer(LEASE, request(kind)) is None


# --- start-up -----------------------------------------------------------------------------------

def plan(*specs):
    return Plan(config=VmConfig(), dhcp=list(specs))


def test_no_dhcp_entries_start_nothing(tmp_path):
    handle = start_dhcp(plan(), LauncherEnv(private_dir=str(tmp_path)))
    assert not handle.running
    handle.stop()


def test_a_missing_bridge_names_the_interface_field(tmp_path):
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 10.96.0.10\n")
    with pytest.raises(DhcpError, match=r"spec.domain.devices.interfaces\[0\]: bridge k6t-eth0"):
        start_dhcp(plan(MASQ), LauncherEnv(private_dir=str(tmp_path)), resolv_conf=str(resolv))


def test_a_missing_resolv_conf_is_named(tmp_path):
    with pytest.raises(DhcpError, match=r"resolv\.conf"):
        start_dhcp(plan(MASQ), LauncherEnv(private_dir=str(tmp_path)), resolv_conf=str(tmp_path / "resolv.conf"))


def test_a_bridge_binding_without_virt_handlers_cache_names_the_file(tmp_path):
    # `lo` exists everywhere and has an IPv4 address, so the cache is what is missing here
    spec = DhcpSpec(field="spec.domain.devices.interfaces[0]", interface="default", binding="bridge",
                    pod_interface="eth0", bridge="lo", mac=MAC, server_ip="169.254.75.10")
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 10.96.0.10\n")
    with pytest.raises(DhcpError, match=r"vif-cache-eth0\.json"):
        start_dhcp(plan(spec), LauncherEnv(private_dir=str(tmp_path)), resolv_conf=str(resolv))


def test_a_bridge_binding_without_ipam_starts_no_server_and_writes_no_marker(tmp_path):
    spec = DhcpSpec(field="f", interface="default", binding="bridge", pod_interface="eth0", bridge="lo",
                    mac=MAC, server_ip="169.254.75.10")
    (tmp_path / "vif-cache-eth0.json").write_text(go_cache(IP={"Label": ""}, IPAMDisabled=True))
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 10.96.0.10\n")
    handle = start_dhcp(plan(spec), LauncherEnv(private_dir=str(tmp_path)), resolv_conf=str(resolv))
    assert not handle.running and not (tmp_path / "dhcp_started-eth0").exists()
