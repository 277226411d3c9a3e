"""The KubeVirt examples (same set as test_examples.py) checked for their network and device
fields: NICs and taps, DHCP servers, rng, and the exact paths of network/device/policy refusals,
at admission (no pod) and, for the networked ones, as the launcher sees them in a pod.
"""

from __future__ import annotations

import json

import pytest

from ch_launcher.convert import LauncherEnv, check
from ch_launcher.convert.context import PodFacts
from tests.conftest import KUBEVIRT_EXAMPLES, require_shared
from tests.unit.convert.examples_support import EXAMPLES

BY_NAME = dict(EXAMPLES)
D = "spec.domain.devices"

# name -> (NICs as (id, tap), DHCP servers as (binding, pod interface), rng, network/device/policy refusals)
TABLE = {
    "vmi-fedora": ([("default", "tap0")], [("masquerade", "eth0")], True, []),
    "vmi-masquerade": ([("testmasquerade", "tap0")], [("masquerade", "eth0")], True, []),
    "vmi-migratable": ([("default", "tap0")], [("masquerade", "eth0")], False, []),
    "vmi-multus-multiple-net": ([("default", "tap0"), ("ptp", "tape31d7ce2712")],
                                [("masquerade", "eth0"), ("bridge", "pode31d7ce2712")], True, []),
    "vmi-multus-ptp": ([("ptp", "tape31d7ce2712")], [("bridge", "pode31d7ce2712")], True, []),
    "vmi-sriov": ([("default", "tap0")], [("masquerade", "eth0")], True, []),  # the VF comes with the pod
    "vmi-gpu": ([], [], True, []),
    "vmi-dra-pgpu": (None, None, False, [f"{D}.gpus[0].claimName"]),
    "vmi-usb": ([], [], True, []),  # admitted with a warning: a USB device fails at launch
    "vmi-windows": (None, None, False, [f"{D}.interfaces[0].model"]),
    "vmi-fedora-isolated": ([], [], True, []),
    "vmi-with-sidecar-hook": (None, None, False, ["metadata.annotations[hooks.kubevirt.io/hookSidecars]"]),
    "vmi-ephemeral": ([], [], False, []),
}
MINE = ("spec.domain.devices.interfaces", "spec.domain.devices.gpus", "spec.domain.devices.hostDevices",
        "spec.domain.devices.tpm", "spec.domain.cpu.dedicatedCpuPlacement", "metadata.annotations", "spec.networks",
        "spec.evictionStrategy", "spec.livenessProbe", "spec.readinessProbe")


def nics(plan):
    return [(n.id, n.tap) for n in plan.config.net or []]


@pytest.mark.parametrize("name", sorted(TABLE))
def test_example_network_and_devices_at_admission(name):
    require_shared(KUBEVIRT_EXAMPLES)
    expected_nics, expected_dhcp, rng, refused = TABLE[name]
    verdict = check(BY_NAME[name])
    assert [p.field for p in verdict.problems if p.field.startswith(MINE)] == refused
    if expected_nics is None:
        assert not verdict.allowed
        return
    plan = verdict.plan
    assert plan is not None, [p.message for p in verdict.problems]
    assert nics(plan) == expected_nics
    assert [(d.binding, d.pod_interface) for d in plan.dhcp] == expected_dhcp
    assert (plan.config.rng is not None) == rng
    assert [i.alias for i in plan.interfaces] == [n for n, _ in expected_nics]
    assert all(i.mac for i in plan.interfaces)


@pytest.mark.parametrize("name", [name for name, _ in EXAMPLES] or ["no-examples"])  # then require_shared skips
def test_every_example_warning_fits_in_a_kubectl_line(name):
    require_shared(KUBEVIRT_EXAMPLES)
    assert all(len(w.message) <= 120 for w in check(BY_NAME[name]).warnings)


def test_multus_example_in_its_pod_takes_pod_macs_and_mtus():
    require_shared(KUBEVIRT_EXAMPLES)
    links = {"eth0": (1450, "0a:58:0a:f4:01:05"), "tap0": (1450, "fe:00:00:00:00:01"),
             "pode31d7ce2712": (9000, "0a:00:00:00:00:07"), "tape31d7ce2712": (9000, "fe:00:00:00:00:02")}
    pod = PodFacts(link_mtu={k: v[0] for k, v in links.items()}, link_mac={k: v[1] for k, v in links.items()})
    verdict = check(BY_NAME["vmi-multus-multiple-net"], LauncherEnv(pod=pod))
    assert verdict.allowed, [p.message for p in verdict.problems]
    assert [(n.tap, n.mac, n.mtu) for n in verdict.plan.config.net] == [
        ("tap0", "0a:58:0a:f4:01:05", None), ("tape31d7ce2712", "0a:00:00:00:00:07", None)]
    assert [i.mtu for i in verdict.plan.interfaces] == [1450, 9000]


def test_sriov_example_in_its_pod_gets_the_vf_of_its_network_info():
    require_shared(KUBEVIRT_EXAMPLES)
    info = {"interfaces": [{"network": "sriov-net",
                            "deviceInfo": {"type": "pci", "pci": {"pci-address": "0000:3b:02.1"}}}]}
    pod = PodFacts(network_info=json.dumps(info))
    verdict = check(BY_NAME["vmi-sriov"], LauncherEnv(pod=pod))
    assert verdict.allowed, [p.message for p in verdict.problems]
    assert [d.to_api() for d in verdict.plan.config.devices] == [
        {"path": "/sys/bus/pci/devices/0000:3b:02.1/", "id": "sriov-sriov-net"}]
    assert verdict.plan.host.finds_vmm and verdict.plan.host.lock_memory == 1024000000
