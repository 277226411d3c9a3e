"""Pod network, Multus and SR-IOV interfaces -> NetConfig, VFIO devices and DHCP specs."""

from __future__ import annotations

import re

import pytest

from ch_launcher.ch.vmconfig import DiskConfig
from ch_launcher.convert import check, podnet
from ch_launcher.convert.network import configure_network
from ch_launcher.convert.plan import DhcpOptions
from tests.unit.convert.netbuild import UID, fields, multus, pod, translation, vmi

POD_MAC = "0a:58:0a:f4:01:05"
POD = {"eth0": (1450, POD_MAC), "tap0": (1450, "fe:00:00:00:00:01"), "k6t-eth0": (1450, "02:00:00:00:00:00")}


def run(body, pod_facts=None, **kw):
    t = translation(body, pod_facts, **kw)
    configure_network(t)
    return t


def test_masquerade_on_the_pod_network_uses_tap0_and_leaves_its_mtu_to_the_tap():
    t = run(vmi(), pod(POD))
    assert t.problems == []
    # no "mtu": CH v53 would set it on the tap, which needs CAP_NET_ADMIN the pod does not have;
    # it reads the tap's MTU itself and offers it to the guest
    assert [n.to_api() for n in t.config.net] == [
        {"id": "default", "tap": "tap0", "mac": POD_MAC, "num_queues": 2}]
    assert t.interfaces[0].mtu == 1450  # the Domain (and DHCP option 26) still say the pod's MTU
    assert t.interfaces[0].alias == "default" and t.interfaces[0].mac == POD_MAC
    assert t.interfaces[0].tap == "tap0" and t.interfaces[0].type == "ethernet"


def test_mac_address_from_the_vmi_wins_over_the_pod_link_and_is_normalised():
    t = run(vmi([{"name": "default", "masquerade": {}, "macAddress": "DE-AD-00-00-BE-AF"}]), pod(POD))
    assert t.config.net[0].mac == "de:ad:00:00:be:af"
    assert t.dhcp[0].mac == "de:ad:00:00:be:af"


def test_without_pod_facts_the_mac_is_derived_stable_and_locally_administered():
    first = run(vmi([{"name": "a", "bridge": {}}, {"name": "b", "bridge": {}}],
                    [{"name": "a", "pod": {}}, multus("b")]))
    again = run(vmi([{"name": "a", "bridge": {}}, {"name": "b", "bridge": {}}],
                    [{"name": "a", "pod": {}}, multus("b")]))
    macs = [n.mac for n in first.config.net]
    assert macs == [n.mac for n in again.config.net]
    assert macs[0] != macs[1]
    for mac in macs:
        assert re.fullmatch(r"([0-9a-f]{2}:){5}[0-9a-f]{2}", mac)
        first_octet = int(mac[:2], 16)
        assert first_octet & 0x02 and not first_octet & 0x01  # locally administered, unicast
    assert macs[0] == podnet.derived_mac(UID, "a")
    assert all(i.mac for i in first.interfaces)  # virt-handler dereferences the MAC


@pytest.mark.parametrize("mac", ["de:ad:be:ef", "zz:00:00:00:00:00", "de:ad:00-00:be:af", "de:ad:00:00:be:af:01:02"])
def test_malformed_mac_address_is_refused_with_its_path(mac):
    t = run(vmi([{"name": "default", "masquerade": {}, "macAddress": mac}]))
    assert fields(t.problems) == ["spec.domain.devices.interfaces[0].macAddress"]
    assert t.problems[0].reason == "FieldValueInvalid"
    assert "spec.domain.devices.interfaces[0].macAddress" in t.problems[0].message
    assert t.config.net is None


def test_masquerade_refuses_the_mac_reserved_for_the_in_pod_bridge():
    t = run(vmi([{"name": "default", "masquerade": {}, "macAddress": "02:00:00:00:00:00"}]))
    assert fields(t.problems) == ["spec.domain.devices.interfaces[0].macAddress"]


