"""Memory: guest size by KubeVirt's defaulting order, virtio-mem hotplug, hugepages, shared memory, balloon."""

from __future__ import annotations

from typing import Any

import pytest

from ch_launcher.convert import LauncherEnv, LauncherOptions
from ch_launcher.convert.memory import NoMemoryRequested, configure_memory
from tests.unit.convert.vmibuild import api, fields, problem, run, translation, vmi

GiB = 2**30
MiB = 2**20


def memory(domain: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return api(run(vmi(domain), **kw))["memory"]


@pytest.mark.parametrize("domain, size", [
    ({"memory": {"guest": "2Gi"}, "resources": {"requests": {"memory": "4Gi"}}}, 2 * GiB),
    ({"memory": None, "resources": {"requests": {"memory": "3Gi"}, "limits": {"memory": "4Gi"}}}, 3 * GiB),
    ({"memory": None, "resources": {"limits": {"memory": "4Gi"}}}, 4 * GiB),
    ({"memory": {"hugepages": {"pageSize": "1Gi"}}}, GiB),
    ({"memory": {"guest": "1024M"}}, 1024 * 10**6),
])
def test_guest_memory_follows_kubevirts_defaulting_order(domain: dict[str, Any], size: int) -> None:
    assert memory(domain)["size"] == size


def test_no_memory_at_all_is_reported_in_kubevirts_words_with_a_field() -> None:
    """KubeVirt's own cause has no field (kubectl prints `: no memory requested`); ours names the
    first of the three fields it lists."""
    verdict = run(vmi({"memory": None}))
    p = problem(verdict, "spec.domain.memory.guest")
    assert p.reason == "FieldValueRequired" and isinstance(p, NoMemoryRequested)
    assert p.message == ("no memory requested, at least one of 'spec.domain.memory.guest', "
                         "'spec.domain.memory.hugepages.pageSize' or 'spec.domain.resources.requests.memory' "
                         "must be set")


def test_an_invalid_memory_quantity_names_its_field() -> None:
    problem(run(vmi({"memory": {"guest": "much"}})), "spec.domain.memory.guest")


def test_memory_that_is_not_whole_pages_is_rounded_up() -> None:
    assert memory({"memory": {"guest": "1000001"}})["size"] == 1003520


def test_max_guest_becomes_virtio_mem_hotplug_of_the_difference() -> None:
    got = memory({"memory": {"guest": "1Gi", "maxGuest": "4Gi"}})
    assert got["hotplug_method"] == "VirtioMem" and got["hotplug_size"] == 3 * GiB


def test_hotplug_size_is_rounded_down_to_virtio_mem_blocks_with_a_warning() -> None:
    verdict = run(vmi({"memory": {"guest": "1Gi", "maxGuest": "1300Mi"}}))
    assert api(verdict)["memory"]["hotplug_size"] == 256 * MiB
    assert fields(verdict.warnings) == ["spec.domain.memory.maxGuest"]


def test_max_guest_equal_to_guest_means_no_hotplug() -> None:
    assert "hotplug_size" not in memory({"memory": {"guest": "1Gi", "maxGuest": "1Gi"}})


def test_max_guest_below_guest_is_invalid() -> None:
    p = problem(run(vmi({"memory": {"guest": "2Gi", "maxGuest": "1Gi"}})), "spec.domain.memory.maxGuest")
    assert p.reason == "FieldValueInvalid"


def test_hugepages_map_to_hugepages_of_that_size_taken_at_boot() -> None:
    """Prefaulted, as libvirt preallocates a hugepage guest's memory for QEMU: the node showed
    KubeVirt's launcher take the guest's whole size from the pool at start, the launcher without
    prefault only the pages the guest touched."""
    got = memory({"memory": {"guest": "4Gi", "hugepages": {"pageSize": "2Mi"}}})
    assert (got["hugepages"], got["hugepage_size"], got["prefault"]) == (True, 2 * MiB, True)


def test_memory_without_hugepages_is_not_prefaulted() -> None:
    assert "prefault" not in memory({"memory": {"guest": "1Gi"}})


def test_guest_memory_that_is_not_a_multiple_of_the_hugepage_size_is_invalid() -> None:
    p = problem(run(vmi({"memory": {"guest": "1500Mi", "hugepages": {"pageSize": "1Gi"}}})), "spec.domain.memory.guest")
    assert "multiple of spec.domain.memory.hugepages.pageSize" in p.message


def test_a_hugepage_size_that_is_not_a_power_of_two_is_invalid() -> None:
    problem(run(vmi({"memory": {"guest": "3Mi", "hugepages": {"pageSize": "3Mi"}}})),
            "spec.domain.memory.hugepages.pageSize")


def test_hugepages_with_hotplug_round_to_whole_hugepages() -> None:
    got = memory({"memory": {"guest": "2Gi", "maxGuest": "5Gi", "hugepages": {"pageSize": "1Gi"}}})
    assert got["hotplug_size"] == 3 * GiB


def test_memory_is_shared_when_a_device_needs_it() -> None:
    t = translation(vmi())
    t.need_shared_memory("spec.domain.devices.filesystems[0]: virtiofs")
    configure_memory(t)
    assert t.config.memory is not None and t.config.memory.shared is True


def test_memory_is_private_unless_a_device_needs_it() -> None:
    assert "shared" not in memory({})


def test_hugepages_need_no_shared_flag_for_vhost_user() -> None:
    t = translation(vmi({"memory": {"guest": "1Gi", "hugepages": {"pageSize": "2Mi"}}}))
    t.need_shared_memory("vhost-user")
    configure_memory(t)
    assert t.config.memory is not None and t.config.memory.shared is None and t.config.memory.hugepages


def test_the_balloon_is_attached_by_default_with_free_page_reporting() -> None:
    assert api(run(vmi()))["balloon"] == {"size": 0, "deflate_on_oom": True, "free_page_reporting": True}


def test_autoattach_mem_balloon_false_attaches_no_balloon() -> None:
    assert "balloon" not in api(run(vmi({"devices": {"autoattachMemBalloon": False}})))


@pytest.mark.parametrize("case", ["cluster", "annotation", "hugepages"])
def test_free_page_reporting_is_off_where_kubevirt_turns_it_off(case: str) -> None:
    body = vmi({"memory": {"guest": "1Gi", "hugepages": {"pageSize": "2Mi"}}} if case == "hugepages" else {})
    if case == "annotation":
        body["metadata"]["annotations"] = {"kubevirt.io/free-page-reporting-disabled": "true"}
    options = LauncherOptions(free_page_reporting_disabled=case == "cluster")
    assert api(run(body, options=options))["balloon"]["free_page_reporting"] is False


def test_required_memlock_asks_the_vmm_to_be_able_to_lock_all_guest_memory() -> None:
    verdict = run(vmi({"memory": {"guest": "1Gi", "maxGuest": "2Gi", "reservedOverhead": {"memLock": "Required"}}}))
    assert verdict.allowed
    assert verdict.plan.host.lock_memory == 2 << 30 and verdict.plan.host.finds_vmm


@pytest.mark.parametrize("devices", [
    {"gpus": [{"name": "g", "deviceName": "nvidia.com/T4"}]},
    {"hostDevices": [{"name": "h", "deviceName": "intel.com/qat"}]},
])
def test_vfio_pins_guest_memory_so_the_balloon_never_reports_free_pages(devices: dict[str, Any]) -> None:
    verdict = run(vmi({"devices": devices}), LauncherEnv())  # at admission: no pod, no device paths
    assert verdict.plan.config.balloon.free_page_reporting is False
    assert verdict.plan.host.lock_memory == 1 << 30
    plain = run(vmi({}), LauncherEnv())
    assert plain.plan.config.balloon.free_page_reporting is True and plain.plan.host.lock_memory == 0


@pytest.mark.parametrize("value", [float("inf"), float("nan"), "9Ei", 1e300, "1e999999999", "1e999998"])
def test_an_infinite_or_absurd_memory_size_is_invalid_not_a_crash(value: Any) -> None:
    assert problem(run(vmi({"memory": {"guest": value}})), "spec.domain.memory.guest").reason == "FieldValueInvalid"


@pytest.mark.parametrize("domain, path", [
    ({"resources": {"requests": {"memory": "lots"}}}, "spec.domain.resources.requests.memory"),
    ({"resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": ""}}}, "spec.domain.resources.limits.memory"),
    ({"resources": {"limits": {"memory": "-1Gi"}}}, "spec.domain.resources.limits.memory"),
    ({"memory": {"guest": "1Gi", "reservedOverhead": {"addedOverhead": float("nan")}}},
     "spec.domain.memory.reservedOverhead.addedOverhead"),
])
def test_memory_quantities_the_guest_size_does_not_read_are_still_checked(domain: dict[str, Any], path: str) -> None:
    # the admission webhook's overhead calculator reads them
    assert problem(run(vmi(domain)), path).reason == "FieldValueInvalid"


def test_an_empty_guest_memory_is_invalid_not_unset() -> None:
    # resource.Quantity does not decode "" (kubevirt would refuse the VMI before us)
    assert problem(run(vmi({"memory": {"guest": ""}, "resources": {"requests": {"memory": "1Gi"}}})),
                   "spec.domain.memory.guest").reason == "FieldValueInvalid"
