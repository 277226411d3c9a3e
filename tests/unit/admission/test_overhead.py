"""The overhead calculator: KubeVirt's own figures reproduced, and ours row by row beside them."""

from __future__ import annotations

import functools
from decimal import Decimal

import pytest
import yaml

from admission.overhead import (
    CH_LAUNCHER,
    CH_MONITOR,
    CH_SPAWNER,
    CH_VFIO_PER_DEVICE,
    KUBEVIRT_MAIN,
    KUBEVIRT_V1_9_0,
    ROW_KEYS,
    CHSettings,
    ch_overhead,
    io_devices,
    kubevirt_constants_for,
    kubevirt_overhead,
    page_tables,
    plan_of,
    vcpu_count,
)
from ch_launcher.ch.vmconfig import VmConfig
from ch_launcher.convert import Plan
from ch_launcher.kubevirt.quantity import GiB, MiB
from ch_launcher.kubevirt.vmi import CPU, parse_vmi
from tests.builders import new_vmi, with_cpu, with_domain, with_memory, with_memory_request, with_namespace, with_spec
from tests.conftest import KUBEVIRT_EXAMPLES, require_shared

NO_DEVICES = Plan(config=VmConfig())  # for the rows that do not count the plan's devices


def vmi(memory: str = "1Gi", cpu: dict | None = None, **spec_extra) -> object:
    return parse_vmi(new_vmi("t", with_namespace(None), with_memory_request(memory),
                             *([with_cpu(**cpu)] if cpu is not None else []),
                             with_domain(**spec_extra.pop("domain", {})), with_spec(**spec_extra)))


@pytest.mark.parametrize(("memory", "vcpus", "expected_mib"), [
    ("1Gi", 1, 290), ("2Gi", 1, 292), ("8Gi", 4, 328),
])
def test_kubevirt_main_figures_match_its_own_unit_tests(memory, vcpus, expected_mib):
    # kubevirt pkg/hypervisor/kvm/hypervisorbackend_test.go@d923fdb815cd worked examples
    breakdown = kubevirt_overhead(vmi(memory, {"cores": vcpus, "sockets": 1, "threads": 1}))
    assert breakdown.total == expected_mib * MiB


def test_kubevirt_v1_9_0_has_the_smaller_qemu_term():
    assert kubevirt_overhead(vmi(), constants=KUBEVIRT_V1_9_0).total == 270 * MiB


def test_kubevirt_reads_page_tables_from_the_memory_request_only_and_we_from_the_guests_memory():
    # virt-controller's own figure for a VMI of `memory.guest: 128Mi` and no request, 1 vCPU, no
    # display, on the real node of tests/cluster (its pod's kubevirt.io/memory-overhead-bytes):
    # virt-api does not default the request from memory.guest, so KubeVirt adds no page tables
    guest_only = parse_vmi(new_vmi("t", with_memory("128Mi"), with_cpu(cores=1, sockets=1, threads=1),
                                   with_domain(devices={"autoattachGraphicsDevice": False})))
    assert kubevirt_overhead(guest_only)["page_tables"] == 0
    assert kubevirt_overhead(guest_only).total == 268435456
    # KVM's page tables follow guest RAM
    assert ch_overhead(guest_only, plan_of(guest_only))["page_tables"] == page_tables(128 * MiB)


def test_page_tables_round_up_to_kilobytes_then_down_to_bytes():
    assert page_tables(1 * GiB) == 2 * MiB
    assert page_tables(1024 * 10**6) == 2_000_000
    assert page_tables(0) == 0


@pytest.mark.parametrize(("cpu", "requests", "limits", "expected"), [
    (CPU(cores=2, sockets=3, threads=2), {}, {}, 12),
    (CPU(sockets=4), {}, {}, 4),
    (CPU(), {"cpu": "8"}, {}, 1),  # a topology block wins even when empty: at least 1
    (None, {"cpu": "500m"}, {"cpu": "3"}, 3),
    (None, {"cpu": "1500m"}, {}, 2),
    (None, {}, {}, 1),
])
def test_vcpus_are_counted_as_kubevirt_counts_them(cpu, requests, limits, expected):
    assert vcpu_count(cpu, requests, limits) == expected


