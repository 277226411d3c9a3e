"""The migration webhook's decisions (`/validate-migration`, admission/migrations.py): what Cloud
Hypervisor cannot migrate is refused when the migration is created, in virt-api's words
(`Cannot migrate VMI, Reason: %s, Message: %s`, code 400, no causes:
kubevirt migration-create-admitter.go@d923fdb815cd); everything else is left alone."""

from __future__ import annotations

import copy

import pytest

from admission import migrations
from admission.review import parse_review
from tests.unit.admission import builders as b
from tests.unit.admission.builders import CH

CONTAINER_DISK_REFUSAL = ("Cannot migrate VMI, Reason: DisksNotLiveMigratable, Message: volume 'containerdisk' "
                          "(containerDisk) is local to the pod and writable: Cloud Hypervisor cannot copy disks "
                          "during a migration")


def running(vmi):
    """The VMI as the API server stores it while it runs."""
    out = copy.deepcopy(vmi)
    out["metadata"]["uid"] = "vmi-uid"
    out["status"] = {"phase": "Running", "nodeName": "node01",
                     "conditions": [{"type": "LiveMigratable", "status": "True"}]}
    return out


def migratable(annotations=CH):
    vmi = b.vmi(annotations=annotations, volumes=[])
    vmi["spec"]["domain"]["devices"] = {"disks": [], "autoattachPodInterface": False}
    return running(vmi)


def judge(vmim, vmi, **review):
    request = parse_review(b.review(vmim, **review))
    first = migrations.wants_vmi(request)
    if not isinstance(first, migrations.VMIName):
        return first.review["response"], first.verdict, None
    outcome = migrations.decide(request, vmi)
    return outcome.review["response"], outcome.verdict, first


def test_a_migration_of_a_vmi_cloud_hypervisor_cannot_migrate_is_refused_in_virt_apis_words():
    response, verdict, named = judge(b.vmim("testvmi"), running(b.vmi(annotations=CH)))
    assert named == migrations.VMIName("default", "testvmi")
    assert verdict == "denied"
    assert response == {"uid": response["uid"], "allowed": False,
                        "status": {"message": CONTAINER_DISK_REFUSAL, "code": 400}}


def test_a_migratable_cloud_hypervisor_vmi_may_migrate():
    response, verdict, _ = judge(b.vmim("testvmi"), migratable())
    assert (response["allowed"], verdict) == (True, "allowed")
    assert set(response) == {"uid", "allowed"}


@pytest.mark.parametrize("annotations", [None, {}, {"kubevirt-ch.io/hypervisor": "qemu"}])
def test_the_migration_of_a_vmi_on_qemu_is_untouched(annotations):
    response, verdict, _ = judge(b.vmim("testvmi"), running(b.vmi(annotations=annotations)))
    assert response == {"uid": response["uid"], "allowed": True} and verdict == "ignored"


def test_what_virt_api_refuses_itself_is_left_to_it():
    assert judge(b.vmim("testvmi"), None)[1] == "ignored", "the VMI does not exist"
    final = running(b.vmi(annotations=CH))
    final["status"]["phase"] = "Succeeded"
    assert judge(b.vmim("testvmi"), final)[1] == "ignored", "a final VMI"
    nameless = b.vmim("testvmi")
    del nameless["spec"]["vmiName"]
    assert judge(nameless, running(b.vmi(annotations=CH)))[1] == "ignored", "vmiName is missing"


def test_only_creation_is_judged():
    vmim = b.vmim("testvmi", name="m")
    for operation, old in (("UPDATE", vmim), ("DELETE", None)):
        assert judge(vmim, running(b.vmi(annotations=CH)), operation=operation, old=old)[1] == "ignored"


def test_the_receiving_side_of_a_decentralized_migration_is_left_to_the_source_side():
    receive = b.vmim("target-vmi", receive={"migrationID": "m-1"})
    assert judge(receive, running(b.vmi(annotations=CH)))[1] == "ignored"
    send = b.vmim("testvmi", sendTo={"migrationID": "m-1", "connectURL": "sync.example:9185"})
    assert judge(send, running(b.vmi(annotations=CH)))[1] == "denied", \
        "Cloud Hypervisor cannot copy the disk there either"


def test_what_only_the_stored_vmi_says_is_judged_too():
    # A PVC's access mode is known from the VMI's status (virt-controller writes it), not at VMI creation.
    vmi = b.vmi(annotations=CH, volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}])
    vmi["spec"]["domain"]["devices"] = {"disks": [{"name": "data", "disk": {"bus": "virtio"}}],
                                        "autoattachPodInterface": False}
    stored = running(vmi)
    stored["status"]["volumeStatus"] = [{"name": "data",
                                         "persistentVolumeClaimInfo": {"accessModes": ["ReadWriteOnce"]}}]
    response, verdict, _ = judge(b.vmim("testvmi"), stored)
    assert verdict == "denied"
    assert response["status"]["message"] == ("Cannot migrate VMI, Reason: DisksNotLiveMigratable, Message: PVC data "
                                             "is not shared: live migration requires that all PVCs be shared "
                                             "(ReadWriteMany)")


def test_several_reasons_are_said_after_the_first():
    assert migrations.refusal([("DisksNotLiveMigratable", "a"), ("VirtIOFSNotLiveMigratable", "b"),
                               ("DisksNotLiveMigratable", "c")]) == (
        "Cannot migrate VMI, Reason: DisksNotLiveMigratable, Message: a, c; VirtIOFSNotLiveMigratable: b")


def test_a_request_that_cannot_be_judged_is_refused_as_the_other_webhooks_refuse_it():
    body = b.review(b.vmim("testvmi"))
    body["request"]["object"] = ["not", "an", "object"]
    outcome = migrations.wants_vmi(parse_review(body))
    assert isinstance(outcome, migrations.Outcome) and outcome.verdict == "invalid"
    assert outcome.review["response"]["status"]["code"] == 400


def test_an_unreadable_vmi_lets_the_migration_through():
    outcome = migrations.unreadable(parse_review(b.review(b.vmim("testvmi"))))
    assert outcome.review["response"]["allowed"] is True and outcome.verdict == "unknown"