def test_masquerade_on_a_multus_network_is_refused_like_kubevirt_does():
    t = run(vmi([{"name": "m", "masquerade": {}}], [multus("m")]))
    assert fields(t.problems) == ["spec.domain.devices.interfaces[0].name"]
    assert "pod network" in t.problems[0].message


def test_multus_bridge_networks_get_hashed_taps_in_interface_order():
    t = run(vmi([{"name": "default", "masquerade": {}}, {"name": "network1", "bridge": {}},
                 {"name": "network2", "bridge": {}}],
                [{"name": "default", "pod": {}}, multus("network1"), multus("network2")]))
    assert t.problems == []
    assert [(n.id, n.tap) for n in t.config.net] == [
        ("default", "tap0"), ("network1", "tapa7662f44d65"), ("network2", "tap27f4a77f94e")]
    assert [(d.pod_interface, d.bridge) for d in t.dhcp] == [
        ("eth0", "k6t-eth0"), ("poda7662f44d65", "k6t-a7662f44d65"), ("pod27f4a77f94e", "k6t-27f4a77f94e")]


def test_a_pod_with_ordinal_interface_names_gets_ordinal_taps():
    links = {"eth0": (1500, POD_MAC), "net1": (9000, "0a:00:00:00:00:01"), "tap1": (9000, "fe:00:00:00:00:02"),
             "k6t-net1": (9000, "0a:00:00:00:00:01")}
    t = run(vmi([{"name": "blue", "bridge": {}}], [multus("blue")]), pod(links))
    assert t.problems == []
    assert (t.config.net[0].tap, t.config.net[0].mtu, t.interfaces[0].mtu) == ("tap1", None, 9000)
    assert (t.dhcp[0].pod_interface, t.dhcp[0].bridge) == ("net1", "k6t-net1")
    assert t.config.net[0].mac == "0a:00:00:00:00:01"


def test_the_multus_default_network_lives_on_eth0_and_tap0():
    t = run(vmi([{"name": "main", "bridge": {}}], [multus("main", default=True)]), pod(POD))
    assert t.problems == []
    assert t.config.net[0].tap == "tap0" and t.dhcp[0].pod_interface == "eth0"


def test_a_tap_missing_from_the_pod_is_a_clear_error():
    t = run(vmi(), pod({"eth0": (1500, POD_MAC)}))
    assert fields(t.problems) == ["spec.domain.devices.interfaces[0]"]
    assert "tap device tap0 is not in the pod" in t.problems[0].message
    assert t.config.net is None


def test_a_pod_interface_missing_from_the_pod_names_both_candidates():
    t = run(vmi([{"name": "blue", "bridge": {}}], [multus("blue")]), pod(POD))
    assert fields(t.problems) == ["spec.domain.devices.interfaces[0]"]
    assert "pod16477688c0e or net1" in t.problems[0].message


def test_multiqueue_gives_one_queue_pair_per_vcpu():
    body = vmi(devices={"networkInterfaceMultiqueue": True})
    t = run(body, pod(POD), vcpus=4)
    assert t.config.net[0].num_queues == 8
    assert t.interfaces[0].queues == 4


def test_multiqueue_is_capped_at_256_pairs():
    t = run(vmi(devices={"networkInterfaceMultiqueue": True}), vcpus=300)
    assert t.config.net[0].num_queues == 512


def test_without_multiqueue_a_nic_has_one_queue_pair_whatever_the_vcpus():
    t = run(vmi(), pod(POD), vcpus=8)
    assert t.config.net[0].num_queues == 2 and t.interfaces[0].queues is None


def test_multiqueue_falls_back_to_the_cpu_topology_when_compute_set_nothing():
    assert run(vmi(devices={"networkInterfaceMultiqueue": True})).config.net[0].num_queues == 2
    body = vmi(devices={"networkInterfaceMultiqueue": True})
    body["spec"]["domain"]["cpu"] = {"sockets": 2, "cores": 2, "threads": 1}
    assert run(body).config.net[0].num_queues == 8


