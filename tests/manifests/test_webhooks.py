"""The two webhook configurations: what reaches the server, and how it fails."""

from __future__ import annotations

import pytest

from admission import cli as admission_cli
from admission.selection import target
from tests.manifests import samples
from tests.manifests.cel import old_object_outside_update, unguarded_accesses, webhook_matches
from tests.manifests.render import one

VALIDATOR = "kubevirt-ch-validator"
MUTATOR = "kubevirt-ch-launcher-mutator"
VALIDATING_WEBHOOKS = {  # webhook name -> (kind, group, version, resource)
    "virtualmachineinstances.validator.kubevirt-ch.io": ("VirtualMachineInstance", "kubevirt.io", "v1",
                                                         "virtualmachineinstances"),
    "virtualmachines.validator.kubevirt-ch.io": ("VirtualMachine", "kubevirt.io", "v1", "virtualmachines"),
    "replicasets.validator.kubevirt-ch.io": ("VirtualMachineInstanceReplicaSet", "kubevirt.io", "v1",
                                             "virtualmachineinstancereplicasets"),
    "pools.validator.kubevirt-ch.io": ("VirtualMachinePool", "pool.kubevirt.io", "v1beta1", "virtualmachinepools"),
}
SKIPPED_NAMESPACES = {"kubevirt-ch", "kube-system", "kube-public", "kube-node-lease"}


def all_webhooks(objects):
    return [hook for o in objects if o["kind"].endswith("WebhookConfiguration") for hook in o["webhooks"]]


def validating(objects):
    return {h["name"]: h for h in one(objects, "ValidatingWebhookConfiguration", VALIDATOR)["webhooks"]}


def mutating(objects):
    return one(objects, "MutatingWebhookConfiguration", MUTATOR)["webhooks"]


def test_the_webhook_configurations_have_the_shared_names(webhooks):
    assert set(validating(webhooks)) == set(VALIDATING_WEBHOOKS)
    assert [h["name"] for h in mutating(webhooks)] == ["launcher-pods.mutator.kubevirt-ch.io"]


def test_the_server_keeps_the_ca_bundle_of_exactly_these_configurations(webhooks):
    """--webhook-configurations (the server's default) names the two objects installed."""
    names = {o["metadata"]["name"] for o in webhooks}
    assert names == set(admission_cli.DEFAULT_WEBHOOK_CONFIGURATIONS.split(","))


def test_every_webhook_fails_closed_quickly_and_without_side_effects(default_install):
    hooks = all_webhooks(default_install)
    assert len(hooks) == 5
    for hook in hooks:
        assert hook["failurePolicy"] == "Fail", hook["name"]  # Ignore would start CH VMIs on QEMU
        assert hook["sideEffects"] == "None", hook["name"]
        assert 1 <= hook["timeoutSeconds"] <= 5, hook["name"]
        assert hook["admissionReviewVersions"] == ["v1"], hook["name"]
        assert hook["matchPolicy"] == "Equivalent", hook["name"]


def test_every_webhook_calls_the_addon_service_on_the_servers_paths(default_install):
    service = one(default_install, "Service", "ch-admission")
    port = service["spec"]["ports"][0]
    assert port["port"] == 443 and port["targetPort"] == admission_cli.DEFAULT_PORT
    for hook in all_webhooks(default_install):
        svc = hook["clientConfig"]["service"]
        assert (svc["namespace"], svc["name"], svc["port"]) == ("kubevirt-ch", admission_cli.DEFAULT_SERVICE, 443)
        assert "url" not in hook["clientConfig"]
        expected = "/mutate-pod" if hook["name"].startswith("launcher-pods.") else "/validate"
        assert svc["path"] == expected, hook["name"]


def test_validating_webhooks_see_create_and_update_of_their_kind_only(webhooks):
    for name, hook in validating(webhooks).items():
        _, group, version, resource = VALIDATING_WEBHOOKS[name]
        assert hook["rules"] == [{"apiGroups": [group], "apiVersions": [version], "resources": [resource],
                                  "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"}]
        assert "objectSelector" not in hook  # annotations are not labels: matchConditions select


def test_the_pod_mutator_sees_only_the_creation_of_launcher_pods(webhooks):
    (hook,) = mutating(webhooks)
    assert hook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                              "operations": ["CREATE"], "scope": "Namespaced"}]
    # hotplug attachment pods are labelled kubevirt.io: hotplug-disk and stay away
    assert hook["objectSelector"] == {"matchLabels": {"kubevirt.io": "virt-launcher"}}
    assert hook["reinvocationPolicy"] == "IfNeeded"


