"""The two webhook configurations: what reaches the server, and how it fails.

Five webhooks judge what users create (the validators and the launcher-pod mutator: failurePolicy
Fail, selected by the annotation); launcher-status rewrites virt-controller's own VMI writes, and
the migration validator judges the creation of migrations (both failurePolicy Ignore, tests at
the end)."""

from __future__ import annotations

import copy

import pytest

from admission import cli as admission_cli
from admission.selection import target
from tests.builders import apply, with_labels, with_status
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


MIGRATION_WEBHOOK = "migrations.validator.kubevirt-ch.io"


def validating(objects):
    """The validators of VMI-bearing objects (the configuration's other webhook is `migration_webhook()`)."""
    return {h["name"]: h for h in one(objects, "ValidatingWebhookConfiguration", VALIDATOR)["webhooks"]
            if h["name"] != MIGRATION_WEBHOOK}


def migration_webhook(objects):
    (hook,) = [h for h in one(objects, "ValidatingWebhookConfiguration", VALIDATOR)["webhooks"]
               if h["name"] == MIGRATION_WEBHOOK]
    return hook


STATUS_WEBHOOK = "launcher-status.mutator.kubevirt-ch.io"


def mutating(objects):
    """The launcher-pod mutator (the configuration's other webhook is `status_webhook()`)."""
    return [h for h in one(objects, "MutatingWebhookConfiguration", MUTATOR)["webhooks"] if h["name"] != STATUS_WEBHOOK]


def status_webhook(objects):
    (hook,) = [h for h in one(objects, "MutatingWebhookConfiguration", MUTATOR)["webhooks"]
               if h["name"] == STATUS_WEBHOOK]
    return hook


def gatekeepers(objects):
    """The webhooks that judge what users create: all but the launcher-status and migration ones."""
    return [h for h in all_webhooks(objects) if h["name"] not in (STATUS_WEBHOOK, MIGRATION_WEBHOOK)]


def test_the_webhook_configurations_have_the_shared_names(webhooks):
    assert set(validating(webhooks)) == set(VALIDATING_WEBHOOKS)
    assert [h["name"] for h in one(webhooks, "ValidatingWebhookConfiguration", VALIDATOR)["webhooks"]][-1] == \
        MIGRATION_WEBHOOK
    assert [h["name"] for h in one(webhooks, "MutatingWebhookConfiguration", MUTATOR)["webhooks"]] == \
        ["launcher-pods.mutator.kubevirt-ch.io", STATUS_WEBHOOK]


def test_the_server_keeps_the_ca_bundle_of_exactly_these_configurations(webhooks):
    """--webhook-configurations (the server's default) names the two objects installed."""
    names = {o["metadata"]["name"] for o in webhooks}
    assert names == set(admission_cli.DEFAULT_WEBHOOK_CONFIGURATIONS.split(","))


def test_every_webhook_fails_closed_quickly_and_without_side_effects(default_install):
    hooks = gatekeepers(default_install)
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
        expected = {"launcher-pods.mutator.kubevirt-ch.io": "/mutate-pod", STATUS_WEBHOOK: "/mutate-vmi",
                    MIGRATION_WEBHOOK: "/validate-migration"}.get(hook["name"], "/validate")
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


def selection(hook):
    (cond,) = [c for c in hook["matchConditions"] if c["name"] == "selects-cloud-hypervisor"]
    return cond


def test_match_conditions_test_the_annotation_key_and_value(default_install):
    for hook in gatekeepers(default_install):
        cond = selection(hook)
        assert f"'{samples.KEY}'" in cond["expression"], hook["name"]
        assert "'cloud-hypervisor'" in cond["expression"], hook["name"]


def test_validating_webhooks_are_called_on_update_only_for_what_may_change_the_verdict(webhooks):
    for hook in validating(webhooks).values():
        assert [c["name"] for c in hook["matchConditions"]] == ["selects-cloud-hypervisor", "may-change-the-verdict"]