def test_conditional_terms_are_shared_where_the_vmm_does_not_matter():
    v = vmi(domain={"devices": {"hostDevices": [{"name": "h", "deviceName": "x"}], "tpm": {}},
                    "memory": {"reservedOverhead": {"addedOverhead": "20Mi"}}},
            livenessProbe={"exec": {"command": ["true"]}},
            volumes=[{"name": "m", "downwardMetrics": {}}])
    ch, kv = ch_overhead(v, NO_DEVICES), kubevirt_overhead(v)  # (a VMI the translator refuses: rows only)
    for key, value in (("tpm", 53 * MiB), ("reserved", 20 * MiB), ("probes", 110 * MiB),
                       ("downward_metrics", MiB)):
        assert ch[key] == kv[key] == value, key
    assert kv["vfio"] == GiB


@pytest.mark.parametrize("devices, count", [
    ({"gpus": [{"name": "g", "deviceName": "nvidia.com/T4"}]}, 1),
    ({"hostDevices": [{"name": "a", "deviceName": "x"}, {"name": "b", "deviceName": "x"}]}, 2),
    ({"interfaces": [{"name": "s", "sriov": {}}, {"name": "d", "masquerade": {}}]}, 1),
])
def test_vfio_costs_the_iommu_page_tables_of_guest_ram_and_a_little_per_device_not_kubevirts_gigabyte(devices, count):
    v = vmi(domain={"devices": devices, "memory": {"guest": "4Gi"}})
    assert ch_overhead(v, NO_DEVICES)["vfio"] == page_tables(4 * GiB) + CH_VFIO_PER_DEVICE * count  # 8 MiB + 1 MiB each
    assert kubevirt_overhead(v)["vfio"] == GiB
    assert ch_overhead(vmi(), plan_of(vmi()))["vfio"] == 0
    hotplug = vmi(domain={"devices": devices, "memory": {"guest": "4Gi", "maxGuest": "8Gi"}})
    assert ch_overhead(hotplug, NO_DEVICES)["vfio"] == page_tables(8 * GiB) + CH_VFIO_PER_DEVICE * count


def test_libvirts_processes_do_not_run_every_pod_gets_a_small_monitor_and_virt_handlers_runtime_a_vmm_spawner():
    ch = ch_overhead(vmi(), plan_of(vmi()))
    assert ch["virt_launcher_monitor"] == CH_MONITOR
    assert ch["virtlogd"] == ch["virtqemud"] == ch["video"] == 0
    assert ch["launcher"] == CH_LAUNCHER
    for domain in ({"cpu": {"cores": 1, "dedicatedCpuPlacement": True}},
                   {"devices": {"gpus": [{"name": "g", "deviceName": "nvidia.com/T4"}]}},
                   {"memory": {"guest": "1Gi", "reservedOverhead": {"memLock": "Required"}}}):
        ch = ch_overhead(vmi(domain=domain), plan_of(vmi(domain=domain)))  # docs/process-model.md
        assert (ch["virt_launcher_monitor"], ch["virtqemud"], ch["virtlogd"]) == (CH_MONITOR, CH_SPAWNER, 0), domain


def test_video_ram_is_dropped_by_kubevirt_only_when_graphics_are_off():
    off = vmi(domain={"devices": {"autoattachGraphicsDevice": False}})
    assert kubevirt_overhead(off)["video"] == 0
    assert kubevirt_overhead(vmi())["video"] == 32 * MiB


