"""Compute: vCPU counts by KubeVirt's rules, topology, pinning, models, features, clock, platform."""

from __future__ import annotations

from typing import Any

import pytest

from ch_launcher.convert.compute import configure_compute
from ch_launcher.convert.context import LauncherEnv, PodFacts
from tests.unit.convert.vmibuild import api, fields, launcher_env, problem, run, translation, vmi


def cpus(domain: dict[str, Any]) -> dict[str, Any]:
    return api(run(vmi(domain)))["cpus"]


@pytest.mark.parametrize("cpu, boot", [
    ({"sockets": 2, "cores": 3, "threads": 2}, 12),
    ({"cores": 4}, 4),
    ({"sockets": 3}, 3),
    ({"threads": 2}, 2),
    ({"sockets": 2, "threads": 2}, 4),
])
def test_vcpus_are_sockets_times_cores_times_threads(cpu: dict[str, int], boot: int) -> None:
    got = cpus({"cpu": cpu})
    assert (got["boot_vcpus"], got["max_vcpus"]) == (boot, boot)
    topo = got["topology"]
    assert topo == {"threads_per_core": cpu.get("threads", 1), "cores_per_die": cpu.get("cores", 1),
                    "dies_per_package": 1, "packages": cpu.get("sockets", 1)}


@pytest.mark.parametrize("resources, boot", [
    ({"limits": {"cpu": "2500m"}}, 3),
    ({"limits": {"cpu": "2"}, "requests": {"cpu": "4"}}, 2),
    ({"requests": {"cpu": "3"}}, 3),
    ({"requests": {"cpu": "100m"}}, 1),
    ({"limits": {"cpu": "0"}}, 1),
    ({}, 1),
])
def test_vcpus_come_from_the_cpu_limit_else_the_request_rounded_up_and_at_least_one(
        resources: dict[str, Any], boot: int) -> None:
    got = cpus({"resources": resources})
    assert got["boot_vcpus"] == boot
    assert got["topology"]["packages"] == boot  # KubeVirt puts them in sockets


def test_explicit_topology_wins_over_resources() -> None:
    assert cpus({"cpu": {"cores": 2}, "resources": {"limits": {"cpu": "8"}}})["boot_vcpus"] == 2


def test_max_sockets_allows_cpu_hotplug_up_to_max_sockets_times_cores_times_threads() -> None:
    got = cpus({"cpu": {"sockets": 1, "cores": 2, "threads": 1, "maxSockets": 4}})
    assert (got["boot_vcpus"], got["max_vcpus"]) == (2, 8)
    assert got["topology"]["packages"] == 4  # the topology product must equal max_vcpus


def test_max_sockets_below_sockets_is_invalid() -> None:
    p = problem(run(vmi({"cpu": {"sockets": 4, "maxSockets": 2}})), "spec.domain.cpu.maxSockets")
    assert p.reason == "FieldValueInvalid"


def test_more_than_two_threads_per_core_is_refused() -> None:
    p = problem(run(vmi({"cpu": {"threads": 4}})), "spec.domain.cpu.threads")
    assert "at most 2 threads per core" in p.message


def test_a_negative_core_count_is_invalid() -> None:
    assert problem(run(vmi({"cpu": {"cores": -1}})), "spec.domain.cpu.cores").reason == "FieldValueInvalid"


def test_an_invalid_cpu_quantity_names_its_field() -> None:
    p = problem(run(vmi({"resources": {"limits": {"cpu": "lots"}}})), "spec.domain.resources.limits.cpu")
    assert p.message.startswith("spec.domain.resources.limits.cpu 'lots'")


@pytest.mark.parametrize("model", ["host-passthrough", "host-model", ""])
def test_host_cpu_models_are_accepted(model: str) -> None:
    assert run(vmi({"cpu": {"model": model, "cores": 1}})).allowed