def test_match_conditions_guard_every_level_and_read_old_object_only_on_update(default_install):
    """cel-go errors on a missing field, and an error follows failurePolicy: Fail, which would
    refuse every VMI (or launcher pod) that lacks, say, annotations. oldObject is null on CREATE."""
    for hook in all_webhooks(default_install):
        for cond in hook["matchConditions"]:
            assert unguarded_accesses(cond["expression"]) == [], (hook["name"], cond["name"])
            assert old_object_outside_update(cond["expression"]) == [], (hook["name"], cond["name"])


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


def hook_for(webhooks, kind):
    (hook,) = [h for h in validating(webhooks).values() if VALIDATING_WEBHOOKS[h["name"]][0] == kind]
    return hook


def changed(obj, *path, value):
    out = copy.deepcopy(obj)
    node = out
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return out


TEMPLATE = {"VirtualMachine": ("spec", "template"), "VirtualMachineInstanceReplicaSet": ("spec", "template"),
            "VirtualMachinePool": ("spec", "virtualMachineTemplate", "spec", "template")}
OWNERS = [("VirtualMachine", samples.vm), ("VirtualMachineInstanceReplicaSet", samples.replicaset),
          ("VirtualMachinePool", samples.pool)]


def test_a_vmis_selection_added_removed_or_changed_reaches_the_server(webhooks):
    hook = hook_for(webhooks, "VirtualMachineInstance")
    ch, plain, other = samples.vmi(samples.CH), samples.vmi(), samples.vmi(samples.OTHER)
    for new, old in ((ch, plain), (plain, ch), (other, ch)):
        assert webhook_matches(hook, "VirtualMachineInstance", new, old=old, operation="UPDATE")
    assert not webhook_matches(hook, "VirtualMachineInstance", plain, old=plain, operation="UPDATE")
    assert not webhook_matches(hook, "VirtualMachineInstance", other, old=plain, operation="UPDATE")


def test_a_spec_change_of_a_ch_vmi_reaches_the_server_and_metadata_changes_do_not(webhooks):
    """Hotplug changes the spec; KubeVirt's labels, annotations and finalizers do not, and must
    go through while the server is down (finalizer removal above all)."""
    hook = hook_for(webhooks, "VirtualMachineInstance")
    ch = samples.vmi(samples.CH)
    assert webhook_matches(hook, "VirtualMachineInstance",
                           changed(ch, "spec", "domain", "devices", value={"disks": []}),
                           old=ch, operation="UPDATE")
    for new in (ch, changed(ch, "metadata", "labels", value={"kubevirt.io/outdatedLauncherImage": ""}),
                changed(ch, "metadata", "finalizers", value=["kubevirt.io/virtualMachineControllerFinalize"]),
                changed(ch, "metadata", "annotations",
                        value={**samples.CH, "kubevirt.io/latest-observed-api-version": "v1"})):
        assert not webhook_matches(hook, "VirtualMachineInstance", new, old=ch, operation="UPDATE")
        assert not webhook_matches(hook, "VirtualMachineInstance", ch, old=new, operation="UPDATE")


@pytest.mark.parametrize("kind", ["VirtualMachineInstance", *TEMPLATE])
def test_nothing_reaches_the_server_while_an_object_is_being_deleted(webhooks, kind):
    make = dict(OWNERS).get(kind, samples.vmi)
    old = make(samples.CH)
    deleting = changed(old, "metadata", "deletionTimestamp", value="2026-01-01T00:00:00Z")
    hook = hook_for(webhooks, kind)
    assert not webhook_matches(hook, kind, deleting, old=old, operation="UPDATE")
    if kind == "VirtualMachineInstance":
        # even the annotation removed from a VMI being deleted: nothing runs any more
        unannotated = changed(deleting, "metadata", "annotations", value={})
        assert not webhook_matches(hook, kind, unannotated, old=deleting, operation="UPDATE")


