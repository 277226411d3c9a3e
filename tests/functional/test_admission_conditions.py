"""Cluster-wide conditions reach operators, not VMIs: the server reads the KubeVirt CR at start-up
and reports in its log, its /metrics and Events on its Deployment (against a fake API server;
tests/apiserver/ does the same against a real one)."""

from __future__ import annotations

import time

import pytest

from tests.fakes.fake_kube_api import FakeKubeAPI
from tests.functional.admission_harness import CONFIG, AdmissionServer, post_review
from tests.unit.admission import builders as b


def eventually(condition, what, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


@pytest.fixture
def start(tmp_path, tls):
    started = []

    def run(api):
        s = AdmissionServer(["--tls-cert-file", str(tls["cert"]), "--tls-private-key-file", str(tls["key"]),
                             "--config", str(CONFIG), "--kubeconfig", api.kubeconfig,
                             "--namespace", "kubevirt-ch"]).start()
        started.append(s)
        return s

    yield run
    for s in started:
        assert s.stop() == 0, "\n".join(s.log)


@pytest.fixture
def api(tmp_path):
    fake = FakeKubeAPI().start(tmp_path)
    fake.add_deployment("kubevirt-ch", "ch-admission", uid="the-deployment-uid")
    yield fake
    fake.stop()


def test_live_migrate_updates_are_reported_once_to_operators_and_not_on_vmis(api, start, https):
    api.add_kubevirt("v1.9.0", update_methods=["LiveMigrate"])
    server = start(api)
    (event,) = eventually(lambda: api.events("kubevirt-ch"), "the Event")
    # no deployment config in the CR: virt-controller's launcher image is unknown, so /mutate-vmi
    # cannot make running Cloud Hypervisor VMIs current
    message = ("KubeVirt kubevirt/kubevirt has workloadUpdateMethods [LiveMigrate] and virt-controller's launcher "
               "image cannot be read from it (the KubeVirt resource has no status.targetDeploymentConfig or "
               "observedDeploymentConfig): running Cloud Hypervisor VMIs look outdated to its workload updater, "
               "which keeps live-migrating them (docs/operations.md §7)")
    assert (event["type"], event["reason"], event["message"]) == ("Warning", "WorkloadUpdateLiveMigrate", message)
    assert event["involvedObject"] == {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "kubevirt-ch",
                                       "name": "ch-admission", "uid": "the-deployment-uid"}
    assert any(line.endswith(f"WARNING admission: cluster condition WorkloadUpdateLiveMigrate: {message}")
               for line in server.log)
    metrics = https.get(server.url + "/metrics", timeout=5).text
    assert 'ch_admission_cluster_condition{condition="WorkloadUpdateLiveMigrate"} 1.0' in metrics
    assert 'ch_admission_cluster_condition{condition="WorkloadUpdateEvict"} 0.0' in metrics
    answer = post_review(https, server.url, b.review(b.vmi(annotations=b.CH)))
    assert answer["allowed"] is True
    assert not any("workloadUpdate" in w for w in answer.get("warnings", []))
    assert len(api.events("kubevirt-ch")) == 1  # the VMI's own read of the CR found nothing new


def test_a_missing_kubevirt_cr_is_reported_and_refuses_only_cloud_hypervisor_objects(api, start, https):
    server = start(api)
    (event,) = eventually(lambda: api.events("kubevirt-ch"), "the Event")
    assert (event["type"], event["reason"]) == ("Warning", "KubeVirtUnreadable")
    assert event["message"] == ("cannot read KubeVirt kubevirt/kubevirt (KubeVirt kubevirt/kubevirt not found): new "
                                "Cloud Hypervisor VMIs and their launcher pods are refused until it can be read")
    metrics = https.get(server.url + "/metrics", timeout=5).text
    assert 'ch_admission_cluster_condition{condition="KubeVirtUnreadable"} 1.0' in metrics
    assert post_review(https, server.url, b.review(b.vmi(annotations=b.CH)))["allowed"] is False
    assert post_review(https, server.url, b.review(b.vmi()))["allowed"] is True
