"""Which VMIs Cloud Hypervisor can live-migrate: KubeVirt's reasons, nothing refused."""

from __future__ import annotations

import pytest

from ch_launcher.convert import check
from ch_launcher.convert.migration import blockers_text, configure_migration
from tests.unit.convert.netbuild import translation, vmi


def blockers(body, **status):
    if status:
        body["status"] = status
    t = translation(body)
    configure_migration(t)
    assert t.problems == [], "migratability never refuses a VMI"
    return t.migration_blockers


def with_volume(volume, disk=None):
    return vmi(devices={"disks": [disk or {"name": volume["name"], "disk": {}}]}, volumes=[volume])


def test_a_vmi_without_disks_or_with_generated_read_only_volumes_migrates():
    assert blockers(vmi()) == []
    for source in ({"cloudInitNoCloud": {"userData": "#cloud-config\\n"}}, {"configMap": {"name": "c"}},
                   {"secret": {"secretName": "s"}}, {"serviceAccount": {"serviceAccountName": "sa"}}):
        assert blockers(with_volume({"name": "v", **source})) == [], source


@pytest.mark.parametrize("source, kind", [
    ({"containerDisk": {"image": "quay.io/containerdisks/fedora:41"}}, "containerDisk"),
    ({"emptyDisk": {"capacity": "1Gi"}}, "emptyDisk"),
    ({"ephemeral": {"persistentVolumeClaim": {"claimName": "base"}}}, "ephemeral"),
])
def test_a_writable_local_disk_cannot_migrate(source, kind):
    found = blockers(with_volume({"name": "root", **source}))
    assert found == [("DisksNotLiveMigratable", (f"volume 'root' ({kind}) is local to the pod and writable: Cloud "
                                                 "Hypervisor cannot copy disks during a migration"))]


def test_a_read_only_container_disk_migrates():
    body = with_volume({"name": "iso", "containerDisk": {"image": "quay.io/x/iso:1"}},
                       {"name": "iso", "disk": {"readonly": True}})
    assert blockers(body) == []


def test_a_host_disk_must_be_shared():
    assert blockers(with_volume({"name": "h",
                                 "hostDisk": {"path": "/data/h.img", "type": "Disk", "shared": True}})) == []
    found = blockers(with_volume({"name": "h", "hostDisk": {"path": "/data/h.img", "type": "Disk"}}))
    assert [r for r, _ in found] == ["DisksNotLiveMigratable"]


def test_a_pvc_must_be_read_write_many_when_the_status_says_what_it_is():
    body = with_volume({"name": "data", "persistentVolumeClaim": {"claimName": "data"}})
    assert blockers(body) == [], "at admission the access mode is unknown: virt-handler's own rule decides"
    rwo = {"volumeStatus": [{"name": "data", "persistentVolumeClaimInfo": {"accessModes": ["ReadWriteOnce"]}}]}
    assert blockers(with_volume({"name": "data", "persistentVolumeClaim": {"claimName": "data"}}), **rwo) == [
        ("DisksNotLiveMigratable", ("PVC data is not shared: live migration requires that all PVCs be shared "
                                    "(ReadWriteMany)"))]
    rwx = {"volumeStatus": [{"name": "data", "persistentVolumeClaimInfo": {"accessModes": ["ReadWriteMany"]}}]}
    assert blockers(with_volume({"name": "data", "persistentVolumeClaim": {"claimName": "data"}}), **rwx) == []


def test_virtiofs_and_pod_network_bridge_cannot_migrate():
    fs = blockers(vmi(devices={"filesystems": [{"name": "share", "virtiofs": {}}]}))
    assert [r for r, _ in fs] == ["VirtIOFSNotLiveMigratable"]
    bridge = blockers(vmi([{"name": "default", "bridge": {}}]))
    assert [r for r, _ in bridge] == ["InterfaceNotLiveMigratable"]
    for value in ("true", "", "false"):  # VerifyVMIMigratable checks only that the annotation is there
        allowed = vmi([{"name": "default", "bridge": {}}])
        allowed["metadata"]["annotations"] = {"kubevirt.io/allow-pod-bridge-network-live-migration": value}
        assert blockers(allowed) == [], value


def test_the_reasons_read_as_kubevirts_condition_reasons():
    text = blockers_text([("DisksNotLiveMigratable", "a"), ("VirtIOFSNotLiveMigratable", "b"),
                          ("DisksNotLiveMigratable", "c")])
    assert text == "DisksNotLiveMigratable: a, c; VirtIOFSNotLiveMigratable: b"


def test_the_plan_carries_the_verdict_and_the_vmi_still_runs():
    body = with_volume({"name": "root", "containerDisk": {"image": "quay.io/containerdisks/fedora:41"}})
    verdict = check(body)
    assert verdict.allowed
    assert [r for r, _ in verdict.plan.migration_blockers] == ["DisksNotLiveMigratable"]
