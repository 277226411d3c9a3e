"""Every network binding docs/features.md marks Supported boots in a launcher pod: the real launcher
as uid 107 with only NET_BIND_SERVICE, its VMM with no capability, on the taps virt-handler made
in the pod's network namespace (`pod_sandbox.py`). Each story runs on the simulated VMM and on
the real cloud-hypervisor (with the tiny guest as firmware); it checks what the VMM really holds
(vm.info on its socket), that the VM runs, and that the launcher's DHCP server answers a DHCP
client (busybox udhcpc) on the in-pod bridge, as for the guest.
"""

from __future__ import annotations

import pytest

from tests.builders import with_cpu, with_interfaces, with_networks
from tests.functional.harness import Harness, make_vmi
from tests.functional.pod_fixtures import vmm_info
from tests.functional.pod_probes import check_privileges, hashed_pod_interface, udhcpc
from tests.functional.pod_sandbox import POD_MAC, PodSandbox, missing_requirements
from tests.functional.vhost_user_peer import VhostUserPeer

pytestmark = [pytest.mark.root, pytest.mark.timeout(90)]

GUEST_MAC = "52:54:00:12:34:56"


def nic_vmi(interfaces, networks, *, cores: int = 1, **devices) -> dict:
    return make_vmi(with_interfaces(interfaces), with_networks(networks), with_cpu(cores=cores), devices=devices)


def nets(harness: Harness) -> list[dict]:
    """The VMM's NetConfigs: what it was given (vhost-user fields only for vhost-user NICs)."""
    keys = ("id", "tap", "mac", "num_queues", "mtu")
    vhost = ("vhost_user", "vhost_socket", "vhost_mode")
    return [{k: n[k] for k in keys + (vhost if n.get("vhost_user") else ()) if n.get(k) is not None}
            for n in vmm_info(harness)["config"]["net"]]


def domain_nics(harness: Harness) -> list[tuple]:
    domain = harness.run(harness.client.get_domain())
    return [(n["Alias"]["Name"], n["MAC"]["MAC"], (n.get("MTU") or {}).get("Size"))
            for n in domain["Spec"]["Devices"]["Interfaces"]]


def test_masquerade_with_a_mac_and_multi_queue_boots_and_its_guest_gets_a_lease(pod, launch, tmp_path):
    pod.masquerade(mtu=1400, queues=2)

    vh = launch(nic_vmi([{"name": "default", "masquerade": {}, "macAddress": GUEST_MAC}],
                        [{"name": "default", "pod": {}}], cores=2, networkInterfaceMultiqueue=True))

    assert nets(vh) == [{"id": "default", "tap": "tap0", "mac": GUEST_MAC, "num_queues": 4}]
    assert vmm_info(vh)["state"] == "Running"
    assert domain_nics(vh) == [("default", GUEST_MAC, "1400")]
    check_privileges(vh.launcher.pid, launcher=True)
    check_privileges(vh.vmm_pid(), launcher=False)
    lease = udhcpc(pod.guest_port("k6t-eth0", GUEST_MAC), tmp_path)
    assert lease is not None, f"no lease from the launcher's DHCP server\n{vh.log_text()}"
    assert (lease["ip"], lease["router"], lease["mtu"], lease["dns"]) == ("10.0.2.2", "10.0.2.1", "1400", "10.96.0.10")


def test_bridge_on_the_pod_network_keeps_the_pods_mac_and_its_guest_gets_the_pods_address(pod, launch, tmp_path):
    pod.bridge(mtu=1450)

    vh = launch(nic_vmi([{"name": "default", "bridge": {}}], [{"name": "default", "pod": {}}]))

    assert nets(vh) == [{"id": "default", "tap": "tap0", "mac": POD_MAC, "num_queues": 2}]
    assert vmm_info(vh)["state"] == "Running"
    assert domain_nics(vh) == [("default", POD_MAC, "1450")]
    lease = udhcpc(pod.guest_port("k6t-eth0", POD_MAC), tmp_path)
    assert lease is not None, f"no lease from the launcher's DHCP server\n{vh.log_text()}"
    assert (lease["ip"], lease["router"], lease["mtu"], lease["serverid"]) == (
        "10.244.1.5", "10.244.1.1", "1450", "169.254.75.10")