@pytest.mark.parametrize("kind,make", OWNERS)
def test_an_owners_template_change_reaches_the_server_and_nothing_else_does(webhooks, kind, make):
    """Starting, stopping and scaling do not wait for the server; removing the selection from the
    template is allowed anyway (the way back to QEMU), so it needs no call either."""
    hook = hook_for(webhooks, kind)
    ch, plain = make(samples.CH), make()
    spec_of_template = TEMPLATE[kind] + ("spec",)
    assert webhook_matches(hook, kind, ch, old=plain, operation="UPDATE")  # the selection added
    assert webhook_matches(hook, kind, changed(ch, *spec_of_template, value={"domain": {"cpu": {"cores": 2}}}),
                           old=ch, operation="UPDATE")
    assert not webhook_matches(hook, kind, plain, old=ch, operation="UPDATE")  # removed
    others = [changed(ch, "metadata", "labels", value={"a": "b"}), changed(ch, "spec", "replicas", value=5),
              changed(ch, "metadata", "finalizers", value=["x/y"])]
    if kind == "VirtualMachine":
        others.append(changed(ch, "spec", "runStrategy", value="Halted"))
    for new in others:
        assert not webhook_matches(hook, kind, new, old=ch, operation="UPDATE")


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


# --- launcher-status: virt-controller's writes of Cloud Hypervisor VMIs (docs/migration.md §6) ---

CONTROLLER = "system:serviceaccount:kubevirt:kubevirt-controller"


def reported_vmi(annotations=samples.CH, phase="Running", labelled=True,
                 image="ghcr.io/kubevirt-ch/ch-launcher:v0.1.0"):
    return apply(samples.vmi(annotations),
                 with_labels({"kubevirt.io/outdatedLauncherImage": ""} if labelled else {"app": "web"}),
                 with_status(phase=phase, launcherContainerImageVersion=image))


def test_the_launcher_status_webhook_fails_open_and_never_holds_virt_controller_up(webhooks):
    """Down or slow, virt-controller's write goes through as it was sent (the VMI merely looks
    outdated, as without the add-on), after at most timeoutSeconds."""
    hook = status_webhook(webhooks)
    assert hook["failurePolicy"] == "Ignore"
    assert hook["sideEffects"] == "None" and hook["timeoutSeconds"] <= 3
    assert hook["reinvocationPolicy"] == "IfNeeded"  # the server's patch is idempotent
    assert hook["rules"] == [{"apiGroups": ["kubevirt.io"], "apiVersions": ["v1"],
                              "resources": ["virtualmachineinstances"],
                              "operations": ["UPDATE"], "scope": "Namespaced"}]
    assert [c["name"] for c in hook["matchConditions"]] == [
        "written-by-virt-controller", "selects-cloud-hypervisor", "labelled-outdated-while-scheduled-or-running"]


@pytest.mark.parametrize("why, obj, user, matched", [
    ("virt-controller's patch of a running VMI", reported_vmi(), CONTROLLER, True),
    ("the Update that moves it into Scheduled", reported_vmi(phase="Scheduled"), CONTROLLER, True),
    ("virt-controller of KubeVirt in another namespace", reported_vmi(),
     "system:serviceaccount:openshift-cnv:kubevirt-controller", True),
    ("virt-handler", reported_vmi(), "system:serviceaccount:kubevirt:kubevirt-handler", False),
    ("a user", reported_vmi(), "kubernetes-admin", False),
    ("a look-alike name", reported_vmi(), "kubevirt-controller", False),
    ("a VMI on QEMU", reported_vmi(annotations=None), CONTROLLER, False),
    ("a VMI that is not labelled outdated", reported_vmi(labelled=False), CONTROLLER, False),
    ("an Update while Scheduling", reported_vmi(phase="Scheduling"), CONTROLLER, False),
    ("a final VMI", reported_vmi(phase="Failed"), CONTROLLER, False),
])
def test_only_virt_controllers_writes_of_labelled_ch_vmis_reach_the_server(webhooks, why, obj, user, matched):
    hook = status_webhook(webhooks)
    assert webhook_matches(hook, "VirtualMachineInstance", obj, old=obj, operation="UPDATE", user=user) is matched, why


