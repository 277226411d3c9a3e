"""Cloud Hypervisor VMIs are outdated to KubeVirt exactly when their pod runs another ch-launcher
than the configuration names (admission/launcher_status.py), checked against an oracle of
virt-controller and its workload updater (tests/unit/admission/virt_controller.py)."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from admission.cluster import KubeVirtStatus, LauncherImage, kubevirt_launcher_image
from admission.config import parse_config
from admission.launcher_status import IMAGE_ANNOTATION, OUTDATED_LABEL, decide, wants_launcher_image
from admission.outdated import resync_patch, rows
from admission.review import parse_review
from tests.unit.admission.virt_controller import (
    CONTROLLER,
    HANDLER,
    ApiServer,
    VirtController,
    has_outdated_label,
    is_outdated,
    migrate,
    new_vmi,
    set_launcher_container_info,
)

KV = "quay.io/kubevirt/virt-launcher:v1.9.0"           # virt-controller's --launcher-image
KV_NEXT = "quay.io/kubevirt/virt-launcher:v1.9.1"
CH = "ghcr.io/kubevirt-ch/ch-launcher:v0.1.0"           # the configured ch-launcher
CH_NEXT = "ghcr.io/kubevirt-ch/ch-launcher:v0.2.0"
READY = [{"type": "Ready", "status": "True"}]


def config(image: str = CH):
    return parse_config({"launcher": {"image": image, "command": ["/usr/bin/ch-launcher"]}})


def deployment_config(**fields) -> str:
    return json.dumps({"id": "abc", "namespace": "kubevirt", **fields})


def request(vmi, user=CONTROLLER, operation="UPDATE"):
    return parse_review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u1", "operation": operation, "namespace": "default", "name": vmi["metadata"]["name"],
        "userInfo": {"username": user}, "kind": {"group": "kubevirt.io", "version": "v1",
                                                 "kind": "VirtualMachineInstance"},
        "resource": {"group": "kubevirt.io", "version": "v1", "resource": "virtualmachineinstances"},
        "object": vmi, "oldObject": vmi}})


def patch_of(outcome):
    response = outcome.review["response"]
    return json.loads(base64.b64decode(response["patch"])) if "patch" in response else []


def reported(image, phase="Running", labels=None):
    """A VMI as virt-controller writes it for a pod whose compute image is `image`."""
    return set_launcher_container_info(new_vmi(phase=phase, labels=labels), image, KV)


# --- the oracle, against upstream's behaviour --------------------------------------------------


def test_virt_controller_labels_a_pod_image_that_is_not_its_own_and_records_it():
    vmi = set_launcher_container_info(new_vmi(labels={"app": "web"}), CH, KV)
    assert vmi["metadata"]["labels"] == {"app": "web", OUTDATED_LABEL: ""}
    assert vmi["status"]["launcherContainerImageVersion"] == CH
    again = set_launcher_container_info(vmi, KV, KV)
    assert again["metadata"]["labels"] == {"app": "web"}
    assert set_launcher_container_info(new_vmi(), "", KV)["metadata"].get("labels") is None


def test_the_workload_updater_calls_outdated_a_running_vmi_with_another_known_image():
    assert is_outdated(reported(CH), KV)
    assert not is_outdated(reported(KV), KV)
    assert not is_outdated(reported(""), KV)  # not known yet (before the pod, after a migration)
    assert not is_outdated(reported(CH, phase="Failed"), KV)


# --- virt-controller's launcher image, as virt-operator renders its flag ------------------------


@pytest.mark.parametrize("status, image, source", [
    ({"targetDeploymentConfig": deployment_config(registry="quay.io/kubevirt", kubeVirtVersion="v1.9.0")},
     "quay.io/kubevirt/virt-launcher:v1.9.0", "status.targetDeploymentConfig"),
    ({"targetDeploymentConfig": deployment_config(registry="registry.example", imagePrefix="kv-",
                                                  kubeVirtVersion="v1.9.0")},
     "registry.example/kv-virt-launcher:v1.9.0", "status.targetDeploymentConfig"),
    ({"targetDeploymentConfig": deployment_config(registry="quay.io/kubevirt", kubeVirtVersion="v1.9.0",
                                                  virtLauncherImage="mirror.example/launcher@sha256:0123")},
     "mirror.example/launcher@sha256:0123", "status.targetDeploymentConfig"),
    ({"observedDeploymentConfig": deployment_config(registry="quay.io/kubevirt", kubeVirtVersion="v1.8.2")},
     "quay.io/kubevirt/virt-launcher:v1.8.2", "status.observedDeploymentConfig"),
    # during an upgrade: what virt-operator deploys, which the workload updater waits for
    ({"observedDeploymentConfig": deployment_config(registry="quay.io/kubevirt", kubeVirtVersion="v1.8.2"),
      "targetDeploymentConfig": deployment_config(registry="quay.io/kubevirt", kubeVirtVersion="v1.9.0")},
     "quay.io/kubevirt/virt-launcher:v1.9.0", "status.targetDeploymentConfig"),
])
def test_the_launcher_image_is_virt_operators_flag_for_virt_controller(status, image, source):
    assert kubevirt_launcher_image({"status": status}) == LauncherImage(image, source)
    assert KubeVirtStatus.from_cr({"status": {"observedKubeVirtVersion": "v1.9.0", **status}}).launcher_image.image \
        == image


@pytest.mark.parametrize("cr, error", [
    ({}, "the KubeVirt resource has no status"),
    ({"status": {"observedKubeVirtVersion": "v1.9.0"}},
     "the KubeVirt resource has no status.targetDeploymentConfig or observedDeploymentConfig"),
    ({"status": {"targetDeploymentConfig": "{"}}, "status.targetDeploymentConfig is not JSON"),
    ({"status": {"targetDeploymentConfig": "[]"}}, "status.targetDeploymentConfig is not a JSON object"),
    ({"status": {"targetDeploymentConfig": deployment_config()}},
     "status.targetDeploymentConfig names no registry and version"),
])
def test_an_unusable_kubevirt_resource_says_why(cr, error):
    found = kubevirt_launcher_image(cr)
    assert found.image is None and found.error.startswith(error)


# --- the decision -------------------------------------------------------------------------------


def test_a_running_vmi_of_the_configured_launcher_is_written_as_current():
    outcome = decide(request(reported(CH)), config(), LauncherImage(KV))
    assert outcome.verdict == "current"
    assert patch_of(outcome) == [
        {"op": "add", "path": "/metadata/annotations/kubevirt-ch.io~1launcher-image", "value": CH},
        {"op": "replace", "path": "/status/launcherContainerImageVersion", "value": KV},
        {"op": "remove", "path": "/metadata/labels/kubevirt.io~1outdatedLauncherImage"},
    ]
    assert outcome.review["response"]["auditAnnotations"] == {"launcher-image": CH, "reported-as": KV}


def test_a_vmi_whose_pod_runs_another_ch_launcher_stays_outdated_and_says_which():
    outcome = decide(request(reported(CH)), config(CH_NEXT), LauncherImage(KV))
    assert outcome.verdict == "outdated"
    assert patch_of(outcome) == [
        {"op": "add", "path": "/metadata/annotations/kubevirt-ch.io~1launcher-image", "value": CH}]


def test_without_virt_controllers_image_the_write_goes_through_as_sent():
    vmi = reported(CH)
    vmi["metadata"]["annotations"][IMAGE_ANNOTATION] = CH
    for launcher in (None, LauncherImage(None, error="cannot read KubeVirt kubevirt/kubevirt")):
        outcome = decide(request(vmi), config(), launcher)
        assert (outcome.verdict, patch_of(outcome)) == ("unknown", [])


@pytest.mark.parametrize("why, make", [
    ("another writer", lambda: request(reported(CH), user=HANDLER)),
    ("virt-controller of another KubeVirt namespace",
     lambda: request(reported(CH), user="system:serviceaccount:other:kubevirt-controller")),
    ("a VMI on QEMU", lambda: request(set_launcher_container_info(
        {**new_vmi(phase="Running"), "metadata": {"name": "q", "labels": {}}}, CH, KV))),
    ("an Update while Scheduling", lambda: request(reported(CH, phase="Scheduling"))),
    ("a final VMI", lambda: request(reported(CH, phase="Succeeded"))),
    ("the pod's image not known yet", lambda: request(reported("", phase="Running"))),
    ("KubeVirt's own launcher in the pod", lambda: request(reported(KV))),
    ("a creation", lambda: request(reported(CH), operation="CREATE")),
])
def test_everything_else_is_left_alone(why, make):
    req = make()
    outcome = decide(req, config(), LauncherImage(KV))
    assert (outcome.verdict, patch_of(outcome)) == ("ignored", []), why
    if why != "KubeVirt's own launcher in the pod":
        assert not wants_launcher_image(req, config())


def test_the_exact_virt_controller_account_comes_from_the_configuration():
    cfg = parse_config({"launcher": {"image": CH, "command": ["/usr/bin/ch-launcher"]},
                        "kubevirt": {"namespace": "openshift-cnv"}})
    req = request(reported(CH), user="system:serviceaccount:openshift-cnv:kubevirt-controller")
    assert decide(req, cfg, LauncherImage(KV)).verdict == "current"
    assert decide(request(reported(CH)), cfg, LauncherImage(KV)).verdict == "ignored"


# --- stories through the oracle's virt-controller and API server ---------------------------------


def started(api: ApiServer, vc: VirtController, pod_image: str = CH) -> None:
    """A VMI's start as virt-controller and virt-handler write it."""
    vc.reconcile(api, None)                            # Pending, no pod yet
    vc.reconcile(api, pod_image, phase="Scheduling")   # the pod exists
    vc.reconcile(api, pod_image)                       # pod events while it starts
    vc.reconcile(api, pod_image, conditions=READY)
    vc.reconcile(api, pod_image)
    vc.reconcile(api, pod_image, phase="Scheduled")    # the pod runs
    api.update({**api.stored, "status": {**api.stored["status"], "phase": "Running"}}, HANDLER)
    for _ in range(3):
        vc.reconcile(api, pod_image)