@pytest.mark.parametrize("model", ["e1000", "e1000e", "rtl8139", "igb"])
def test_nic_models_other_than_virtio_are_refused(model):
    t = run(vmi([{"name": "default", "masquerade": {}, "model": model}]))
    assert fields(t.problems) == ["spec.domain.devices.interfaces[0].model"]
    assert model in t.problems[0].message


def test_model_virtio_is_accepted():
    assert run(vmi([{"name": "default", "masquerade": {}, "model": "virtio"}])).problems == []


def test_link_state_down_is_refused_and_absent_interfaces_are_left_out():
    t = run(vmi([{"name": "default", "masquerade": {}, "state": "down"},
                 {"name": "gone", "bridge": {}, "state": "absent"}],
                [{"name": "default", "pod": {}}, multus("gone")]))
    assert fields(t.problems) == ["spec.domain.devices.interfaces[0].state"]
    assert t.config.net is None and t.dhcp == []


def test_an_interface_without_a_network_is_refused():
    t = run(vmi([{"name": "nowhere", "bridge": {}}], []))
    assert fields(t.problems) == ["spec.domain.devices.interfaces[0].name"]
    assert t.problems[0].reason == "FieldValueNotFound"


def test_a_network_that_is_both_pod_and_multus_is_refused():
    t = run(vmi([{"name": "default", "bridge": {}}], [{"name": "default", "pod": {}, "multus": {"networkName": "n"}}]))
    assert fields(t.problems) == ["spec.networks[0]"]
    assert t.config.net is None


@pytest.mark.parametrize("bindings", [{}, {"masquerade": {}, "bridge": {}}, {"bridge": {}, "binding": {"name": "p"}}])
def test_an_interface_without_exactly_one_binding_is_refused(bindings):
    t = run(vmi([{"name": "default", **bindings}]))
    assert fields(t.problems) == ["spec.domain.devices.interfaces[0]"]
    assert "exactly one binding" in t.problems[0].message
    assert t.problems[0].reason == "FieldValueInvalid"


@pytest.mark.parametrize("binding", ["slirp", "macvtap", "passt", "passtBinding"])
def test_bindings_cloud_hypervisor_cannot_serve_are_refused_with_their_path(binding):
    t = run(vmi([{"name": "default", binding: {}}]))
    assert fields(t.problems) == [f"spec.domain.devices.interfaces[0].{binding}"]
    assert t.problems[0].message.startswith(f"spec.domain.devices.interfaces[0].{binding}")


def test_pci_address_acpi_index_and_tag_are_warnings_not_denials():
    t = run(vmi([{"name": "default", "masquerade": {}, "pciAddress": "0000:81:01.0", "acpiIndex": 3,
                  "tag": "frontend"}]))
    assert t.problems == []
    assert fields(t.warnings) == ["spec.domain.devices.interfaces[0].pciAddress",
                                  "spec.domain.devices.interfaces[0].acpiIndex",
                                  "spec.domain.devices.interfaces[0].tag"]


def test_network_boot_order_is_refused():
    t = run(vmi([{"name": "default", "masquerade": {}, "bootOrder": 1}]))
    assert fields(t.problems) == ["spec.domain.devices.interfaces[0].bootOrder"]


def test_an_interface_named_like_a_disk_is_refused_because_device_ids_must_be_unique():
    t = translation(vmi())
    t.config.disks = [DiskConfig(id="default", path="/x.img")]
    configure_network(t)
    assert fields(t.problems) == ["spec.domain.devices.interfaces[0].name"]


def test_an_interface_name_cloud_hypervisor_reserves_is_refused():
    t = run(vmi([{"name": "_net0", "masquerade": {}}], [{"name": "_net0", "pod": {}}]))
    assert fields(t.problems) == ["spec.domain.devices.interfaces[0].name"]


def test_a_network_that_is_neither_pod_nor_multus_is_refused():
    t = run(vmi([{"name": "x", "bridge": {}}], [{"name": "x"}]))
    assert fields(t.problems) == ["spec.networks[0]"]