def test_a_vmi_without_labels_or_status_does_not_reach_the_server(webhooks):
    hook = status_webhook(webhooks)
    bare = samples.vmi(samples.CH)
    assert not webhook_matches(hook, "VirtualMachineInstance", bare, old=bare, operation="UPDATE", user=CONTROLLER)


@pytest.mark.parametrize("obj, user", [
    (reported_vmi(), CONTROLLER), (reported_vmi(phase="Scheduled"), CONTROLLER),
    (reported_vmi(phase="Scheduling"), CONTROLLER),
    (reported_vmi(), "system:serviceaccount:kubevirt:kubevirt-handler"), (reported_vmi(annotations=None), CONTROLLER),
])
def test_every_write_the_server_would_make_current_reaches_it(webhooks, obj, user):
    """The matchConditions keep nothing from the server that it would rewrite. (virt-controller
    labels every VMI whose pod image is not its own, so it never writes an unlabelled one with the
    ch-launcher image.)"""
    from admission.cluster import LauncherImage
    from admission.config import load_config
    from admission.launcher_status import decide
    from admission.review import parse_review
    from tests.unit.admission import builders
    review = builders.review(obj, operation="UPDATE", old=obj)
    review["request"]["userInfo"]["username"] = user
    verdict = decide(parse_review(review), load_config(),
                     LauncherImage("quay.io/kubevirt/virt-launcher:v1.9.0")).verdict
    hook = status_webhook(webhooks)
    if verdict == "current":
        assert webhook_matches(hook, "VirtualMachineInstance", obj, old=obj, operation="UPDATE", user=user)


# --- migrations: the creation of a VirtualMachineInstanceMigration (docs/migration.md §4) -----------


def vmim(**spec):
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"generateName": "kubevirt-migrate-vm-", "namespace": "default"},
            "spec": {"vmiName": "testvmi", **spec}}


def test_the_migration_webhook_fails_open_and_holds_a_migrations_creator_up_3_s_at_most(webhooks):
    """Down or slow, no migration is refused (QEMU VMIs' evacuations go on); a Cloud Hypervisor
    VMI's migration then starts and its launcher fails it with the same reason."""
    hook = migration_webhook(webhooks)
    assert hook["failurePolicy"] == "Ignore"
    assert hook["sideEffects"] == "None" and hook["timeoutSeconds"] <= 3
    assert hook["rules"] == [{"apiGroups": ["kubevirt.io"], "apiVersions": ["v1"],
                              "resources": ["virtualmachineinstancemigrations"], "operations": ["CREATE"],
                              "scope": "Namespaced"}]
    assert hook["matchPolicy"] == "Equivalent"  # v1alpha3 requests arrive as v1


@pytest.mark.parametrize("obj, sent", [
    (vmim(), True),
    ({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration", "metadata": {"name": "m"}}, True),
    (vmim(sendTo={"migrationID": "m-1", "connectURL": "sync:9185"}), True),
    (vmim(sendTo={"migrationID": "m-1"}, receive={"migrationID": "m-1"}), True),
    (vmim(receive={"migrationID": "m-1"}), False),
], ids=["local", "no-spec", "decentralized-source", "both-sides", "decentralized-target"])
def test_every_migration_reaches_the_server_but_a_decentralized_receiver(webhooks, obj, sent):
    """The VMI's annotation is not in the request: the server reads the VMI. What the
    matchCondition keeps away, the server would leave alone too."""
    from admission import migrations
    from admission.review import parse_review
    from tests.unit.admission import builders

    hook = migration_webhook(webhooks)
    assert webhook_matches(hook, "VirtualMachineInstanceMigration", obj) is sent
    if not sent:
        assert not isinstance(migrations.wants_vmi(parse_review(builders.review(obj))), migrations.VMIName)