def test_a_started_vmi_is_current_and_virt_controllers_further_writes_store_nothing():
    api, vc = ApiServer(new_vmi(), config(), LauncherImage(KV)), VirtController(KV)
    started(api, vc)
    assert not is_outdated(api.stored, KV) and not has_outdated_label(api.stored)
    assert api.stored["metadata"]["annotations"][IMAGE_ANNOTATION] == CH
    assert vc.stalled == 0  # no Update of virt-controller was turned into a no-op
    events, rv, writes = api.events, api.stored["metadata"]["resourceVersion"], vc.writes
    for _ in range(5):
        vc.reconcile(api, CH)
    assert vc.writes == writes + 5      # virt-controller keeps sending its patch...
    assert (api.events, api.stored["metadata"]["resourceVersion"]) == (events, rv)  # ...which stores nothing


def test_while_starting_the_vmi_looks_as_virt_controller_writes_it():
    """In Scheduling the webhook passes virt-controller's Updates through (the workload updater
    does not look at VMIs that are not running, and a rewritten Update could be a no-op)."""
    api, vc = ApiServer(new_vmi(), config(), LauncherImage(KV)), VirtController(KV)
    vc.reconcile(api, CH, phase="Scheduling")
    vc.reconcile(api, CH, conditions=READY)
    assert has_outdated_label(api.stored) and api.calls == 0 and vc.stalled == 0