def test_a_named_cpu_model_is_refused() -> None:
    p = problem(run(vmi({"cpu": {"model": "Skylake-Client-IBRS"}})), "spec.domain.cpu.model")
    assert "host-passthrough" in p.message


def test_each_cpu_feature_is_refused_at_its_own_index() -> None:
    features = [{"name": "vmx"}, {"name": "pdpe1gb", "policy": "require"}, {"name": "x2apic", "policy": "disable"}]
    verdict = run(vmi({"cpu": {"features": features}}))
    assert fields(verdict.problems) == [f"spec.domain.cpu.features[{i}]" for i in range(3)]
    assert "'x2apic', policy disable" in verdict.problems[2].message


def test_dedicated_cpus_pin_each_vcpu_to_one_cpu_of_the_pod_cpuset() -> None:
    t = translation(vmi({"cpu": {"cores": 3, "dedicatedCpuPlacement": True}}),
                    launcher_env(PodFacts(cpuset=(6, 7, 10, 11))))
    configure_compute(t)
    assert t.config.cpus is not None and t.config.cpus.affinity is not None
    assert [(a.vcpu, a.host_cpus) for a in t.config.cpus.affinity] == [(0, [6]), (1, [7]), (2, [10])]
    assert not t.problems


def test_dedicated_cpus_at_admission_pin_nothing_and_raise_no_problem() -> None:
    t = translation(vmi({"cpu": {"cores": 2, "dedicatedCpuPlacement": True}}), LauncherEnv())
    configure_compute(t)
    assert t.config.cpus is not None and t.config.cpus.affinity is None
    assert not t.problems


def test_a_cpuset_smaller_than_the_vcpus_is_reported_at_launch() -> None:
    t = translation(vmi({"cpu": {"cores": 4, "dedicatedCpuPlacement": True}}), launcher_env(PodFacts(cpuset=(1, 2))))
    configure_compute(t)
    assert fields(t.problems) == ["spec.domain.cpu.dedicatedCpuPlacement"]
    assert "not enough exclusive threads provided, could not fit 2 core(s)" in t.problems[0].message
    assert "the pod's cpuset is 1,2, 4 vCPUs requested" in t.problems[0].message


def test_dedicated_cpus_with_an_unknown_cpuset_are_a_warning() -> None:
    t = translation(vmi({"cpu": {"cores": 2, "dedicatedCpuPlacement": True}}), launcher_env(PodFacts(cpuset=())))
    configure_compute(t)
    assert fields(t.warnings) == ["spec.domain.cpu.dedicatedCpuPlacement"] and not t.problems


def test_an_isolated_emulator_thread_without_dedicated_cpus_is_a_warning() -> None:
    t = translation(vmi({"cpu": {"isolateEmulatorThread": True}}))
    configure_compute(t)
    assert fields(t.warnings) == ["spec.domain.cpu.isolateEmulatorThread"] and not t.problems


def test_a_timezone_clock_is_refused() -> None:
    problem(run(vmi({"clock": {"timezone": "Europe/Berlin"}})), "spec.domain.clock.timezone")


def test_a_utc_offset_is_refused_but_plain_utc_is_fine() -> None:
    problem(run(vmi({"clock": {"utc": {"offsetSeconds": 3600}}})), "spec.domain.clock.utc.offsetSeconds")
    assert run(vmi({"clock": {"utc": {}}})).allowed


def test_timers_cloud_hypervisor_lacks_are_warnings_not_errors() -> None:
    timer = {"hpet": {"present": True}, "pit": {"tickPolicy": "delay"}, "rtc": {"tickPolicy": "catchup"}}
    verdict = run(vmi({"clock": {"utc": {}, "timer": timer}}))
    assert verdict.allowed
    assert sorted(fields(verdict.warnings)) == ["spec.domain.clock.timer.hpet", "spec.domain.clock.timer.pit",
                                                "spec.domain.clock.timer.rtc"]