def test_dhcp_for_masquerade_uses_the_vm_network_cidr():
    default = run(vmi()).dhcp[0]
    assert (default.binding, default.address, default.gateway, default.server_ip) == (
        "masquerade", "10.0.2.2/24", "10.0.2.1", "10.0.2.1")
    custom = run(vmi(networks=[{"name": "default", "pod": {"vmNetworkCIDR": "10.11.12.0/28"}}])).dhcp[0]
    assert (custom.address, custom.gateway) == ("10.11.12.2/28", "10.11.12.1")


@pytest.mark.parametrize("cidr", ["10.0.2.0/31", "not-a-cidr", "fd10::/64"])
def test_an_unusable_vm_network_cidr_is_refused(cidr):
    t = run(vmi(networks=[{"name": "default", "pod": {"vmNetworkCIDR": cidr}}]))
    assert fields(t.problems) == ["spec.networks[0].pod.vmNetworkCIDR"]
    assert t.dhcp == []


def test_dhcp_for_bridge_advertises_the_fake_bridge_address_of_its_index():
    t = run(vmi([{"name": "default", "masquerade": {}}, {"name": "blue", "bridge": {}}],
                [{"name": "default", "pod": {}}, multus("blue")], subdomain="sub"))
    bridge = t.dhcp[1]
    assert (bridge.binding, bridge.server_ip, bridge.address, bridge.subdomain) \
        == ("bridge", "169.254.75.11", "", "sub")


def test_dhcp_options_are_carried_and_checked():
    ok = run(vmi([{"name": "default", "masquerade": {}, "dhcpOptions": {
        "bootFileName": "pxelinux.0", "tftpServerName": "tftp.example", "ntpServers": ["10.0.0.5"],
        "privateOptions": [{"option": 240, "value": "extra"}]}}]))
    assert ok.problems == []
    assert ok.dhcp[0].options == DhcpOptions("pxelinux.0", "tftp.example", ("10.0.0.5",), ((240, "extra"),))
    bad = run(vmi([{"name": "default", "masquerade": {}, "dhcpOptions": {
        "ntpServers": ["ntp.example"], "privateOptions": [{"option": 12, "value": "x"}]}}]))
    assert fields(bad.problems) == ["spec.domain.devices.interfaces[0].dhcpOptions.ntpServers[0]",
                                    "spec.domain.devices.interfaces[0].dhcpOptions.privateOptions[0].option"]


@pytest.mark.parametrize("options, path", [
    ({"ntpServers": 5}, "dhcpOptions.ntpServers"),
    ({"ntpServers": [None]}, "dhcpOptions.ntpServers[0]"),
    ({"privateOptions": [{"option": "x", "value": "v"}]}, "dhcpOptions.privateOptions[0].option"),
    ({"privateOptions": True}, "dhcpOptions.privateOptions"),
    ({"bootFileName": ["a"]}, "dhcpOptions.bootFileName"),
])
def test_dhcp_options_of_the_wrong_shape_are_invalid_at_their_path(options, path):
    verdict = check(vmi([{"name": "default", "masquerade": {}, "dhcpOptions": options}]))
    assert fields(verdict.problems) == [f"spec.domain.devices.interfaces[0].{path}"]
    assert verdict.problems[0].reason == "FieldValueInvalid"


def test_a_pod_mtu_below_1280_runs_since_cloud_hypervisor_is_not_given_it():
    # CH refuses NetConfig.mtu < 1280, but no mtu is sent for a tap: the guest gets the tap's
    # MTU through VIRTIO_NET_F_MTU (Linux accepts down to 68) and DHCP, as with QEMU
    t = run(vmi(), pod({"eth0": (1200, POD_MAC), "tap0": (1200, "fe:00:00:00:00:01")}))
    assert t.problems == []
    assert (t.config.net[0].mtu, t.interfaces[0].mtu) == (None, 1200)


# --- SR-IOV -----------------------------------------------------------------------------------

SRIOV = vmi([{"name": "default", "masquerade": {}}, {"name": "sriov-net", "sriov": {}}],
            [{"name": "default", "pod": {}}, multus("sriov-net", "sriov/sriov-network")])