def test_the_addon_and_system_namespaces_are_skipped(default_install):
    for hook in all_webhooks(default_install):
        (expr,) = hook["namespaceSelector"]["matchExpressions"]
        assert expr["key"] == "kubernetes.io/metadata.name" and expr["operator"] == "NotIn", hook["name"]
        assert set(expr["values"]) == SKIPPED_NAMESPACES, hook["name"]


def test_match_conditions_test_the_annotation_key_and_value(default_install):
    for hook in all_webhooks(default_install):
        (cond,) = hook["matchConditions"]
        assert f"'{samples.KEY}'" in cond["expression"], hook["name"]
        assert "'cloud-hypervisor'" in cond["expression"], hook["name"]


def test_match_conditions_guard_every_level_and_read_old_object_only_on_update(default_install):
    """cel-go errors on a missing field, and an error follows failurePolicy: Fail, which would
    refuse every VMI (or launcher pod) that lacks, say, annotations. oldObject is null on CREATE."""
    for hook in all_webhooks(default_install):
        (cond,) = hook["matchConditions"]
        assert unguarded_accesses(cond["expression"]) == [], hook["name"]
        assert old_object_outside_update(cond["expression"]) == [], hook["name"]


def test_the_guard_checker_finds_an_unguarded_read():
    """Guards the test above."""
    assert unguarded_accesses("has(object.spec.template.metadata) && object.spec.template.metadata.x == 1")
    assert unguarded_accesses("has(object.metadata.annotations) && 'k' in object.metadata.annotations") == []
    assert old_object_outside_update("has(oldObject.metadata.annotations)")
    assert old_object_outside_update("(request.operation == 'UPDATE' && has(oldObject.spec))") == []


@pytest.mark.parametrize("kind,obj,selected", samples.SELECTED_ON_CREATE)
def test_creation_reaches_the_server_exactly_when_cloud_hypervisor_is_selected(webhooks, kind, obj, selected):
    hooks = [h for h in validating(webhooks).values() if VALIDATING_WEBHOOKS[h["name"]][0] == kind]
    hooks += mutating(webhooks) if kind == "Pod" else []
    (hook,) = hooks
    assert webhook_matches(hook, kind, obj) is selected


@pytest.mark.parametrize("kind,obj", samples.OWNER_ANNOTATED_ON_ITSELF)
def test_owners_annotated_on_themselves_reach_the_server_so_it_can_say_where_the_annotation_goes(
        webhooks, kind, obj):
    (hook,) = [h for h in validating(webhooks).values() if VALIDATING_WEBHOOKS[h["name"]][0] == kind]
    assert webhook_matches(hook, kind, obj)


@pytest.mark.parametrize("kind,make", [
    ("VirtualMachineInstance", samples.vmi), ("VirtualMachine", samples.vm),
    ("VirtualMachineInstanceReplicaSet", samples.replicaset), ("VirtualMachinePool", samples.pool),
])
def test_updates_that_add_remove_or_keep_the_selection_reach_the_server(webhooks, kind, make):
    (hook,) = [h for h in validating(webhooks).values() if VALIDATING_WEBHOOKS[h["name"]][0] == kind]
    ch, plain, other = make(samples.CH), make(), make(samples.OTHER)
    assert webhook_matches(hook, kind, ch, old=plain, operation="UPDATE")       # added
    assert webhook_matches(hook, kind, plain, old=ch, operation="UPDATE")       # removed
    assert webhook_matches(hook, kind, other, old=ch, operation="UPDATE")       # changed
    assert webhook_matches(hook, kind, ch, old=ch, operation="UPDATE")          # kept (spec may change)
    assert not webhook_matches(hook, kind, plain, old=plain, operation="UPDATE")
    assert not webhook_matches(hook, kind, other, old=plain, operation="UPDATE")


def test_launcher_pods_of_other_vmis_never_reach_the_server(webhooks):
    (hook,) = mutating(webhooks)
    for anns in (None, {}, samples.OTHER, samples.UNRELATED):
        assert not webhook_matches(hook, "Pod", samples.launcher_pod(anns))


@pytest.mark.parametrize("kind,obj", [(k, o) for k, o, _ in samples.SELECTED_ON_CREATE if k != "Pod"]
                         + samples.OWNER_ANNOTATED_ON_ITSELF)
def test_the_webhooks_send_exactly_what_the_server_treats_as_selected(webhooks, kind, obj):
    """The matchConditions and the server's own selection (admission/selection.py) agree: nothing
    the server would check is kept from it, and nothing it ignores is sent."""
    (hook,) = [h for h in validating(webhooks).values() if VALIDATING_WEBHOOKS[h["name"]][0] == kind]
    assert webhook_matches(hook, kind, obj) is target(kind, obj).selected
