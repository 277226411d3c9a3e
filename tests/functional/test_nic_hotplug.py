"""Interface hotplug stories in a launcher pod, on the simulated and on the real VMM: a bridge
interface on a Multus network added to and removed from a running VM as KubeVirt does it
(kubevirt @d923fdb815cd; `ch_launcher/manager/nics.py`).

Adding: the interface and its network join the VMI spec; until Multus has attached the network
to the pod (`status.interfaces[].infoSource` gains `multus-status`) a Sync leaves it pending;
then virt-handler makes the bridge, the tap (`tap<hash>`, the launcher's user's) and its DHCP
cache in the pod, as at start, and Syncs: the launcher serves DHCP for it and attaches it
(`vm.add-net`, the tap opened by name by the VMM running as uid 107, without any capability).
Removing: the interface becomes `state: absent`; the launcher detaches it (`vm.remove-device`),
and it leaves the Domain once the guest has ejected it (on the real VMM the tiny guest ejects
as a Linux guest does); virt-handler then removes the bridge and tap.
"""

from __future__ import annotations

import copy

import pytest

from tests.builders import with_masquerade, with_status
from tests.functional.harness import Harness, make_vmi
from tests.functional.pod_fixtures import vmm_info
from tests.functional.pod_probes import hashed_pod_interface, udhcpc
from tests.functional.pod_sandbox import PodSandbox

pytestmark = [pytest.mark.root, pytest.mark.timeout(120)]

GUEST_MAC = "52:54:00:12:34:56"
BLUE_MAC = "0a:00:00:00:00:07"  # the pod interface's MAC, which bridge binding gives the guest


def masquerade_vmi() -> dict:
    return make_vmi(with_masquerade(macAddress=GUEST_MAC),
                    with_status(interfaces=[{"name": "default", "podInterfaceName": "eth0", "infoSource": "domain"}]))


def add_blue(vmi: dict, *, binding: dict | None = None) -> dict:
    """The VM controller's live update: interface `blue` on Multus network blue-net (bridge)."""
    vmi = copy.deepcopy(vmi)
    vmi["spec"]["domain"]["devices"]["interfaces"].append({"name": "blue", **(binding or {"bridge": {}})})
    vmi["spec"]["networks"].append({"name": "blue", "multus": {"networkName": "blue-net"}})
    return vmi


def multus_attached(vmi: dict, name: str, pod_interface: str) -> None:
    """virt-controller's status update once Multus has attached the network to the pod."""
    vmi["status"]["interfaces"].append({"name": name, "podInterfaceName": pod_interface,
                                        "infoSource": "multus-status"})


def phase1(pod: PodSandbox, vh: Harness, pod_interface: str, *, ipam: bool = True) -> str:
    """virt-handler's phase 1 for the new network (bridge binding), as at start; the tap's name."""
    tap = "tap" + pod_interface[3:]
    pod.bridge(pod_interface, tap=tap, index=1, mtu=9000, mac=BLUE_MAC, ip="192.168.7.5", prefix=24,
               gateway="192.168.7.1", ipam=ipam)
    pod.vif_cache(vh.layout.private_dir)
    return tap


def nic_ids(vh: Harness) -> list[str]:
    return [n["id"] for n in vmm_info(vh)["config"].get("net") or []]


def domain_nics(domain: dict | None) -> dict[str, dict]:
    return {n["Alias"]["Name"]: n for n in ((domain or {}).get("Spec", {}).get("Devices", {}).get("Interfaces") or [])}


