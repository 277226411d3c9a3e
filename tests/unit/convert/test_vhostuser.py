"""vhost-user-net from a binding plugin's device-info -> NetConfig, shared memory, socket wait."""

from __future__ import annotations

import pytest

from ch_launcher.convert import translate
from ch_launcher.convert.context import LauncherEnv
from ch_launcher.convert.network import configure_network
from ch_launcher.convert.plan import WaitForSocket
from tests.unit.convert.netbuild import fields, multus, pod, translation, vmi

BODY = vmi([{"name": "default", "masquerade": {}},
            {"name": "net1", "binding": {"name": "vhostuser"}, "macAddress": "ca:fe:ca:fe:42:42"}],
           [{"name": "default", "pod": {}}, multus("net1", "vhostuser-network")])
LINKS = {"eth0": (1500, "0a:58:0a:f4:01:05"), "tap0": (1500, "fe:00:00:00:00:01")}


def info(mode="client", path="/var/run/vhostuser/socket07/vhost.sock", **entry):
    return {"interfaces": [{"network": "net1", "deviceInfo": {
        "type": "vhost-user", "version": "1.1.0", "vhost-user": {"mode": mode, "path": path}}, **entry}]}


def run(body, pod_facts=None, **kw):
    t = translation(body, pod_facts, **kw)
    configure_network(t)
    return t


def test_vhostuser_client_mode_connects_to_the_switch_socket_after_waiting_for_it():
    t = run(BODY, pod(LINKS, network_info=info()))
    assert t.problems == []
    assert t.config.net[1].to_api() == {
        "id": "net1", "mac": "ca:fe:ca:fe:42:42", "num_queues": 2, "vhost_user": True,
        "vhost_socket": "/var/run/vhostuser/socket07/vhost.sock", "vhost_mode": "Client"}
    assert t.steps == [WaitForSocket(field="spec.domain.devices.interfaces[1]",
                                     path="/var/run/vhostuser/socket07/vhost.sock",
                                     what="vhost-user socket of interface 'net1' (served by the switch)",
                                     timeout_seconds=30.0)]
    assert t.shared_memory_reasons == ["spec.domain.devices.interfaces[1]: vhost-user interface 'net1'"]
    assert (t.interfaces[1].type, t.interfaces[1].mac) == ("vhostuser", "ca:fe:ca:fe:42:42")
    assert [d.interface for d in t.dhcp] == ["default"]  # no DHCP server for a vhost-user NIC


def test_vhostuser_server_mode_lets_the_vmm_create_the_socket_without_a_wait():
    t = run(BODY, pod(LINKS, network_info=info(mode="server")))
    assert t.config.net[1].vhost_mode == "Server"
    assert t.steps == []


def test_vhostuser_takes_mac_and_mtu_from_device_info_when_the_vmi_has_no_mac():
    body = vmi([{"name": "net1", "binding": {"name": "vhostuser"}}], [multus("net1")])
    t = run(body, pod(LINKS, network_info=info(mac="64:1F:74:32:2E:6D", mtu=9000)))
    assert (t.config.net[0].mac, t.config.net[0].mtu) == ("64:1f:74:32:2e:6d", 9000)


def test_vhostuser_queues_follow_multiqueue():
    body = vmi([{"name": "net1", "binding": {"name": "vhostuser"}}], [multus("net1")],
               devices={"networkInterfaceMultiqueue": True})
    assert run(body, pod(LINKS, network_info=info()), vcpus=4).config.net[0].num_queues == 8


@pytest.mark.parametrize("mode, path, words", [
    ("both", "/x.sock", "expected client or server"),
    ("client", "relative.sock", "absolute path"),
    ("client", "/" + "s" * 120, "longer than 107 bytes"),
])
def test_unusable_vhostuser_device_info_is_refused_with_a_reason(mode, path, words):
    t = run(BODY, pod(LINKS, network_info=info(mode=mode, path=path)))
    assert fields(t.problems) == ["spec.domain.devices.interfaces[1]"]
    assert words in t.problems[0].message
    assert t.shared_memory_reasons == []


def test_vhostuser_binding_at_admission_already_asks_for_shared_memory():
    t = run(BODY)
    assert t.problems == [] and t.warnings == []
    assert t.config.net[1].vhost_user is True
    assert t.shared_memory_reasons


def test_a_translated_vhostuser_vmi_gets_shared_guest_memory():
    plan = translate(BODY, LauncherEnv(pod=pod(LINKS, network_info=info())))
    assert plan.config.memory.shared is True
    assert plan.config.net[1].vhost_socket == "/var/run/vhostuser/socket07/vhost.sock"
    assert any(isinstance(s, WaitForSocket) for s in plan.steps)