def test_an_addon_upgrade_makes_the_old_image_vmis_outdated_once():
    old, vc = ApiServer(new_vmi("old"), config(CH), LauncherImage(KV)), VirtController(KV)
    started(old, vc)
    # the add-on now names CH_NEXT; virt-controller's next reconcile (any event, or its resync)
    old.config = config(CH_NEXT)
    vc.reconcile(old, CH)
    assert is_outdated(old.stored, KV) and has_outdated_label(old.stored)
    assert old.stored["metadata"]["annotations"][IMAGE_ANNOTATION] == CH
    # the workload updater migrates it: the target pod runs CH_NEXT
    migrate(old)
    assert not is_outdated(old.stored, KV)
    vc.reconcile(old, CH_NEXT)
    assert not is_outdated(old.stored, KV) and not has_outdated_label(old.stored)
    assert old.stored["metadata"]["annotations"][IMAGE_ANNOTATION] == CH_NEXT
    events = old.events
    for _ in range(3):
        vc.reconcile(old, CH_NEXT)
    assert old.events == events and vc.stalled == 0
    fresh = ApiServer(new_vmi("new"), config(CH_NEXT), LauncherImage(KV))
    started(fresh, VirtController(KV), CH_NEXT)
    assert not is_outdated(fresh.stored, KV)


def test_a_kubevirt_upgrade_leaves_cloud_hypervisor_vmis_current():
    api, vc = ApiServer(new_vmi(), config(), LauncherImage(KV)), VirtController(KV)
    started(api, vc)
    api.launcher, vc = LauncherImage(KV_NEXT), VirtController(KV_NEXT)  # the new virt-controller
    vc.reconcile(api, CH)                                             # its first sync of the VMI
    assert not is_outdated(api.stored, KV_NEXT)
    assert api.stored["status"]["launcherContainerImageVersion"] == KV_NEXT


def test_with_the_webhook_down_the_vmi_merely_looks_outdated_until_virt_controller_writes_again():
    api, vc = ApiServer(new_vmi(), config(), LauncherImage(KV)), VirtController(KV)
    started(api, vc)
    migrate(api)
    api.webhook_up = False
    vc.reconcile(api, CH)
    assert is_outdated(api.stored, KV) and has_outdated_label(api.stored)
    api.webhook_up = True
    vc.reconcile(api, CH)      # nothing differs from what is stored: virt-controller sends nothing
    assert is_outdated(api.stored, KV)
    vc.reconcile(api, CH, conditions=[*READY, {"type": "LiveMigratable", "status": "True"}])
    assert not is_outdated(api.stored, KV)


