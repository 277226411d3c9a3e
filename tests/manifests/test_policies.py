"""The ValidatingAdmissionPolicies: the uninstall guard and the skipped-namespaces policy."""

from __future__ import annotations

import pytest

from tests.manifests import samples
from tests.manifests.cel import old_object_outside_update, policy_decision, unguarded_accesses
from tests.manifests.render import one

KINDS_AND_MAKERS = [
    ("VirtualMachineInstance", samples.vmi), ("VirtualMachine", samples.vm),
    ("VirtualMachineInstanceReplicaSet", samples.replicaset), ("VirtualMachinePool", samples.pool),
]


@pytest.fixture
def guard_policy(guard):
    return one(guard, "ValidatingAdmissionPolicy", "kubevirt-ch-guard")


@pytest.fixture
def unserved_policy(default_install):
    return one(default_install, "ValidatingAdmissionPolicy", "kubevirt-ch-unserved-namespaces")


def expressions(policy):
    spec = policy["spec"]
    for section in ("matchConditions", "variables", "validations"):
        for item in spec.get(section, []):
            yield f"{section}/{item.get('name', item['expression'][:20])}", item["expression"]


def test_policies_fail_closed_and_deny(guard, default_install):
    for objects, name in ((guard, "kubevirt-ch-guard"), (default_install, "kubevirt-ch-unserved-namespaces")):
        policy = one(objects, "ValidatingAdmissionPolicy", name)
        binding = one(objects, "ValidatingAdmissionPolicyBinding", name)
        assert policy["spec"]["failurePolicy"] == "Fail"
        assert binding["spec"]["policyName"] == name
        assert binding["spec"]["validationActions"] == ["Deny"]


def test_the_guard_binds_in_every_namespace(guard):
    binding = one(guard, "ValidatingAdmissionPolicyBinding", "kubevirt-ch-guard")
    assert "matchResources" not in binding["spec"]


def test_the_unserved_namespaces_policy_covers_exactly_the_namespaces_the_webhooks_skip(default_install):
    binding = one(default_install, "ValidatingAdmissionPolicyBinding", "kubevirt-ch-unserved-namespaces")
    (expr,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert expr["key"] == "kubernetes.io/metadata.name" and expr["operator"] == "In"
    for hook in (h for o in default_install if o["kind"].endswith("WebhookConfiguration") for h in o["webhooks"]):
        (skipped,) = hook["namespaceSelector"]["matchExpressions"]
        assert set(skipped["values"]) == set(expr["values"]), hook["name"]


def test_both_policies_select_the_same_objects(guard_policy, unserved_policy):
    for key in ("matchConstraints", "matchConditions", "variables"):
        assert guard_policy["spec"][key] == unserved_policy["spec"][key], key
    assert [v["expression"] for v in guard_policy["spec"]["validations"]] == \
        [v["expression"] for v in unserved_policy["spec"]["validations"]]


def test_policies_guard_every_level_and_read_old_object_only_on_update(guard_policy, unserved_policy):
    for policy in (guard_policy, unserved_policy):
        for where, expr in expressions(policy):
            assert unguarded_accesses(expr) == [], where
            assert old_object_outside_update(expr) == [], where


def test_the_guard_watches_creation_of_kubevirt_objects_and_launcher_pods(guard_policy):
    rules = guard_policy["spec"]["matchConstraints"]["resourceRules"]
    seen = {(g, r): tuple(rule["operations"]) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    assert seen == {
        ("kubevirt.io", "virtualmachineinstances"): ("CREATE", "UPDATE"),
        ("kubevirt.io", "virtualmachines"): ("CREATE", "UPDATE"),
        ("kubevirt.io", "virtualmachineinstancereplicasets"): ("CREATE", "UPDATE"),
        ("pool.kubevirt.io", "virtualmachinepools"): ("CREATE", "UPDATE"),
        ("", "pods"): ("CREATE",),
    }


@pytest.mark.parametrize("kind,obj,selected", samples.SELECTED_ON_CREATE)
def test_the_guard_refuses_creating_exactly_what_would_run_on_cloud_hypervisor(guard_policy, kind, obj, selected):
    decision = policy_decision(guard_policy, kind, obj)
    assert decision.allowed is not selected
    if selected:
        assert "not installed" in decision.message and "remove the annotation" in decision.message
        assert samples.KEY in decision.message


@pytest.mark.parametrize("kind,obj", samples.OWNER_ANNOTATED_ON_ITSELF)
def test_the_guard_allows_owners_whose_vmis_would_not_select_cloud_hypervisor(guard_policy, kind, obj):
    assert policy_decision(guard_policy, kind, obj).allowed


def test_the_guard_leaves_pods_other_than_launcher_pods_alone(guard_policy):
    pod = samples.launcher_pod(samples.CH, labels={"kubevirt.io": "hotplug-disk"})
    assert not policy_decision(guard_policy, "Pod", pod).matched
    assert not policy_decision(guard_policy, "Pod", samples.launcher_pod(samples.CH, labels={})).matched


@pytest.mark.parametrize("kind,make", KINDS_AND_MAKERS)
def test_the_guard_never_refuses_updates_of_existing_cloud_hypervisor_objects(guard_policy, kind, make):
    """KubeVirt keeps updating VMIs and VMs (labels, finalizers); refusing would leave them stuck."""
    ch = make(samples.CH)
    relabelled = make(samples.CH)
    relabelled["metadata"]["labels"] = {"kubevirt.io/outdatedLauncherImage": ""}
    relabelled["metadata"]["finalizers"] = []
    assert policy_decision(guard_policy, kind, relabelled, old=ch, operation="UPDATE").allowed
    assert policy_decision(guard_policy, kind, make(), old=ch, operation="UPDATE").allowed  # back to QEMU


@pytest.mark.parametrize("kind,make", KINDS_AND_MAKERS)
def test_the_guard_refuses_updates_that_add_the_selection(guard_policy, kind, make):
    assert not policy_decision(guard_policy, kind, make(samples.CH), old=make(), operation="UPDATE").allowed


@pytest.mark.parametrize("kind,obj,selected", samples.SELECTED_ON_CREATE)
def test_skipped_namespaces_refuse_cloud_hypervisor_objects_and_say_why(unserved_policy, kind, obj, selected):
    decision = policy_decision(unserved_policy, kind, obj, namespace="kube-system")
    assert decision.allowed is not selected
    if selected:
        assert "not served in namespace kube-system" in decision.message