def test_timers_switched_off_that_cloud_hypervisor_lacks_anyway_are_silent() -> None:
    verdict = run(vmi({"clock": {"timer": {"hpet": {"present": False}, "pit": {"present": False}}}}))
    assert verdict.allowed and not verdict.warnings


def test_a_null_timer_is_absent_and_a_non_object_one_invalid() -> None:
    off = run(vmi({"clock": {"timer": {"hyperv": None, "hpet": None}}}))
    assert off.allowed and off.warnings == [] and "kvm_hyperv" not in api(off)["cpus"]
    assert problem(run(vmi({"clock": {"timer": {"hpet": "yes"}}})), "spec.domain.clock.timer.hpet").reason == \
        "FieldValueInvalid"


def test_a_hyperv_timer_turns_on_the_hyperv_enlightenments() -> None:
    assert cpus({"clock": {"timer": {"hyperv": {}}}})["kvm_hyperv"] is True


def test_a_q35_machine_type_is_silent_and_another_is_a_warning() -> None:
    assert not run(vmi({"machine": {"type": "pc-q35-rhel9.6.0"}})).warnings
    assert fields(run(vmi({"machine": {"type": "pc-i440fx-2.12"}})).warnings) == ["spec.domain.machine.type"]


def test_the_chassis_asset_tag_reaches_smbios_and_other_chassis_fields_are_a_warning() -> None:
    verdict = run(vmi({"chassis": {"asset": "A-42", "serial": "S1", "manufacturer": "ACME"}}))
    assert api(verdict)["platform"]["chassis_asset_tag"] == "A-42"
    assert fields(verdict.warnings) == ["spec.domain.chassis"]
    assert "manufacturer, serial" in verdict.warnings[0].message


@pytest.mark.parametrize("kind", ["sev", "snp", "tdx"])
def test_confidential_computing_is_refused(kind: str) -> None:
    problem(run(vmi({"launchSecurity": {kind: {}}})), f"spec.domain.launchSecurity.{kind}")


@pytest.mark.parametrize("arch, ok", [("amd64", True), ("", True), ("arm64", False), ("s390x", False)])
def test_only_amd64_is_supported(arch: str, ok: bool) -> None:
    verdict = run(vmi(architecture=arch))
    assert verdict.allowed is ok
    if not ok:
        assert fields(verdict.problems) == ["spec.architecture"]


def test_a_supplemental_io_thread_pool_is_a_warning() -> None:
    verdict = run(vmi({"ioThreadsPolicy": "supplementalPool", "ioThreads": {"supplementalPoolThreadCount": 2}}))
    assert verdict.allowed
    assert fields(verdict.warnings) == ["spec.domain.ioThreadsPolicy", "spec.domain.ioThreads"]


@pytest.mark.parametrize("value", [float("inf"), float("nan"), "1e400", 10**9, "1e999999999"])
def test_an_infinite_or_absurd_cpu_limit_is_invalid_not_a_crash(value: Any) -> None:
    assert problem(run(vmi({"resources": {"limits": {"cpu": value}}})), "spec.domain.resources.limits.cpu").reason == \
        "FieldValueInvalid"


@pytest.mark.parametrize("domain, path", [
    ({"cpu": {"cores": 2}, "resources": {"requests": {"cpu": "lots"}}}, "spec.domain.resources.requests.cpu"),
    ({"resources": {"limits": {"cpu": "2"}, "requests": {"cpu": "-1"}}}, "spec.domain.resources.requests.cpu"),
    ({"cpu": {"sockets": 1}, "resources": {"limits": {"cpu": float("nan")}}}, "spec.domain.resources.limits.cpu"),
])
def test_a_cpu_request_or_limit_the_vcpu_count_does_not_read_is_still_checked(domain: dict[str, Any],
                                                                               path: str) -> None:
    # the admission webhook's overhead calculator reads both
    assert problem(run(vmi(domain)), path).reason == "FieldValueInvalid"