def test_removing_the_label_makes_virt_controller_write_again():
    """`ch-admission outdated --resync` removes the label and the annotation (a plain metadata
    patch any operator may send); the watch event makes virt-controller reconcile and write."""
    api, vc = ApiServer(new_vmi(), config(), LauncherImage(KV)), VirtController(KV)
    started(api, vc)
    migrate(api)
    api.webhook_up = False
    vc.reconcile(api, CH)
    api.webhook_up = True
    assert [r.mismatch for r in rows([api.stored], api.config)] == [True]
    assert api.patch(resync_patch(api.stored), "kubernetes-admin")
    vc.reconcile(api, CH)
    assert not is_outdated(api.stored, KV) and not has_outdated_label(api.stored)
    assert [r.mismatch for r in rows([api.stored], api.config)] == [False]


def test_after_an_addon_upgrade_a_resync_makes_the_old_image_vmis_outdated_at_once():
    api, vc = ApiServer(new_vmi(), config(CH), LauncherImage(KV)), VirtController(KV)
    started(api, vc)
    api.config = config(CH_NEXT)
    (row,) = rows([api.stored], api.config)
    assert (row.image, row.kubevirt, row.wanted) == (CH, "current", "outdated")
    assert api.patch(resync_patch(api.stored), "kubernetes-admin")
    vc.reconcile(api, CH)
    assert is_outdated(api.stored, KV) and not rows([api.stored], api.config)[0].mismatch


steps = st.lists(st.one_of(
    st.just(("reconcile",)),
    st.tuples(st.just("conditions"), st.sampled_from([[], READY, [*READY, {"type": "Paused", "status": "True"}]])),
    st.tuples(st.just("webhook"), st.booleans()),
    st.tuples(st.just("configure"), st.sampled_from([CH, CH_NEXT])),
    st.just(("migrate",)),
), max_size=25)


@settings(max_examples=150, deadline=None)
@given(steps)
def test_any_history_converges_without_stalls_and_decides_by_the_configured_image(history):
    api, vc = ApiServer(new_vmi(), config(), LauncherImage(KV)), VirtController(KV)
    pod = CH
    started(api, vc, pod)
    for step in history:
        if step[0] == "reconcile":
            vc.reconcile(api, pod)
        elif step[0] == "conditions":
            vc.reconcile(api, pod, conditions=step[1])
        elif step[0] == "webhook":
            api.webhook_up = step[1]
        elif step[0] == "configure":
            api.config = config(step[1])
        else:  # a migration into a pod of the image configured now
            migrate(api)
            pod = api.config.launcher.image
            vc.reconcile(api, pod)
    assert vc.stalled == 0
    # with the webhook up, virt-controller's next write decides, and after it nothing is stored
    api.webhook_up = True
    vc.reconcile(api, pod, conditions=[{"type": "Probe", "status": str(api.events)}])
    assert is_outdated(api.stored, KV) == (pod != api.config.launcher.image)
    assert has_outdated_label(api.stored) == (pod != api.config.launcher.image)
    events = api.events
    vc.reconcile(api, pod)
    vc.reconcile(api, pod)
    assert api.events == events


def test_the_stored_managed_fields_are_put_back_only_when_the_write_changes_nothing_else():
    """The API server stamps virt-controller's managedFields entry before admission; a rewritten
    patch that changes nothing must not be stored for that stamp alone."""
    stored = set_launcher_container_info(new_vmi(phase="Running", labels={"app": "web"}), KV, KV)
    stored["metadata"]["annotations"][IMAGE_ANNOTATION] = CH
    stored["metadata"]["managedFields"] = [{"manager": "virt-controller", "operation": "Update", "time": "T1"}]
    sent = set_launcher_container_info(stored, CH, KV)
    sent["metadata"]["managedFields"] = [{"manager": "virt-controller", "operation": "Update", "time": "T2"}]
    review = request(sent)
    review.raw["oldObject"] = stored
    review = parse_review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": review.raw})
    ops = patch_of(decide(review, config(), LauncherImage(KV)))
    assert {"op": "replace", "path": "/metadata/managedFields", "value": stored["metadata"]["managedFields"]} in ops
    changed = {**sent, "status": {**sent["status"], "conditions": READY}}
    raw = {**review.raw, "object": changed}
    ops = patch_of(decide(parse_review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                        "request": raw}),
                          config(), LauncherImage(KV)))
    assert [op["path"] for op in ops] == ["/status/launcherContainerImageVersion",
                                          "/metadata/labels/kubevirt.io~1outdatedLauncherImage"]