def test_a_bridge_interface_is_added_once_multus_attached_it_and_removed_when_absent(pod, launch, tmp_path):
    pod.masquerade(mtu=1400)
    vh = launch(masquerade_vmi(), env={"FAKE_CH_EJECT_DELAY": "0.3"})
    blue = hashed_pod_interface("blue")

    # the spec has the new interface, the pod does not have its network yet: pending
    vmi = add_blue(vh.vmi)
    vh.run(vh.client.sync(vmi))
    assert nic_ids(vh) == ["default"] and not vh.requests("vm.add-net")
    assert set(domain_nics(vh.run(vh.client.get_domain()))) == {"default"}

    # Multus attached it, virt-handler made the bridge and tap: the next Sync attaches it
    tap = phase1(pod, vh, blue)
    multus_attached(vmi, "blue", blue)
    since = len(vh.recorder.events)
    vh.run(vh.client.sync(vmi))
    event = vh.run(vh.recorder.wait_for(lambda e: "blue" in domain_nics(e.domain), since=since))
    nic = domain_nics(event.domain)["blue"]
    assert (nic["MAC"]["MAC"], nic["Target"]["Device"], nic["MTU"]["Size"]) == (BLUE_MAC, tap, "9000")
    net = next(n for n in vmm_info(vh)["config"]["net"] if n["id"] == "blue")
    assert (net["tap"], net["mac"], net["num_queues"]) == (tap, BLUE_MAC, 2)
    if vh.simulated:
        assert [r["body"] for r in vh.requests("vm.add-net")] == [
            {"id": "blue", "tap": tap, "mac": BLUE_MAC, "num_queues": 2}]
    # the guest gets the pod's address on the new NIC, and still its own on the first one
    lease = udhcpc(pod.guest_port("k6t-" + blue[3:], BLUE_MAC), tmp_path)
    assert lease is not None and (lease["ip"], lease["mtu"]) == ("192.168.7.5", "9000"), vh.log_text()
    lease = udhcpc(pod.guest_port("k6t-eth0", GUEST_MAC, name="eth1"), tmp_path, iface="eth1")
    assert lease is not None and lease["ip"] == "10.0.2.2", vh.log_text()

    vh.run(vh.client.sync(vmi))  # virt-handler's next loop: nothing twice
    assert len(vh.requests("vm.add-net")) == 1

    # removal: absent in the spec; detached, and gone from the Domain once the guest ejected it
    for iface in vmi["spec"]["domain"]["devices"]["interfaces"]:
        if iface["name"] == "blue":
            iface["state"] = "absent"
    since = len(vh.recorder.events)
    vh.run(vh.client.sync(vmi))
    assert len(vh.requests("vm.remove-device")) == 1
    vh.run(vh.client.sync(vmi))  # no second removal
    gone = vh.run(vh.recorder.wait_for(lambda e: "blue" not in domain_nics(e.domain), since=since, timeout=10))
    assert set(domain_nics(gone.domain)) == {"default"} and nic_ids(vh) == ["default"]
    assert len(vh.requests("vm.remove-device")) == 1
    assert vmm_info(vh)["state"] == "Running"
    # virt-handler removes the bridge and the tap; the interface leaves the spec: nothing to do
    pod.ip("link", "del", tap)
    pod.ip("link", "del", "k6t-" + blue[3:])
    vmi["spec"]["domain"]["devices"]["interfaces"] = [i for i in vmi["spec"]["domain"]["devices"]["interfaces"]
                                                      if i["name"] != "blue"]
    vmi["spec"]["networks"] = [n for n in vmi["spec"]["networks"] if n["name"] != "blue"]
    vmi["status"]["interfaces"] = [s for s in vmi["status"]["interfaces"] if s["name"] != "blue"]
    vh.run(vh.client.sync(vmi))
    assert nic_ids(vh) == ["default"] and len(vh.requests("vm.add-net")) == 1


def test_an_absent_interface_the_guest_never_ejects_stays_in_the_domain(pod, launch):
    pod.masquerade(mtu=1400)
    blue = hashed_pod_interface("blue")
    pod.bridge(blue, tap="tap" + blue[3:], index=1, mtu=1500, mac=BLUE_MAC, ipam=False)
    vmi = add_blue(masquerade_vmi())
    multus_attached(vmi, "blue", blue)
    vh = launch(vmi, ignores_ejects=True)  # booted with both
    assert nic_ids(vh) == ["default", "blue"]

    vmi = vh.vmi_copy()
    vmi["spec"]["domain"]["devices"]["interfaces"][1]["state"] = "absent"
    vh.run(vh.client.sync(vmi))
    vh.run(vh.wait_for_ignored_eject())
    vh.run(vh.client.sync(vmi))
    assert "blue" in domain_nics(vh.run(vh.client.get_domain()))  # virt-handler keeps the bridge and tap
    assert len(vh.requests("vm.remove-device")) == 1


