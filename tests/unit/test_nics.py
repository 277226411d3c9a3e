"""Interface hotplug decisions (`manager/nics.py`): what is pending, added and removed, as
virt-launcher decides (kubevirt pkg/virt-launcher/virtwrap/network/nichotplug.go@d923fdb815cd)."""

from __future__ import annotations

import pytest

from ch_launcher.ch.vmconfig import NetConfig, VmConfig
from ch_launcher.convert import podnet
from ch_launcher.convert.plan import Plan
from ch_launcher.kubevirt.domain import DomainInterface
from ch_launcher.kubevirt.vmi import parse_vmi
from ch_launcher.manager import nics
from ch_launcher.manager.settings import CommandFailed
from tests.builders import new_vmi, with_interface, with_masquerade, with_namespace, with_network, with_status, with_uid

BLUE_TAP = podnet.tap_name(podnet.hashed_pod_interface("blue"), parse_vmi(
    {"metadata": {"name": "x"}, "spec": {"networks": [{"name": "blue", "multus": {"networkName": "b"}}]}}
).spec.networks[0])


def vmi(*interfaces: dict, status: list[dict] | None = None):
    secondary = [option for i in interfaces for option in (
        with_interface(i), with_network({"name": i["name"], "multus": {"networkName": i["name"] + "-net"}}))]
    return parse_vmi(new_vmi("x", with_namespace("d"), with_uid("u"), with_masquerade(), *secondary,
                             with_status(interfaces=status or [])))


def plan(*names_taps: tuple[str, str]) -> Plan:
    config = VmConfig(net=[NetConfig(id=n, tap=t, mac="0a:00:00:00:00:01", num_queues=2) for n, t in names_taps])
    return Plan(config=config, interfaces=[DomainInterface(alias=n, mac="0a:00:00:00:00:01", tap=t)
                                           for n, t in names_taps])


def test_an_interface_multus_has_not_attached_is_pending_and_keeps_the_others_indices():
    v = vmi({"name": "blue", "bridge": {}}, {"name": "green", "bridge": {}},
            status=[{"name": "green", "infoSource": "multus-status"}])
    seen = nics.reachable(v, plan(("default", "tap0")))
    assert [(i.name, i.state) for i in seen.spec.domain.devices.interfaces] == [
        ("default", ""), ("blue", "absent"), ("green", "")]
    assert v.spec.domain.devices.interfaces[1].state == ""  # the VMI itself is left alone


def test_an_interface_already_in_the_vm_is_never_pending():
    v = vmi({"name": "blue", "bridge": {}})  # no status: an interface present since boot
    assert nics.reachable(v, plan(("default", "tap0"), ("blue", BLUE_TAP))) is v


def test_a_new_tap_interface_is_attached_and_an_absent_hashed_one_detached():
    live = plan(("default", "tap0"), ("blue", BLUE_TAP))
    wanted = plan(("default", "tap0"), ("green", "tapgreen"))
    v = vmi({"name": "blue", "bridge": {}, "state": "absent"}, {"name": "green", "bridge": {}})
    changes = nics.plan_changes(live, wanted, v, set())
    assert [(c.id, view.alias) for c, view, _ in changes.attach] == [("green", "green")]
    assert changes.detach == ["blue"]
    assert not nics.plan_changes(live, wanted, v, {"blue", "green"})  # both under way already


def test_an_absent_interface_with_an_ordinal_tap_stays():
    live = plan(("default", "tap0"), ("blue", "tap1"))
    v = vmi({"name": "blue", "bridge": {}, "state": "absent"})
    assert nics.plan_changes(live, plan(("default", "tap0")), v, set()).detach == []


def test_a_new_interface_without_a_tap_cannot_be_hot_plugged():
    wanted = Plan(config=VmConfig(net=[NetConfig(id="blue", vhost_user=True, vhost_socket="/s", num_queues=2)]),
                  interfaces=[DomainInterface(alias="blue", mac="0a:00:00:00:00:02")])
    with pytest.raises(CommandFailed, match=r"^spec.domain.devices.interfaces\[1\]: interface 'blue' cannot be"):
        nics.plan_changes(plan(("default", "tap0")), wanted, vmi({"name": "blue", "binding": {"name": "p"}}), set())
