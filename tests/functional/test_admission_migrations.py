"""The migration webhook (`/validate-migration`) over HTTPS against a fake Kubernetes API server
(real HTTPS, bearer token, through a kubeconfig): it reads the VMI a migration names and refuses,
in virt-api's words, what Cloud Hypervisor cannot migrate; it lets everything else through,
including when it cannot read the VMI (its failurePolicy is Ignore: the launcher is the backstop)."""

from __future__ import annotations

import copy

import pytest

from tests.builders import with_devices, with_namespace, with_spec, with_status, with_uid
from tests.fakes.fake_kube_api import FakeKubeAPI
from tests.functional.admission_harness import CONFIG, AdmissionServer, post_review
from tests.unit.admission import builders as b

VMI_PATH = "/apis/kubevirt.io/v1/namespaces/ns1/virtualmachineinstances/{}"


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    fake = FakeKubeAPI().start(tmp_path_factory.mktemp("api"))
    fake.add_kubevirt("v1.9.0")
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def server(api, tls):
    s = AdmissionServer(["--tls-cert-file", str(tls["cert"]), "--tls-private-key-file", str(tls["key"]),
                         "--config", str(CONFIG), "--kubeconfig", api.kubeconfig]).start()
    yield s
    assert s.stop() == 0, "\n".join(s.log)


def running_vmi(name, annotations=b.CH, migratable=False):
    movable = [with_spec(volumes=[]), with_devices(disks=[], autoattachPodInterface=False)] if migratable else []
    return b.vmi(*movable, with_namespace("ns1"), with_uid(f"uid-of-{name}"),
                 with_status(phase="Running", nodeName="node01",
                             conditions=[{"type": "LiveMigratable", "status": "True"}]),
                 name=name, annotations=annotations)


def migrate(https, server, vmi_name, **review):
    """`virtctl migrate`: virt-api creates the VMIM (generateName: the request has no name)."""
    vmim = b.vmim(vmi_name)
    vmim["metadata"]["namespace"] = "ns1"
    return post_review(https, server.url, b.review(vmim, namespace="ns1", name="", **review), "/validate-migration")


def metric(https, server, verdict):
    text = https.get(server.url + "/metrics", timeout=5).text
    line = f'ch_admission_requests_total{{path="/validate-migration",verdict="{verdict}"}} '
    return float(next((x.split()[-1] for x in text.splitlines() if x.startswith(line)), "0"))


def test_a_migration_cloud_hypervisor_cannot_carry_out_is_refused_as_virt_api_refuses(api, server, https):
    api.add_vmi(running_vmi("stuck"))
    before = metric(https, server, "denied")
    answer = migrate(https, server, "stuck")
    assert answer == {"uid": answer["uid"], "allowed": False, "status": {
        "code": 400, "message": "Cannot migrate VMI, Reason: DisksNotLiveMigratable, Message: volume 'containerdisk' "
                                "(containerDisk) is local to the pod and writable: Cloud Hypervisor cannot copy disks "
                                "during a migration"}}
    assert api.count("GET", VMI_PATH.format("stuck")) == 1
    assert metric(https, server, "denied") == before + 1
    assert any("/validate-migration denied VirtualMachineInstanceMigration ns1/(generated)" in line
               and "Cannot migrate VMI" in line for line in server.log)
    dry = migrate(https, server, "stuck", dry_run=True)
    assert dry["allowed"] is False and dry["status"] == answer["status"], "a dry run gets the same answer"


def test_a_migratable_vmi_and_a_vmi_on_qemu_may_migrate(api, server, https):
    api.add_vmi(running_vmi("movable", migratable=True))
    api.add_vmi(running_vmi("on-qemu", annotations=None))
    movable = migrate(https, server, "movable")
    assert set(movable) == {"uid", "allowed"} and movable["allowed"] is True
    qemu = migrate(https, server, "on-qemu")
    assert set(qemu) == {"uid", "allowed"} and qemu["allowed"] is True


def test_a_vmi_that_does_not_exist_is_left_to_virt_api(api, server, https):
    answer = migrate(https, server, "nowhere")
    assert answer["allowed"] is True
    assert api.count("GET", VMI_PATH.format("nowhere")) == 1


def test_when_the_vmi_cannot_be_read_the_migration_goes_through_and_the_log_says_why(api, server, https):
    api.add_vmi(running_vmi("unread"))
    before = metric(https, server, "unknown")
    api.fail_with = 503
    try:
        answer = migrate(https, server, "unread")
    finally:
        api.fail_with = None
    assert answer["allowed"] is True
    assert metric(https, server, "unknown") == before + 1
    assert any("cannot judge the migration of VMI unread" in line and "HTTP 503" in line for line in server.log), \
        server.log[-5:]
    assert migrate(https, server, "unread")["allowed"] is False, "judged again once the API server answers"


def test_only_creation_is_judged_and_nothing_is_read_otherwise(api, server, https):
    api.add_vmi(running_vmi("updated"))
    vmim = b.vmim("updated", name="m1")
    vmim["metadata"]["namespace"] = "ns1"
    old = copy.deepcopy(vmim)
    answer = post_review(https, server.url, b.review(vmim, "UPDATE", old, namespace="ns1"), "/validate-migration")
    assert answer["allowed"] is True
    assert api.count("GET", VMI_PATH.format("updated")) == 0
