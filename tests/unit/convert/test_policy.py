"""What virt-handler and the pod's tooling require: refused with a reason, never admitted to fail
later; and what its KVM runtime does to the pod, admitted because the process model serves it."""

from __future__ import annotations

import pytest

from ch_launcher.convert import check, policy
from ch_launcher.convert.migration import configure_migration
from ch_launcher.convert.policy import configure_policy
from tests.builders import new_vmi, with_devices, with_empty_disk, with_memory, with_namespace, with_spec, with_uid
from tests.unit.convert.netbuild import fields, multus, translation, vmi


def refused(body):
    t = translation(body)
    configure_policy(t)
    return t


def with_domain(**domain):
    body = vmi()
    body["spec"]["domain"].update(domain)
    return body


@pytest.mark.parametrize("body", [
    vmi(devices={"gpus": [{"name": "g", "deviceName": "nvidia.com/T4"}]}),
    vmi(devices={"hostDevices": [{"name": "h", "deviceName": "intel.com/qat"}]}),
    vmi([{"name": "s", "sriov": {}}], [multus("s")]),
    with_domain(cpu={"dedicatedCpuPlacement": True}),
    with_domain(cpu={"dedicatedCpuPlacement": True, "realtime": {}}),
    with_domain(memory={"guest": "1Gi", "reservedOverhead": {"memLock": "Required"}}),
], ids=["gpus", "hostDevices", "sriov", "dedicatedCpuPlacement", "realtime", "memLock"])
def test_features_virt_handler_tunes_through_the_vmm_process_are_not_refused(body):
    # docs/process-model.md: the launcher's processes are where virt-handler looks for them
    assert refused(body).problems == []
    assert check(body).allowed, [p.message for p in check(body).problems]


@pytest.mark.parametrize("kind", ["sev", "snp"])
def test_confidential_guests_stay_refused(kind):
    problems = check(with_domain(launchSecurity={kind: {}})).problems
    assert fields(problems) == [f"spec.domain.launchSecurity.{kind}"]


def test_memlock_not_required_is_fine():
    assert refused(with_domain(memory={"guest": "1Gi", "reservedOverhead": {"memLock": "NotRequired"}})).problems == []


@pytest.mark.parametrize("probe", ["livenessProbe", "readinessProbe"])
@pytest.mark.parametrize("kind, body", [("exec", {"command": ["cat", "/tmp/ready"]}), ("guestAgentPing", {})])
def test_probes_that_need_the_guest_agent_are_admitted_with_a_warning_saying_how_to_run_it(probe, kind, body):
    verdict = check(vmi(**{probe: {kind: body, "periodSeconds": 5}}))
    assert verdict.allowed
    warning = [w for w in verdict.warnings if w.field == f"spec.{probe}.{kind}"]
    assert len(warning) == 1
    assert "qemu-ga --method=vsock-listen --path=4294967295:1023" in warning[0].message


@pytest.mark.parametrize("kind, body", [("httpGet", {"port": 80}), ("tcpSocket", {"port": 22})])
def test_probes_the_kubelet_runs_are_fine(kind, body):
    assert refused(vmi(readinessProbe={kind: body})).problems == []


def test_hook_sidecars_are_refused_with_the_annotation_path():
    body = vmi()
    body["metadata"]["annotations"] = {"hooks.kubevirt.io/hookSidecars": '[{"image": "x"}]'}
    t = refused(body)
    assert fields(t.problems) == ["metadata.annotations[hooks.kubevirt.io/hookSidecars]"]


@pytest.mark.parametrize("strategy", ["LiveMigrate", "LiveMigrateIfPossible"])
def test_eviction_by_live_migration_is_admitted_for_a_vmi_cloud_hypervisor_can_migrate(strategy):
    assert refused(vmi(evictionStrategy=strategy)).problems == []


@pytest.mark.parametrize("strategy", ["LiveMigrate", "LiveMigrateIfPossible"])
def test_eviction_by_live_migration_is_refused_with_kubevirts_reason_when_it_cannot(strategy):
    body = vmi(evictionStrategy=strategy, devices={"disks": [{"name": "root", "disk": {}}]},
               volumes=[{"name": "root", "containerDisk": {"image": "quay.io/containerdisks/fedora:41"}}])
    t = translation(body)
    configure_migration(t)
    configure_policy(t)
    assert fields(t.problems) == ["spec.evictionStrategy"]
    message = t.problems[0].message
    assert "DisksNotLiveMigratable: volume 'root' (containerDisk) is local to the pod" in message
    assert "None or External" in message


@pytest.mark.parametrize("strategy", ["None", "External"])
def test_eviction_without_migration_is_fine(strategy):
    assert refused(vmi(evictionStrategy=strategy)).problems == []


def test_starting_paused_is_admitted_with_a_warning_that_the_pause_follows_the_boot():
    t = refused(vmi(startStrategy="Paused"))
    assert t.problems == []
    assert fields(t.warnings) == ["spec.startStrategy"]


def test_a_field_another_configurator_refused_is_not_refused_twice():
    t = translation(vmi(evictionStrategy="LiveMigrate"))
    t.unsupported("spec.evictionStrategy", "refused by another configurator")
    configure_policy(t)
    assert [p.message for p in t.problems] == ["refused by another configurator"]


def test_policy_leaves_the_vm_config_alone():
    t = translation(with_domain(cpu={"dedicatedCpuPlacement": True}))
    before = t.config.to_api()
    configure_policy(t)
    assert t.config.to_api() == before


def _many_disks(n):
    return new_vmi("v", with_namespace("n"), with_uid("u"), with_memory("64Mi"),
                   with_devices(disks=[], autoattachPodInterface=False, autoattachMemBalloon=False),
                   with_spec(volumes=[]), *[with_empty_disk(f"d{i}", "1Mi") for i in range(n)])


def test_a_vmi_with_more_devices_than_a_pci_segment_holds_is_refused_not_failed_at_boot():
    # every VM has a vsock device (the guest agent's) beside its disks
    fits = check(_many_disks(policy.PCI_SLOTS - 1))
    assert fits.allowed and policy.pci_devices_of(fits.plan.config) == policy.PCI_SLOTS
    over = check(_many_disks(policy.PCI_SLOTS))
    assert fields(over.problems) == ["spec.domain.devices"]
    assert over.problems[0].message.startswith(f"spec.domain.devices needs {policy.PCI_SLOTS + 1} PCI devices")
