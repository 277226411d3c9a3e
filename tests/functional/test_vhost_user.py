"""A VMI with a vhost-user interface through the real launcher and the simulated VMM.

The switch is stood in for by a listening unix socket at the path the pod's network-info file
names (as the userspace CNI's device-info would). The test plays virt-handler (Sync) and reads
what the VMM was asked to create (FAKE_CH_REQUEST_LOG).
"""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from tests.builders import with_interface, with_network
from tests.functional.harness import Harness, make_vmi

IFACE = {"name": "net1", "binding": {"name": "vhostuser"}, "macAddress": "ca:fe:ca:fe:42:42"}
NETWORK = {"name": "net1", "multus": {"networkName": "vhostuser-network"}}


def vhost_vmi(**extra):
    return make_vmi(with_interface(IFACE), with_network(NETWORK), **extra)


def network_info(path, mode="client"):
    return json.dumps({"interfaces": [{"network": "net1", "deviceInfo": {
        "type": "vhost-user", "version": "1.1.0", "vhost-user": {"mode": mode, "path": str(path)}}}]})


class Switch:
    """A listening unix socket standing in for the switch's vhost-user port."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)

    def listen(self):
        self.sock.bind(str(self.path))
        self.sock.listen(1)
        return self

    def close(self):
        self.sock.close()


@pytest.fixture
def harness_with_switch():
    made: list[tuple[Harness, Switch]] = []

    def make(*, listen_after: float | None = 0.0):
        harness = Harness(vmi=vhost_vmi())
        sock_dir = harness.root / "vhostuser"
        sock_dir.mkdir()
        switch = Switch(sock_dir / "vhost.sock")
        info = harness.root / "network-info"
        info.write_text(network_info(switch.path))
        harness.env["CH_NETWORK_INFO"] = str(info)
        made.append((harness, switch))
        if listen_after == 0.0:
            switch.listen()
        elif listen_after is not None:
            threading.Timer(listen_after, switch.listen).start()
        return harness, switch

    yield make
    for harness, switch in made:
        switch.close()
        harness.close()


def created_config(harness):
    creates = harness.requests("vm.create")
    assert creates, f"the VMM was never asked to create a VM\n{harness.log_text()}"
    return creates[-1]["body"]


def test_a_vhost_user_interface_reaches_the_vmm_with_its_socket_and_shared_memory(harness_with_switch):
    harness, switch = harness_with_switch()

    harness.run(harness.boot())

    config = created_config(harness)
    assert config["net"] == [{"id": "net1", "mac": "ca:fe:ca:fe:42:42", "num_queues": 2, "vhost_user": True,
                              "vhost_socket": str(switch.path), "vhost_mode": "Client"}]
    assert config["memory"]["shared"] is True


def test_boot_waits_for_a_switch_socket_that_appears_late(harness_with_switch):
    harness, switch = harness_with_switch(listen_after=1.5)
    started = time.monotonic()

    harness.run(harness.boot())

    assert time.monotonic() - started >= 1.5
    assert created_config(harness)["net"][0]["vhost_socket"] == str(switch.path)


def test_the_domain_shows_the_vhost_user_nic_with_its_mac(harness_with_switch):
    harness, _ = harness_with_switch()
    harness.run(harness.boot())

    domain = harness.run(harness.client.get_domain())

    nics = domain["Spec"]["Devices"]["Interfaces"]  # api.Domain JSON: Go field names
    assert [(n["Alias"]["Name"], n["MAC"]["MAC"], n["Type"]) for n in nics] == [
        ("net1", "ca:fe:ca:fe:42:42", "vhostuser")]
