"""KubeVirt's own virt-handler code plays every story against ch-launcher (tests/functional/probe.py):
on the simulated VMM, and on the real cloud-hypervisor as the pod runs it (uid 107, only
NET_BIND_SERVICE, its own network namespace) with the tiny guest (tests/guest/), whose console
commands make it power off or panic; KubeVirt's example VMIs play the main story there too.
Each story fails on any discrepancy the probe flags, any error-level log line of KubeVirt's code
(virt-handler's metrics scrapers log one per failed scrape), and any failed call that is not a
refusal the launcher declares."""

from __future__ import annotations

import copy
import functools
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ch_launcher.server import NOT_SERVED
from tests.conftest import KUBEVIRT_EXAMPLES
from tests.framework import FAKE_CH
from tests.functional.pod_fixtures import real_binary, real_vmm_reason
from tests.functional.pod_probes import hashed_pod_interface
from tests.functional.pod_sandbox import PodSandbox, missing_requirements
from tests.functional.probe import NAME, NAMESPACE, UID, ProbeRun, probe_binary, refusal_problems, run_probe
from tests.guest.build import guest_payload

pytestmark = pytest.mark.probe

SCENARIOS = ("main", "kill", "poweroff", "sigterm", "crash", "panic", "runtime")

# What virt-handler then sees, beyond the probe's own checks: the event sequence's telling part,
# the K8s events, and lines the story must print.
EXPECTED: dict[str, dict[str, Any]] = {
    # main's GuestPing finds no agent (the probe's guest runs none): virt-launcher's Warning event
    "main": {"events": "MODIFIED Paused/User", "final": "Shutoff/Shutdown", "k8s": "[GuestAgentPingFailed]",
             "lines": ("dirty-rate collector: 1 metric samples", "metric kubevirt_vmi_dirty_rate_bytes_per_second",
                       # from the VMM's vcpu<n> threads (ch_launcher.stats)
                       "metric kubevirt_vmi_vcpu_seconds_total", "metric kubevirt_vmi_vcpu_delay_seconds_total",
                       "metric kubevirt_vmi_node_cpu_affinity")},
    "kill": {"final": "Shutoff/Destroyed", "k8s": "[]"},
    "poweroff": {"final": "Shutoff/Shutdown", "k8s": "[]"},
    "sigterm": {"final": "Shutoff/", "k8s": "[]"},
    "crash": {"final": "Shutoff/Crashed", "k8s": "[VMMCrashed]"},
    "panic": {"events": "MODIFIED Crashed/Panicked -> MODIFIED Shutoff/Crashed", "final": "Shutoff/Crashed",
              "k8s": "[GuestPanicked]"},
    "runtime": {"final": "Shutoff/Destroyed", "k8s": "[]", "lines": ("AdjustResources (Running) OK",)},
}


@functools.cache
def _probe() -> str | None:
    return probe_binary()


@pytest.fixture
def probe() -> str:
    path = _probe()
    if path is None:
        pytest.skip("../shared/tools/kubevirt-probe is absent: ../shared is not beside this checkout")
    return path


def assert_clean(run: ProbeRun, scenario: str, **overrides: Any) -> None:
    """The story ran, nothing was flagged, KubeVirt's code logged no error, and every failed call
    is a refusal the launcher declares; then what virt-handler saw is what this story means
    (EXPECTED, with `overrides`)."""
    assert run.returncode == 0, (f"{len(run.discrepancies)} discrepancies: {run.discrepancies}\n"
                                 f"{run.report()}")
    assert run.kubevirt_errors == [], run.report()
    assert refusal_problems(run, set(NOT_SERVED)) == [], run.report()
    expected = {**EXPECTED[scenario], **overrides}
    sequence = run.line("event sequence: ")
    assert sequence.startswith("event sequence: ADDED Running/Unknown"), run.report()
    assert sequence.endswith("MODIFIED NoState/NonExistent+deleted"), run.report()
    final = sequence.rsplit(" -> ", 2)[-2]
    assert final.startswith("MODIFIED " + expected["final"]), run.report()
    if "events" in expected:
        assert expected["events"] in sequence, run.report()
    assert run.line("k8s events recorded: ") == f"k8s events recorded: {expected['k8s']}", run.report()
    for line in expected.get("lines", ()):
        assert line in run.output, run.report()


# --- the simulated VMM ---------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_kubevirts_own_client_plays_each_story_on_the_simulated_vmm(probe, scenario):
    env = {"CHPROBE_PVPANIC": "1"} if scenario == "panic" else {}
    run = run_probe(scenario, probe=probe, ch_binary=str(FAKE_CH), env=env)
    assert_clean(run, scenario)
    if scenario == "panic":
        assert_panic_reported_as_virt_launcher_does(run)