def test_sriov_at_admission_adds_no_device_and_no_nic():
    t = run(SRIOV)
    assert t.problems == [] and t.config.devices is None
    assert [n.id for n in t.config.net] == ["default"]
    assert [i.alias for i in t.interfaces] == ["default"]


def test_sriov_in_the_pod_uses_the_pci_address_from_network_info():
    info = {"interfaces": [{"network": "sriov-net", "deviceInfo": {
        "type": "pci", "version": "1.1.0", "pci": {"pci-address": "0000:65:00.2"}}}]}
    t = run(SRIOV, pod(POD, network_info=info))
    assert t.problems == []
    assert [d.to_api() for d in t.config.devices] == [{"path": "/sys/bus/pci/devices/0000:65:00.2/",
                                                      "id": "sriov-sriov-net"}]


def test_sriov_without_network_info_says_which_file_lacks_the_address():
    t = run(SRIOV, pod(POD))
    assert fields(t.problems) == ["spec.domain.devices.interfaces[1]"]
    assert "/etc/podinfo/network-info" in t.problems[0].message and "sriov-net" in t.problems[0].message


@pytest.mark.parametrize("text, words", [("{not json", "not valid JSON"), ('{"interfaces": 3}', "'interfaces' list")])
def test_malformed_network_info_is_a_clear_error(text, words):
    t = run(SRIOV, pod(POD, network_info=text))
    assert words in t.problems[0].message


def test_malformed_pci_address_in_network_info_is_refused():
    info = {"interfaces": [{"network": "sriov-net", "deviceInfo": {"type": "pci", "pci": {"pci-address": "65:00.2"}}}]}
    t = run(SRIOV, pod(POD, network_info=info))
    assert "dddd:bb:dd.f" in t.problems[0].message


def test_sriov_on_the_pod_network_is_refused():
    t = run(vmi([{"name": "default", "sriov": {}}]))
    assert fields(t.problems) == ["spec.domain.devices.interfaces[0].sriov"]


# --- binding plugins --------------------------------------------------------------------------

def test_a_managed_tap_plugin_gets_its_tap_without_dhcp():
    body = vmi([{"name": "blue", "binding": {"name": "mytap"}}], [multus("blue")])
    links = {"pod16477688c0e": (1500, "0a:00:00:00:00:09"), "tap16477688c0e": (1500, "fe:00:00:00:00:03")}
    t = run(body, pod(links), attachments={"blue": "tap"})
    assert t.problems == []
    assert (t.config.net[0].tap, t.config.net[0].mac) == ("tap16477688c0e", "0a:00:00:00:00:09")
    assert t.dhcp == []


def test_a_tap_plugin_whose_tap_is_absent_is_refused():
    body = vmi([{"name": "blue", "binding": {"name": "macvtap"}}], [multus("blue")])
    t = run(body, pod({"pod16477688c0e": (1500, "0a:00:00:00:00:09")}), attachments={"blue": "tap"})
    assert "managedTap" in t.problems[0].message


def test_an_unknown_plugin_is_a_warning_at_admission_and_refused_in_the_pod():
    body = vmi([{"name": "blue", "binding": {"name": "sidecarish"}}], [multus("blue")])
    admission = run(body)
    assert admission.problems == [] and fields(admission.warnings) == ["spec.domain.devices.interfaces[0].binding"]
    launcher = run(body, pod(POD))
    assert fields(launcher.problems) == ["spec.domain.devices.interfaces[0].binding"]
    assert "sidecarish" in launcher.problems[0].message


def test_every_network_warning_fits_in_a_kubectl_line():
    t = run(vmi([{"name": "default", "masquerade": {}, "pciAddress": "0000:81:01.0", "acpiIndex": 3, "tag": "x"},
                 {"name": "blue-network-with-a-long-name", "binding": {"name": "a-long-plugin-name"}}],
                [{"name": "default", "pod": {}}, multus("blue-network-with-a-long-name")]))
    assert len(t.warnings) == 4
    assert all(len(w.message) <= 120 for w in t.warnings), [w.message for w in t.warnings]
