"""Taps as the VMM opens them in a launcher pod: uid 107, no capability, the tap virt-handler
made. The real cloud-hypervisor and the simulated VMM are given the same configs and must
answer alike (the simulation opens the tap for real, `tests/fakes/fakech_tap.py`).

What the real v53 binary does here (`net_util/src/open_tap.rs@v53.0`): `mtu` in a NetConfig is
always set with SIOCSIFMTU, which needs CAP_NET_ADMIN even when the value is the tap's own, so
vm.boot fails; without `mtu` the VM boots on the tap and vm.info shows the tap's MAC as
`host_mac`. A tap that is down, missing, or of the wrong queue kind fails as shown below.
"""

from __future__ import annotations

import json

import pytest

from tests.functional.pod_fixtures import PodVmm, vm_config
from tests.functional.pod_probes import check_privileges, vm_info
from tests.functional.pod_sandbox import PodSandbox

pytestmark = [pytest.mark.root, pytest.mark.timeout(60)]

GUEST_MAC = "52:54:00:12:34:56"


def config(pod: PodSandbox, **net) -> dict:
    return vm_config(net=[{"id": "default", "mac": GUEST_MAC, "num_queues": 2, **net}])


def boot(vmm: PodVmm, cfg: dict):
    status, body = vmm.call("PUT", "vm.create", cfg)
    assert status == 204, body
    return vmm.call("PUT", "vm.boot")


def failure(*chain: str) -> tuple[int, list[str]]:
    return 500, ["Error from API", "The VM could not boot", "Error from device manager",
                 "Cannot create virtio-net device", "Failed to open taps", *chain]


def test_the_vmm_runs_with_no_capability(pod, vmm):
    check_privileges(vmm.proc.pid, launcher=False)


def test_an_mtu_equal_to_the_taps_own_fails_boot_without_cap_net_admin(pod, vmm):
    pod.masquerade(mtu=1400)

    assert boot(vmm, config(pod, tap="tap0", mtu=1400)) == failure(
        "Setting MTU failed", "Ioctl failed (35106)", "Operation not permitted (os error 1)")
    assert json.loads(pod.ip("-j", "link", "show", "tap0"))[0]["mtu"] == 1400


def test_without_mtu_the_vm_boots_on_the_tap_and_keeps_its_mtu_and_mac(pod, vmm):
    pod.masquerade(mtu=1400)
    tap_mac = json.loads(pod.ip("-j", "link", "show", "tap0"))[0]["address"]

    assert boot(vmm, config(pod, tap="tap0")) == (204, None)

    info = vm_info(vmm.socket)
    assert info["state"] == "Running"
    net = info["config"]["net"][0]
    assert (net["tap"], net["mac"], net["host_mac"], "mtu" in net) == ("tap0", GUEST_MAC, tap_mac, False)
    assert json.loads(pod.ip("-j", "link", "show", "tap0"))[0]["mtu"] == 1400


def test_a_multi_queue_tap_opens_with_one_queue_pair_per_vcpu(pod, vmm):
    pod.masquerade(mtu=1400, queues=2)

    assert boot(vmm, config(pod, tap="tap0", num_queues=4)) == (204, None)
    assert vm_info(vmm.socket)["config"]["net"][0]["num_queues"] == 4


def test_a_multi_queue_tap_given_one_queue_pair_is_refused(pod, vmm):
    pod.masquerade(mtu=1400, queues=2)

    assert boot(vmm, config(pod, tap="tap0")) == failure(
        "Error related to the multiqueue support (no support device side)")


def test_a_single_queue_tap_given_two_queue_pairs_is_refused(pod, vmm):
    pod.masquerade(mtu=1400)

    assert boot(vmm, config(pod, tap="tap0", num_queues=4)) == failure(
        "Error related to the multiqueue support (no support TAP side)")


def test_a_tap_left_down_cannot_be_brought_up_without_cap_net_admin(pod, vmm):
    pod.masquerade(mtu=1400)
    pod.ip("link", "set", "tap0", "down")

    assert boot(vmm, config(pod, tap="tap0")) == failure(
        "Enabling tap interface failed", "Ioctl failed (35092)", "Operation not permitted (os error 1)")


def test_a_missing_tap_cannot_be_created_without_cap_net_admin(pod, vmm):
    assert boot(vmm, config(pod, tap="tap7")) == failure(
        "Open tap device failed", "Unable to configure tap interface", "Operation not permitted (os error 1)")


def test_a_tap_owned_by_another_user_cannot_be_opened(pod, vmm):
    pod.link("eth0", mtu=1400)
    pod.ip("link", "add", "k6t-eth0", "type", "bridge")
    pod.tap("tap0", bridge="k6t-eth0", mtu=1400, owner=0)

    assert boot(vmm, config(pod, tap="tap0")) == failure(
        "Open tap device failed", "Unable to configure tap interface", "Operation not permitted (os error 1)")


def test_a_reboot_and_a_fresh_boot_reopen_the_tap_without_privilege(pod, vmm):
    # Reset (vm.reboot) and SoftReboot (vm.shutdown, vm.boot) open the tap again; the config now
    # holds host_mac = the tap's own MAC, which CH compares before it would set it
    pod.masquerade(mtu=1400, queues=2)

    assert boot(vmm, config(pod, tap="tap0", num_queues=4)) == (204, None)
    assert vmm.call("PUT", "vm.reboot") == (204, None)
    assert vm_info(vmm.socket)["state"] == "Running"
    assert vmm.call("PUT", "vm.shutdown") == (204, None)
    assert vmm.call("PUT", "vm.boot") == (204, None)
    assert vm_info(vmm.socket)["state"] == "Running"