def assert_panic_reported_as_virt_launcher_does(run: ProbeRun) -> None:
    """After a pvpanic: the count, virt-launcher's GuestPanicInfo for a panic without details,
    and the VM's panic device (the Domain virt-handler saw right after the panic)."""
    after = run.seen["domain_(after_panic)"]
    assert after["Status"]["GuestPanicInfo"]["Type"] == "unknown" and after["Status"]["PanicCount"] == 1, run.report()
    assert after["Spec"]["Devices"]["PanicDevices"] == [{"Model": "pvpanic"}], run.report()


def assert_vcpus_as_virt_launcher_shows_them(run: ProbeRun) -> None:
    """virt-api's defaults give the probe's VMI maxSockets 4 (LiveUpdate): four possible vCPUs,
    one on, as the converter's configureCPUTopology lists them."""
    assert run.seen["vmi"]["spec"]["domain"]["cpu"]["maxSockets"] == 4
    spec = run.seen["domain_(Running)"]["Spec"]
    assert spec["CPU"]["Topology"] == {"Sockets": 4, "Cores": 1, "Threads": 1}, run.report()
    assert spec["VCPU"] == {"Placement": "static", "CPUs": 4}, run.report()
    assert [(v["ID"], v["Enabled"], v["Hotpluggable"]) for v in spec["VCPUs"]["VCPU"]] == [
        (0, "yes", "no"), (1, "no", "yes"), (2, "no", "yes"), (3, "no", "yes")], run.report()


def test_the_domain_shows_the_vcpus_virt_api_gave_the_vmi_as_virt_launcher_does(probe):
    run = run_probe("kill", probe=probe, ch_binary=str(FAKE_CH))
    assert run.returncode == 0, run.report()
    assert_vcpus_as_virt_launcher_shows_them(run)


def test_a_guest_that_dirties_memory_shows_in_virt_handlers_dirty_rate_metric(probe):
    run = run_probe("main", probe=probe, ch_binary=str(FAKE_CH), env={"FAKE_CH_DIRTY_PAGES": "20000"})
    assert_clean(run, "main")
    metric = run.line("metric kubevirt_vmi_dirty_rate_bytes_per_second")
    assert metric and float(metric.rsplit("= ", 1)[1]) > 0, run.report()


def test_kubevirts_own_client_decodes_what_the_guest_agent_tells(probe):
    """A guest that runs qemu-ga on vsock from boot (the simulated guest's stand-in): KubeVirt's
    client decodes GetGuestInfo into its own type, every agent RPC succeeds (Freeze, Unfreeze,
    GuestPing, Exec among them), and the Domains it saw carry the connected channel virt-handler
    reads AgentConnected from, with the guest's OS."""
    run = run_probe("main", probe=probe, ch_binary=str(FAKE_CH), env={"FAKE_CH_GUEST_AGENT": "1023"})
    assert_clean(run, "main", k8s="[]")  # its GuestPing answered
    assert not [call for call, _ in run.failed_calls if call.split()[0] in (
        "FreezeVirtualMachine", "UnfreezeVirtualMachine", "GuestPing", "Exec")], run.report()
    assert '"guestAgentVersion":"7.2.22"' in run.line("guest info "), run.report()
    unpaused = run.seen["domain_(after_Unpause)"]
    assert [c["Target"]["State"] for c in unpaused["Spec"]["Devices"]["Channels"]] == ["connected"], run.report()
    assert unpaused["Status"]["OSInfo"]["PrettyName"] == "Debian GNU/Linux 12 (bookworm)", run.report()


# --- the real VMM, as the pod runs it ------------------------------------------------------------


def tiny_guest_firmware(pod: PodSandbox) -> Path:
    """A firmware directory whose BIOS and EFI firmware are both the tiny guest (tests/guest/)."""
    firmware = pod.root / "fw"
    firmware.mkdir()
    for name in ("hypervisor-fw", "CLOUDHV.fd"):
        (firmware / name).write_bytes(guest_payload().read_bytes())
    return firmware


def real_vmm_in_a_pod() -> None:
    reason = missing_requirements() or real_vmm_reason()
    if reason:
        pytest.skip(f"real cloud-hypervisor in a pod sandbox: {reason}")


@pytest.fixture
def real_pod():
    real_vmm_in_a_pod()
    with PodSandbox() as sandbox:
        yield sandbox, tiny_guest_firmware(sandbox)


