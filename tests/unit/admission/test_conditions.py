"""Cluster-wide conditions (admission/cluster.py) and how they reach operators (admission/report.py)."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry, Gauge

from admission.cluster import CONDITIONS, Condition, KubeVirtStatus, LauncherImage, conditions
from admission.report import ConditionReporter, Event, EventPoster
from admission.versions import VersionRange

SUPPORTED = VersionRange.parse(">=1.8.0, <1.10.0")
WHERE = "kubevirt/kubevirt"


def names(fetched, effective=None):
    return [c.name for c in conditions(fetched, effective or fetched, SUPPORTED, WHERE)]


def test_a_default_kubevirt_in_range_raises_no_condition():
    assert names(KubeVirtStatus(version="v1.9.0")) == []


@pytest.mark.parametrize("methods, expected", [
    (("LiveMigrate",), ["WorkloadUpdateLiveMigrate"]),
    (("Evict",), ["WorkloadUpdateEvict"]),
    (("LiveMigrate", "Evict"), ["WorkloadUpdateEvict", "WorkloadUpdateLiveMigrate"]),
])
def test_the_workload_update_methods_are_conditions(methods, expected):
    found = conditions(KubeVirtStatus(version="v1.9.0", update_methods=methods), KubeVirtStatus(
        version="v1.9.0", update_methods=methods), SUPPORTED, WHERE)
    assert [c.name for c in found] == expected
    shown = "[" + ", ".join(methods) + "]"
    for c in found:
        assert c.message.startswith(f"KubeVirt kubevirt/kubevirt has workloadUpdateMethods {shown} and "
                                    f"virt-controller's launcher image cannot be read from it (not read): ")
        assert c.message.endswith("(docs/operations.md §7)")


@pytest.mark.parametrize("methods", [("LiveMigrate",), ("Evict",), ("LiveMigrate", "Evict")])
def test_the_workload_update_methods_concern_nobody_while_the_launcher_image_is_known(methods):
    """/mutate-vmi keeps running Cloud Hypervisor VMIs current (launcher_status.py)."""
    known = KubeVirtStatus(version="v1.9.0", update_methods=methods,
                           launcher_image=LauncherImage("quay.io/kubevirt/virt-launcher:v1.9.0"))
    assert conditions(known, known, SUPPORTED, WHERE) == []


def test_an_unreadable_kubevirt_cr_says_what_is_refused():
    (c,) = conditions(KubeVirtStatus(error="KubeVirt kubevirt/kubevirt not found"),
                      KubeVirtStatus(error="KubeVirt kubevirt/kubevirt not found"), SUPPORTED, WHERE)
    assert c == Condition("KubeVirtUnreadable", "cannot read KubeVirt kubevirt/kubevirt (KubeVirt kubevirt/kubevirt "
                          "not found): new Cloud Hypervisor VMIs and their launcher pods are refused until it can "
                          "be read")


def test_a_failed_refresh_keeps_the_last_version_and_says_so():
    good = KubeVirtStatus(version="v1.9.0", update_methods=("Evict",))
    found = conditions(KubeVirtStatus(error="HTTP 503: unavailable"), good, SUPPORTED, WHERE)
    assert [c.name for c in found] == ["KubeVirtUnreadable", "WorkloadUpdateEvict"]
    assert found[0].message.endswith("(HTTP 503: unavailable): the last version read, v1.9.0, stays in use")


def test_a_kubevirt_outside_the_supported_range_is_a_condition():
    (c,) = conditions(KubeVirtStatus(version="v1.10.1"), KubeVirtStatus(version="v1.10.1"), SUPPORTED, WHERE)
    assert c.name == "KubeVirtVersionUnsupported"
    assert c.message == ("KubeVirt kubevirt/kubevirt: Cloud Hypervisor is not available on KubeVirt v1.10.1: this "
                         "kubevirt-ch release supports KubeVirt >=1.8.0, <1.10.0; new Cloud Hypervisor VMIs and "
                         "their launcher pods are refused")


def gauge():
    return Gauge("c", "test", ["condition"], registry=CollectorRegistry())


def value(g, name):
    (sample,) = [s for s in g.collect()[0].samples if s.labels == {"condition": name}]
    return sample.value


def test_the_reporter_logs_and_posts_each_change_once_and_keeps_the_gauge(caplog):
    g = gauge()
    reporter = ConditionReporter(g)
    assert [value(g, n) for n in CONDITIONS] == [0, 0, 0, 0]
    live = Condition("WorkloadUpdateLiveMigrate", "live-migrating")
    with caplog.at_level(logging.INFO, logger="admission"):
        assert reporter.update([live]) == [Event("Warning", "WorkloadUpdateLiveMigrate", "live-migrating")]
        assert reporter.update([live]) == []  # unchanged: no second log line, no second Event
        assert reporter.update([]) == [Event("Normal", "WorkloadUpdateLiveMigrateResolved",
                                             "no longer: live-migrating")]
    assert [r.getMessage() for r in caplog.records] == [
        "cluster condition WorkloadUpdateLiveMigrate: live-migrating",
        "cluster condition WorkloadUpdateLiveMigrate no longer holds (was: live-migrating)"]
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]
    reporter.update([live])
    assert value(g, "WorkloadUpdateLiveMigrate") == 1 and value(g, "WorkloadUpdateEvict") == 0


def test_a_changed_message_is_a_new_report():
    reporter = ConditionReporter(gauge())
    reporter.update([Condition("KubeVirtUnreadable", "HTTP 403")])
    assert reporter.update([Condition("KubeVirtUnreadable", "HTTP 503")]) == [
        Event("Warning", "KubeVirtUnreadable", "HTTP 503")]


class RecordingKube:
    def __init__(self, uid_error=None, post_error=None):
        self.posted, self.uid_error, self.post_error = [], uid_error, post_error

    def get_deployment_uid(self, namespace, name):
        if self.uid_error:
            raise self.uid_error
        return "deployment-uid"

    def create_event(self, namespace, body):
        if self.post_error:
            raise self.post_error
        self.posted.append((namespace, body))


def test_events_are_about_the_servers_deployment():
    kube = RecordingKube()
    EventPoster(kube, "kubevirt-ch", "ch-admission").post([Event("Warning", "WorkloadUpdateEvict", "evicts")])
    ((namespace, body),) = kube.posted
    assert namespace == "kubevirt-ch"
    assert body["involvedObject"] == {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "kubevirt-ch",
                                      "name": "ch-admission", "uid": "deployment-uid"}
    assert (body["type"], body["reason"], body["message"]) == ("Warning", "WorkloadUpdateEvict", "evicts")
    assert body["source"]["component"] == "ch-admission" and body["count"] == 1
    assert body["metadata"] == {"generateName": "ch-admission.", "namespace": "kubevirt-ch"}


def test_an_event_that_cannot_be_posted_is_logged_and_dropped(caplog):
    from admission.kube import KubeError
    kube = RecordingKube(uid_error=KubeError(403, "forbidden"), post_error=KubeError(403, "events is forbidden"))
    with caplog.at_level(logging.WARNING, logger="admission"):
        EventPoster(kube, "kubevirt-ch", "ch-admission").post([Event("Warning", "WorkloadUpdateEvict", "evicts")])
    assert caplog.records[-1].getMessage() == ("cannot post the Event WorkloadUpdateEvict about deployment "
                                               "kubevirt-ch/ch-admission: events is forbidden")
