"""A launcher pod's devices. Without access to /dev/kvm (its VMI was not given the kvm device
plugin's resource) the VMM, simulated or real, exits at start with Cloud Hypervisor's error chain,
and the launcher's Sync fails with it, staying up for virt-handler's next try. With the devices
as the real node of tests/cluster gives them (root's until virt-handler claims them for 107, just
before the first Sync), the VM boots on virt-handler's tap."""

from __future__ import annotations

import time

import pytest

from tests.functional.harness import Harness, make_vmi
from tests.functional.pod_fixtures import real_vmm, vmm_info
from tests.functional.pod_sandbox import PodSandbox, missing_requirements

pytestmark = [pytest.mark.root, pytest.mark.timeout(60)]


def test_without_kvm_access_the_vmm_exits_at_start_and_sync_says_why(vmm_kind):
    reason = missing_requirements()
    if reason:
        pytest.skip(reason)
    with PodSandbox(kvm_mode=0o600) as pod:
        vh = Harness(vmi=make_vmi(), pod=pod, real=real_vmm(pod) if vmm_kind == "real" else None)
        try:
            vh.run(vh.start())
            reply = vh.run(vh.client.sync(vh.vmi, check=False))
            assert not reply.success
            assert "cloud-hypervisor did not start" in reply.message
            assert ("Failed to open hypervisor interface (is hypervisor interface available?)\n  1: Failed to create "
                    "Vm\n  2: Permission denied (os error 13)") in reply.message, reply.message
            assert vh.launcher.poll() is None
        finally:
            vh.close()


def node_devices_launch(vmm_kind: str, pod: PodSandbox) -> Harness:
    """A launcher for a VMI with a masquerade NIC in a pod whose devices are as on the test node
    of tests/cluster: /dev/kvm and /dev/net/tun root's with mode 0600 (the host's), the pod
    mutator's directory at /dev/vhost-net, and virt-handler's network (k6t-eth0, tap0). The
    launcher is started; virt-handler's claim of the devices (`claim_devices`) comes once the
    launcher has had the chance to try its VMM, as on the node (virt-handler claims them after it
    found the launcher's socket, just before its first Sync)."""
    pod.masquerade(mtu=1500)
    vmi = make_vmi(devices={"interfaces": [{"name": "default", "masquerade": {}}]},
                   networks=[{"name": "default", "pod": {}}])
    vh = Harness(vmi=vmi, pod=pod, real=real_vmm(pod) if vmm_kind == "real" else None)
    vh.run(vh.start())
    deadline = time.monotonic() + 10
    while "cloud-hypervisor" not in vh.log_text() and time.monotonic() < deadline:
        time.sleep(0.05)  # a launcher that leaves the VMM alone until the Sync never says so: 10 s at most
    assert vh.launcher is not None
    pod.claim_devices(vh.launcher.pid)
    return vh


def test_on_a_node_whose_devices_are_roots_the_vm_boots_once_virt_handler_has_claimed_them(vmm_kind):
    """The real node's order (tests/cluster): the launcher starts before virt-handler has given
    its pod /dev/kvm; the first Sync comes after, and boots the VM on virt-handler's tap."""
    reason = missing_requirements()
    if reason:
        pytest.skip(reason)
    with PodSandbox(kvm_mode=0o600, tun_mode=0o600, vhost_net_placeholder=True) as pod:
        vh = node_devices_launch(vmm_kind, pod)
        try:
            assert vh.client is not None
            vh.run(vh.client.sync(vh.vmi))
            vh.run(vh.recorder.wait_for_status("Running", timeout=15))
            net = vmm_info(vh)["config"]["net"][0]
            assert (net["id"], net["tap"]) == ("default", "tap0")
        finally:
            vh.close()


def test_no_error_is_logged_while_virt_handler_has_not_yet_given_the_pod_kvm(vmm_kind):
    """Seen at every non-root start on the real node before the fix: the launcher's warm-up
    started its VMM while the pod's /dev/kvm was still root's and logged the expected failure at
    error level ('cloud-hypervisor did not start ... Permission denied'). Now it says at info
    level that the first Sync starts the VMM, and that Sync does."""
    reason = missing_requirements()
    if reason:
        pytest.skip(reason)
    with PodSandbox(kvm_mode=0o600, tun_mode=0o600, vhost_net_placeholder=True) as pod:
        vh = node_devices_launch(vmm_kind, pod)
        try:
            assert vh.client is not None
            vh.run(vh.client.sync(vh.vmi))
            vh.run(vh.recorder.wait_for_status("Running", timeout=15))
            lines = vh.log_text().splitlines()
            errors = [line for line in lines if '"level":"error"' in line]
            assert errors == [], "\n".join(errors)
            (waiting,) = [line for line in lines if "cloud-hypervisor starts at the first Sync" in line]
            assert '"level":"info"' in waiting and "/dev/kvm cannot be opened read-write" in waiting, waiting
        finally:
            vh.close()