# The guest-driven stories on the real VMM: the probe runs CHPROBE_GUEST_ACTION (sh -c, with
# CHPROBE_ACTION=poweroff|panic) to make the tiny guest do it through the launcher's console
# (tests/guest/console.py finds <private-dir>/<uid>/virt-serial0); KCH_ROOT is the pod's root.
GUEST_ACTION = f"{sys.executable} -m tests.guest.console \"$KCH_ROOT/private\" \"$CHPROBE_ACTION\""


@pytest.mark.real_vmm
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_kubevirts_own_client_plays_each_story_on_the_real_vmm_in_the_pod(probe, real_pod, scenario):
    pod, firmware = real_pod
    env = {"CHPROBE_GUEST_ACTION": GUEST_ACTION}
    if scenario == "panic":
        env["CHPROBE_PVPANIC"] = "1"
    run = run_probe(scenario, probe=probe, ch_binary=str(real_binary()), firmware=firmware, pod=pod, env=env)
    assert_clean(run, scenario)
    if scenario == "panic":  # the real VMM's pvpanic event, as the simulated one's
        assert_panic_reported_as_virt_launcher_does(run)
    if scenario == "kill":  # the real VMM booted 1 of 4 possible vCPUs
        assert_vcpus_as_virt_launcher_shows_them(run)


# --- KubeVirt's example VMIs ---------------------------------------------------------------------


def example_vmi(name: str) -> dict[str, Any]:
    """A KubeVirt example VMI as the launcher of pod p1 gets it (its identity from the flags)."""
    docs = list(yaml.safe_load_all((KUBEVIRT_EXAMPLES / name).read_text()))
    vmi = copy.deepcopy(next(d for d in docs if d and d.get("kind") == "VirtualMachineInstance"))
    vmi["metadata"].update(name=NAME, namespace=NAMESPACE, uid=UID)
    return vmi


def pod_network(pod: PodSandbox, vmi: dict[str, Any]) -> None:
    """What virt-handler builds in the pod for the VMI's interfaces before the first Sync; a VMI
    without interfaces gets virt-api's default, a bridge on the pod network."""
    interfaces = vmi["spec"]["domain"].get("devices", {}).get("interfaces") or [{"name": "default", "bridge": {}}]
    networks = {n["name"]: n for n in vmi["spec"].get("networks") or [{"name": "default", "pod": {}}]}
    for index, iface in enumerate(interfaces):
        network = networks[iface["name"]]
        if "pod" in network or network.get("multus", {}).get("default"):
            pod_iface, tap = "eth0", "tap0"
        else:
            pod_iface = hashed_pod_interface(iface["name"])
            tap = "tap" + pod_iface[3:]
        mac = f"0a:58:0a:f4:{index + 1:02x}:05"  # each pod link has its own
        if "masquerade" in iface:
            pod.masquerade(pod_iface, tap=tap, mac=mac)
        else:
            pod.bridge(pod_iface, tap=tap, index=index, mac=mac, ip=f"10.244.{index + 1}.5",
                       gateway=f"10.244.{index + 1}.1")


# KubeVirt's examples this backend runs, and what each brings that the probe's own VMI has not.
EXAMPLES = {
    "vmi-fedora.yaml": "masquerade on the pod network",
    "vmi-masquerade.yaml": "masquerade with forwarded ports",
    "vmi-alpine-efi.yaml": "EFI firmware, a bridge on the pod network",
    "vmi-nocloud.yaml": "three disks: containerDisk, cloud-init, emptyDisk",
    "vmi-multus-multiple-net.yaml": "two NICs: masquerade on the pod network and a Multus bridge",
    "vmi-pvc.yaml": "a persistentVolumeClaim disk",
}


@pytest.mark.real_vmm
@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_kubevirts_examples_play_the_main_story_on_the_real_vmm_in_the_pod(probe, example):
    # On the real VMM only: what these VMIs add (taps, EFI, more disks, a PVC) is what the real
    # binary may refuse and the simulation not; the tiny guest boots as BIOS and as EFI firmware.
    if not KUBEVIRT_EXAMPLES.exists():
        pytest.skip(f"{KUBEVIRT_EXAMPLES} is absent: ../shared/reference is not beside this checkout")
    real_vmm_in_a_pod()
    vmi = example_vmi(example)
    with PodSandbox() as pod:
        pod_network(pod, vmi)
        run = run_probe("main", probe=probe, ch_binary=str(real_binary()), firmware=tiny_guest_firmware(pod),
                        vmi=vmi, pod=pod, env={"CHPROBE_GUEST_ACTION": GUEST_ACTION})
    assert_clean(run, "main")