def test_multus_secondary_networks_with_hashed_and_ordinal_names_boot_on_their_taps(pod, launch, tmp_path):
    blue = hashed_pod_interface("blue")  # pod<sha256("blue")[:11]>: the current scheme
    pod.masquerade(mtu=1400)
    pod.bridge(blue, tap="tap" + blue[3:], index=1, mtu=9000, mac="0a:00:00:00:00:07", ip="192.168.7.5",
               gateway="192.168.7.1")
    pod.bridge("net2", tap="tap2", index=2, mtu=1500, mac="0a:00:00:00:00:08", ip="192.168.8.5",
               gateway="192.168.8.1")  # ordinal: a pod from before the hashed scheme

    vh = launch(nic_vmi([{"name": "default", "masquerade": {}, "macAddress": GUEST_MAC},
                         {"name": "blue", "bridge": {}}, {"name": "green", "bridge": {}}],
                        [{"name": "default", "pod": {}}, {"name": "blue", "multus": {"networkName": "blue-net"}},
                         {"name": "green", "multus": {"networkName": "green-net"}}]))

    assert nets(vh) == [{"id": "default", "tap": "tap0", "mac": GUEST_MAC, "num_queues": 2},
                        {"id": "blue", "tap": "tap" + blue[3:], "mac": "0a:00:00:00:00:07", "num_queues": 2},
                        {"id": "green", "tap": "tap2", "mac": "0a:00:00:00:00:08", "num_queues": 2}]
    assert vmm_info(vh)["state"] == "Running"
    assert domain_nics(vh) == [("default", GUEST_MAC, "1400"), ("blue", "0a:00:00:00:00:07", "9000"),
                               ("green", "0a:00:00:00:00:08", "1500")]
    lease = udhcpc(pod.guest_port("k6t-" + blue[3:], "0a:00:00:00:00:07"), tmp_path)
    assert lease is not None, f"no lease on the Multus network\n{vh.log_text()}"
    assert (lease["ip"], lease["mtu"], lease["serverid"]) == ("192.168.7.5", "9000", "169.254.75.11")


def test_a_managed_tap_binding_plugin_boots_on_the_tap_virt_handler_made(pod, launch):
    net = hashed_pod_interface("blue")
    pod.bridge(net, tap="tap" + net[3:], index=0, mtu=1500, mac="0a:00:00:00:00:09", ipam=False)

    vh = launch(nic_vmi([{"name": "blue", "binding": {"name": "managed-tap-plugin"}}],
                        [{"name": "blue", "multus": {"networkName": "blue-net"}}]),
                domain_attachments={"blue": "tap"})

    assert nets(vh) == [{"id": "blue", "tap": "tap" + net[3:], "mac": "0a:00:00:00:00:09", "num_queues": 2}]
    assert vmm_info(vh)["state"] == "Running"
    assert not (vh.layout.private_dir / f"dhcp_started-{net}").exists()  # no DHCP, as upstream


@pytest.mark.parametrize("mode", ["client", "server"])
def test_a_vhost_user_interface_boots_against_a_real_vhost_user_peer(pod, launch, vmm_kind, mode):
    sockets = pod.root / "vhostuser"
    sockets.mkdir()
    path = sockets / "net1.sock"
    info = {"interfaces": [{"network": "net1", "deviceInfo": {
        "type": "vhost-user", "version": "1.1.0", "vhost-user": {"mode": mode, "path": str(path)}}}]}
    # client: the switch made the socket (and gave it to the pod's user); server: the VMM makes it
    peer = VhostUserPeer(path, listen=mode == "client", owner=pod.uid if mode == "client" else None)
    if mode == "server":
        pod.own(sockets)
    try:
        vh = launch(nic_vmi([{"name": "net1", "binding": {"name": "vhostuser"}, "macAddress": GUEST_MAC}],
                            [{"name": "net1", "multus": {"networkName": "vhostuser-network"}}]), network_info=info)

        assert nets(vh) == [{"id": "net1", "mac": GUEST_MAC, "num_queues": 2, "vhost_user": True,
                             "vhost_socket": str(path), "vhost_mode": mode.capitalize()}]
        config = vmm_info(vh)["config"]
        assert config["memory"]["shared"] is True and vmm_info(vh)["state"] == "Running"
        assert domain_nics(vh) == [("net1", GUEST_MAC, None)]
        if vmm_kind == "real":  # the handshake CH needs to create the device
            assert peer.wait_for("GET_QUEUE_NUM")[:5] == [
                "SET_OWNER", "GET_FEATURES", "GET_PROTOCOL_FEATURES", "SET_PROTOCOL_FEATURES", "GET_QUEUE_NUM"]
    finally:
        peer.close()


def test_without_net_bind_service_the_dhcp_server_cannot_bind_and_sync_fails_clearly():
    """What the file capability on the launcher's interpreter is for: a launcher without it (an
    image built without setcap, or a bounding set without NET_BIND_SERVICE) cannot serve DHCP."""
    reason = missing_requirements()
    if reason:
        pytest.skip(reason)
    with PodSandbox(file_capability=False) as pod:
        pod.masquerade(mtu=1400)
        vh = Harness(vmi=nic_vmi([{"name": "default", "masquerade": {}}], [{"name": "default", "pod": {}}]), pod=pod)
        try:
            vh.run(vh.start())
            reply = vh.run(vh.client.sync(vh.vmi, check=False))
            assert not reply.success
            assert reply.message.endswith("spec.domain.devices.interfaces[0]: cannot listen on UDP port 67 for DHCP: "
                                          "Permission denied"), reply.message
            assert vh.launcher.poll() is None  # the launcher stays up for virt-handler's next try
        finally:
            vh.close()