def test_an_interface_the_guest_ejects_before_the_detach_call_returns_can_be_plugged_again(pod, launch):
    # The real VMM's vCPU thread writes vm:device-removed as the guest ejects, often before the
    # API thread answers vm.remove-device (FAKE_CH_EJECT_DELAY=0 always does so).
    pod.masquerade(mtu=1400)
    blue = hashed_pod_interface("blue")
    pod.bridge(blue, tap="tap" + blue[3:], index=1, mtu=1500, mac=BLUE_MAC, ipam=False)
    vmi = add_blue(masquerade_vmi())
    multus_attached(vmi, "blue", blue)
    vh = launch(vmi, env={"FAKE_CH_EJECT_DELAY": "0"})  # booted with both
    assert nic_ids(vh) == ["default", "blue"]

    vmi = vh.vmi_copy()
    vmi["spec"]["domain"]["devices"]["interfaces"][1]["state"] = "absent"
    since = len(vh.recorder.events)
    vh.run(vh.client.sync(vmi))
    vh.run(vh.recorder.wait_for(lambda e: "blue" not in domain_nics(e.domain), since=since, timeout=10))
    assert nic_ids(vh) == ["default"]
    # the user plugs it again (its bridge and tap are still there): the next Sync attaches it
    del vmi["spec"]["domain"]["devices"]["interfaces"][1]["state"]
    since = len(vh.recorder.events)
    vh.run(vh.client.sync(vmi))
    vh.run(vh.recorder.wait_for(lambda e: "blue" in domain_nics(e.domain), since=since))
    assert nic_ids(vh) == ["default", "blue"] and len(vh.requests("vm.add-net")) == 1


def test_an_absent_interface_with_an_ordinal_tap_is_not_unplugged(pod, launch):
    # a pod from before the hashed naming scheme: net1 / tap1, which virt-launcher never unplugs
    pod.masquerade(mtu=1400)
    pod.bridge("net1", tap="tap1", index=1, mtu=1500, mac=BLUE_MAC, ipam=False)
    vmi = add_blue(masquerade_vmi())
    multus_attached(vmi, "blue", "net1")
    vh = launch(vmi)
    assert nic_ids(vh) == ["default", "blue"]

    vmi = vh.vmi_copy()
    vmi["spec"]["domain"]["devices"]["interfaces"][1]["state"] = "absent"
    vh.run(vh.client.sync(vmi))
    assert not vh.requests("vm.remove-device")
    assert set(domain_nics(vh.run(vh.client.get_domain()))) == {"default", "blue"}
    assert "is absent but keeps its tap tap1" in vh.log_text()


def test_a_hot_plugged_interface_that_is_not_on_a_tap_is_refused_naming_it(pod, launch):
    pod.masquerade(mtu=1400)
    socket = pod.root / "blue.sock"  # a vhost-user binding plugin hands over a socket, no tap
    info = {"interfaces": [{"network": "blue", "deviceInfo": {
        "type": "vhost-user", "version": "1.1.0", "vhost-user": {"mode": "server", "path": str(socket)}}}]}
    vh = launch(masquerade_vmi(), network_info=info)
    blue = hashed_pod_interface("blue")
    pod.link(blue, mtu=1500, mac=BLUE_MAC)  # Multus attached it
    vmi = add_blue(vh.vmi, binding={"binding": {"name": "vhostuser"}, "macAddress": BLUE_MAC})
    multus_attached(vmi, "blue", blue)
    reply = vh.run(vh.client.sync(vmi, check=False))
    assert not reply.success and reply.message.startswith(
        "spec.domain.devices.interfaces[1]: interface 'blue' cannot be hot-plugged on Cloud Hypervisor"), reply.message
    assert not vh.requests("vm.add-net")
    assert vh.run(vh.client.sync(vh.vmi)).success  # the VMI without it still syncs


def test_a_new_interface_whose_dhcp_cannot_start_fails_the_sync_and_the_others_keep_their_leases(pod, launch, tmp_path):
    pod.masquerade(mtu=1400)
    vh = launch(masquerade_vmi())
    blue = hashed_pod_interface("blue")
    tap = "tap" + blue[3:]
    pod.bridge(blue, tap=tap, index=1, mtu=9000, mac=BLUE_MAC, ip="192.168.7.5", prefix=24, gateway="192.168.7.1")
    vmi = add_blue(vh.vmi)
    multus_attached(vmi, "blue", blue)
    # virt-handler has not written the interface's DHCP cache yet
    reply = vh.run(vh.client.sync(vmi, check=False))
    assert not reply.success and "cannot serve DHCP" in reply.message and f"vif-cache-{blue}.json" in reply.message
    assert nic_ids(vh) == ["default"] and not vh.requests("vm.add-net")
    lease = udhcpc(pod.guest_port("k6t-eth0", GUEST_MAC), tmp_path)  # the VM's NIC is still served
    assert lease is not None and lease["ip"] == "10.0.2.2", vh.log_text()

    pod.vif_cache(vh.layout.private_dir)  # now it has: the next Sync attaches the interface
    vh.run(vh.client.sync(vmi))
    assert nic_ids(vh) == ["default", "blue"]
