"""The guest's DHCP server in a real pod network namespace, answered to a real DHCP client.

Each test builds what virt-handler leaves in a virt-launcher pod (the in-pod bridge `k6t-eth0`
with its address, the pod interface, virt-handler's cache file for bridge binding) in one network
namespace, and the guest's NIC in another, joined by a veth pair standing in for the tap. The
translator and `start_dhcp` run in the pod namespace (`dhcp_pod_server.py`); busybox `udhcpc`
runs in the guest namespace with a script that records the options it was given.

Needs root and `ip netns` (CI runs as root); skips with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import threading
import uuid

import pytest

from ch_launcher.dhcp.lease import LEASE_SECONDS
from tests.builders import new_vmi, with_interfaces, with_networks, with_spec, with_uid
from tests.functional import pod_probes
from tests.functional.pod_probes import udhcpc

pytestmark = [pytest.mark.root, pytest.mark.timeout(90)]

HERE = pathlib.Path(__file__).resolve().parent
POD_MAC = "0a:58:0a:f4:01:05"
RESOLV_CONF = ("search default.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\n"
               "nameserver 10.96.0.11\nnameserver fd00::10\noptions ndots:5\n")


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(args, check=check, capture_output=True, text=True, timeout=20)


@pytest.fixture
def netns():
    """Two fresh network namespaces, the pod's and the guest's; deleted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create network namespaces (CI runs as root)")
    for tool in ("ip", "busybox"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (`make test` installs it as root)")
    tag = uuid.uuid4().hex[:6]
    names = (f"kcpod{tag}", f"kcvm{tag}")
    created = []
    try:
        for name in names:
            result = run("ip", "netns", "add", name, check=False)
            if result.returncode != 0:
                pytest.skip(f"cannot create network namespaces here: {result.stderr.strip()}")
            created.append(name)
            run("ip", "-n", name, "link", "set", "lo", "up")
        yield names
    finally:
        for name in created:
            run("ip", "netns", "del", name, check=False)


def guest_nic(pod: str, vm: str, mac: str, tap: str = "tap0", bridge: str = "k6t-eth0", name: str = "eth0"):
    """A veth pair in place of the tap: `tap` enslaved to the bridge, `name` in the guest."""
    run("ip", "-n", pod, "link", "add", tap, "type", "veth", "peer", "name", name, "netns", vm)
    run("ip", "-n", pod, "link", "set", tap, "master", bridge, "up")
    run("ip", "-n", vm, "link", "set", name, "address", mac, "up")


def pod_link(pod: str, name: str, mtu: int, mac: str | None = None):
    """A link of the pod (a veth with a dangling peer: not every kernel has dummy links)."""
    run("ip", "-n", pod, "link", "add", name, "mtu", str(mtu), *(("address", mac) if mac else ()),
        "type", "veth", "peer", "name", f"{name}p", "mtu", str(mtu))
    run("ip", "-n", pod, "link", "set", name, "up")


def masquerade_pod(pod: str, vm: str, mac: str, mtu: int = 1400):
    """What virt-handler builds for masquerade: pod eth0, bridge k6t-eth0 with 10.0.2.1/24."""
    pod_link(pod, "eth0", mtu, POD_MAC)
    run("ip", "-n", pod, "link", "add", "k6t-eth0", "mtu", str(mtu), "type", "bridge")
    run("ip", "-n", pod, "addr", "add", "10.0.2.1/24", "dev", "k6t-eth0")
    run("ip", "-n", pod, "link", "set", "k6t-eth0", "up")
    guest_nic(pod, vm, mac)


class PodServer:
    """dhcp_pod_server.py running in the pod namespace; stopped (or killed) by the fixture."""

    def __init__(self, pod: str, tmp: pathlib.Path, vmi: dict, links: dict, hostname: str = "testvmi"):
        self.private_dir = tmp / "private"
        self.private_dir.mkdir(exist_ok=True)
        (tmp / "resolv.conf").write_text(RESOLV_CONF)
        args = {"vmi": vmi, "links": links, "private_dir": str(self.private_dir),
                "resolv_conf": str(tmp / "resolv.conf"), "hostname": hostname}
        (tmp / "args.json").write_text(json.dumps(args))
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", pod, sys.executable, str(HERE / "dhcp_pod_server.py"), str(tmp / "args.json")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        self.first_line = self._readline(30)

    def _readline(self, timeout: float) -> str:
        out: list[str] = []
        reader = threading.Thread(target=lambda: out.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        if not out:
            self.kill()
            pytest.fail(f"the DHCP server said nothing within {timeout}s: {self.proc.stderr.read()}")
        return out[0].strip()

    def stop(self) -> dict:
        """Close stdin (the server stops) and return what it served."""
        self.proc.stdin.close()
        line = self._readline(15)
        self.proc.wait(10)
        return json.loads(line.split(" ", 1)[1]) if line.startswith("SERVED") else {}

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)


@pytest.fixture
def pod_server(tmp_path):
    servers: list[PodServer] = []

    def start(pod: str, **kw) -> PodServer:
        server = PodServer(pod, tmp_path, **kw)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.kill()


def vmi(interfaces, networks, **spec):
    return new_vmi("testvmi", with_uid("0b4e0c1a-0000-4000-8000-0000000000d1"), with_interfaces(interfaces),
                   with_networks(networks), with_spec(**spec))


def test_masquerade_guest_gets_address_gateway_dns_search_and_mtu(netns, pod_server, tmp_path):
    pod, vm = netns
    mac = "52:54:00:12:34:56"
    masquerade_pod(pod, vm, mac, mtu=1400)
    server = pod_server(pod, vmi=vmi([{"name": "default", "masquerade": {}, "macAddress": mac}],
                                     [{"name": "default", "pod": {}}], subdomain="mysub"),
                        links={"eth0": [1400, POD_MAC], "tap0": [1400, "fe:00:00:00:00:01"]})
    assert server.first_line.startswith("READY"), server.first_line

    lease = udhcpc(vm, tmp_path)

    assert lease is not None, "the guest got no lease"
    assert (lease["ip"], lease["subnet"], lease["router"]) == ("10.0.2.2", "255.255.255.0", "10.0.2.1")
    assert lease["serverid"] == "10.0.2.1"
    assert lease["dns"].split() == ["10.96.0.10", "10.96.0.11"]  # IPv6 name servers cannot go in DHCPv4
    assert lease["search"].split() == ["mysub.default.svc.cluster.local", "default.svc.cluster.local",
                                       "svc.cluster.local", "cluster.local"]
    assert lease["domain"] == "mysub.default.svc.cluster.local"
    assert lease["mtu"] == "1400"
    assert lease["hostname"] == "testvmi"
    assert int(lease["lease"]) == LEASE_SECONDS
    assert (server.private_dir / "dhcp_started-eth0").exists()
    assert server.stop() == {"offer": 1, "ack": 1}


def test_bridge_guest_gets_the_pod_address_and_routes_from_virt_handlers_cache(netns, pod_server, tmp_path):
    pod, vm = netns
    # What virt-handler leaves for bridge binding: a dummy eth0 keeping the pod's MAC and IP,
    # the real pod link renamed eth0-nic and enslaved to k6t-eth0, which has the fake address.
    pod_link(pod, "eth0", 1450, POD_MAC)
    run("ip", "-n", pod, "addr", "add", "10.244.1.5/24", "dev", "eth0")
    run("ip", "-n", pod, "link", "add", "k6t-eth0", "type", "bridge")
    run("ip", "-n", pod, "addr", "add", "169.254.75.10/32", "dev", "k6t-eth0")
    pod_link(pod, "eth0-nic", 1450)
    run("ip", "-n", pod, "link", "set", "eth0-nic", "master", "k6t-eth0", "up")
    run("ip", "-n", pod, "link", "set", "k6t-eth0", "up")
    guest_nic(pod, vm, POD_MAC)
    private = tmp_path / "private"
    private.mkdir()
    (private / "vif-cache-eth0.json").write_text(json.dumps(go_dhcp_config()))

    server = pod_server(pod, vmi=vmi([{"name": "default", "bridge": {}}], [{"name": "default", "pod": {}}]),
                        links={"eth0": [1450, POD_MAC], "tap0": [1450, "fe:00:00:00:00:01"]})
    assert server.first_line.startswith("READY"), server.first_line
    assert json.loads(server.first_line.split(" ", 1)[1])[0]["mac"] == POD_MAC  # the guest keeps the pod's MAC

    lease = udhcpc(vm, tmp_path)

    assert lease is not None, "the guest got no lease"
    assert (lease["ip"], lease["subnet"], lease["router"]) == ("10.244.1.5", "255.255.255.0", "10.244.1.1")
    assert lease["serverid"] == "169.254.75.10"
    assert lease["staticroutes"].split() == ["10.96.0.0/12", "10.244.1.1", "0.0.0.0/0", "10.244.1.1"]
    assert lease["mtu"] == "1450"
    assert lease["dns"].split() == ["10.96.0.10", "10.96.0.11"]


def go_dhcp_config() -> dict:
    """virt-handler's cache for the bridge test's pod (pod_probes.go_dhcp_config)."""
    return pod_probes.go_dhcp_config("eth0", "10.244.1.5", 24, "10.244.1.1", POD_MAC, 1450,
                                      routes=[(None, 0, "10.244.1.1"), ("10.96.0.0", 12, "10.244.1.1")])


def test_only_the_guests_mac_is_answered(netns, pod_server, tmp_path):
    pod, vm = netns
    mac = "52:54:00:12:34:56"
    masquerade_pod(pod, vm, mac)
    guest_nic(pod, vm, "52:54:00:ab:cd:ef", tap="tapx", name="intruder")
    server = pod_server(pod, vmi=vmi([{"name": "default", "masquerade": {}, "macAddress": mac}],
                                     [{"name": "default", "pod": {}}]),
                        links={"eth0": [1400, POD_MAC], "tap0": [1400, "fe:00:00:00:00:01"]})
    assert server.first_line.startswith("READY"), server.first_line

    assert udhcpc(vm, tmp_path, iface="intruder", tries=2) is None
    assert udhcpc(vm, tmp_path) is not None
    assert server.stop() == {"offer": 1, "ack": 1}


def test_dhcp_options_of_the_vmi_reach_the_guest(netns, pod_server, tmp_path):
    pod, vm = netns
    mac = "52:54:00:12:34:56"
    masquerade_pod(pod, vm, mac)
    options = {"bootFileName": "pxelinux.0", "tftpServerName": "tftp.example.com", "ntpServers": ["10.0.0.123"],
               "privateOptions": [{"option": 240, "value": "extra-value"}]}
    server = pod_server(pod, vmi=vmi([{"name": "default", "masquerade": {}, "macAddress": mac,
                                       "dhcpOptions": options}], [{"name": "default", "pod": {}}]),
                        links={"eth0": [1400, POD_MAC], "tap0": [1400, "fe:00:00:00:00:01"]})
    assert server.first_line.startswith("READY"), server.first_line

    lease = udhcpc(vm, tmp_path, "-O", "ntpsrv", "-O", "tftp", "-O", "bootfile", "-O", "240")

    assert lease is not None
    assert lease["ntpsrv"] == "10.0.0.123"
    assert lease["tftp"] == "tftp.example.com"
    assert lease["bootfile"] == "pxelinux.0"
    assert bytes.fromhex(lease["opt240"]) == b"extra-value"


def test_a_missing_bridge_is_a_clear_error_naming_the_interface(netns, pod_server):
    pod, _ = netns
    server = pod_server(pod, vmi=vmi([{"name": "default", "masquerade": {}}], [{"name": "default", "pod": {}}]),
                        links={})
    assert server.first_line.startswith("ERROR")
    assert "spec.domain.devices.interfaces[0]" in server.first_line and "k6t-eth0" in server.first_line