def test_the_ratio_multiplies_everything_but_the_network_in_both_formulas():
    v = vmi(domain={"devices": {"interfaces": [{"name": "a", "binding": {"name": "slirpish"}}]}})
    bindings = {"slirpish": 40 * MiB}
    for formula in (kubevirt_overhead, functools.partial(ch_overhead, plan=NO_DEVICES)):
        plain = formula(v, bindings=bindings)
        doubled = formula(v, ratio=Decimal("2.0"), bindings=bindings)
        backend = plain.total - plain["binding_plugins"]
        assert abs(doubled["ratio"] - backend) <= 1000  # KubeVirt works in whole kB
        assert doubled["binding_plugins"] == 40 * MiB


def test_each_binding_plugin_counts_once_and_unregistered_ones_not_at_all():
    v = vmi(domain={"devices": {"interfaces": [
        {"name": "a", "binding": {"name": "p"}}, {"name": "b", "binding": {"name": "p"}},
        {"name": "c", "binding": {"name": "unknown"}}, {"name": "d", "passt": {}}]}})
    kv = kubevirt_overhead(v, bindings={"p": 7 * MiB})
    assert kv["binding_plugins"] == 7 * MiB
    assert kv["passt"] == 250 * MiB


def test_config_overrides_replace_the_launcher_and_vmm_terms():
    ch = ch_overhead(vmi(), plan_of(vmi()), settings=CHSettings.from_mib(40, 12.5))
    assert ch["launcher"] == 40 * MiB
    assert ch["vmm"] == int(12.5 * MiB)


def test_both_formulas_fill_every_row():
    assert set(ch_overhead(vmi(), plan_of(vmi())).terms) == set(ROW_KEYS) == set(kubevirt_overhead(vmi()).terms)


def test_vmi_fedora_needs_at_most_72_mib_a_quarter_of_kubevirts_qemu_overhead():
    doc = yaml.safe_load(require_shared(KUBEVIRT_EXAMPLES / "vmi-fedora.yaml").read_text())
    fedora = parse_vmi(doc)
    assert ch_overhead(fedora, plan_of(fedora)).total <= 72 * MiB
    assert ch_overhead(fedora, plan_of(fedora)).total * 4 <= kubevirt_overhead(fedora).total


@pytest.mark.parametrize(("version", "expected"), [
    ("v1.10.1", KUBEVIRT_MAIN), ("v1.9.0", KUBEVIRT_V1_9_0), ("v1.9.0-beta.0-1264-gd923fdb815cd", KUBEVIRT_V1_9_0),
    (None, KUBEVIRT_V1_9_0), ("garbage", KUBEVIRT_V1_9_0),
])
def test_unknown_versions_assume_the_smaller_kubevirt_figure(version, expected):
    assert kubevirt_constants_for(version) is expected


def test_the_io_term_counts_the_devices_the_translation_gives_the_vmm():
    # KubeVirt lists a disk for every volume the VMI names no disk for (its defaults webhook adds
    # them, as virt-launcher's converter does): the VMM runs one virtio-blk device per volume,
    # so the term counts the plan's disks, not the spec's list. An SR-IOV NIC is passed through
    # with VFIO (that term counts it), not a virtio-net device.
    volumes_only = parse_vmi(new_vmi("t", with_namespace(None), with_memory_request("1Gi"), with_spec(volumes=[
        {"name": "a", "containerDisk": {"image": "registry:5000/a"}},
        {"name": "b", "emptyDisk": {"capacity": "1Gi"}}])))
    plan = plan_of(volumes_only)
    assert io_devices(plan) == len(plan.config.disks or ()) == 2
    assert ch_overhead(volumes_only, plan)["io"] == 2 * MiB


def test_a_vmi_cloud_hypervisor_cannot_run_has_no_overhead_to_compute():
    with pytest.raises(ValueError, match=r"Cloud Hypervisor cannot run this VMI: .*cdrom"):
        plan_of(parse_vmi(new_vmi("t", with_memory_request("1Gi"), with_domain(devices={
            "disks": [{"name": "cd", "cdrom": {"bus": "sata"}}]}), with_spec(volumes=[
                {"name": "cd", "containerDisk": {"image": "registry:5000/cd"}}]))))
