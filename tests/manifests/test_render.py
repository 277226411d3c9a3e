"""Every kustomization renders with a real kubectl, and every object fits the Kubernetes schemas."""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest

from tests.manifests.render import MANIFESTS, find, render

KUSTOMIZATIONS = {
    "default install": MANIFESTS,
    "cert-manager overlay": MANIFESTS / "overlays" / "cert-manager",
    "webhooks": MANIFESTS / "webhooks",
    "guard": MANIFESTS / "guard",
}
# matchConditions and admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy are GA in 1.30:
# the oldest release the add-on supports; the newest is what kubernetes-validate knows.
OLDEST = "1.30.0"
NEWEST = kubernetes_validate.latest_version()
# Kinds from CRDs the add-on relies on but does not install (cert-manager), with no schema in
# kubernetes-validate; checked field by field in test_certificates.py.
CRD_KINDS = {("cert-manager.io/v1", "Issuer"), ("cert-manager.io/v1", "Certificate")}


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_every_kustomization_renders(name):
    objects = render(KUSTOMIZATIONS[name])
    assert objects, f"{name} rendered nothing"
    keys = [(o["apiVersion"], o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects]
    assert len(keys) == len(set(keys)), f"{name} renders an object twice"


@pytest.mark.parametrize("version", [OLDEST, NEWEST])
@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_every_object_is_valid_for_kubernetes_without_unknown_fields(name, version):
    for obj in render(KUSTOMIZATIONS[name]):
        if (obj["apiVersion"], obj["kind"]) in CRD_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{name}: {obj['kind']}/{obj['metadata']['name']} invalid for Kubernetes {version}: "
                        f"{e.message} at {'.'.join(str(p) for p in e.path)}")


def test_the_schema_check_catches_a_misspelt_field(webhooks):
    """Guards the test above: strict validation refuses an unknown field."""
    broken = copy.deepcopy(webhooks[0])
    broken["webhooks"][0]["timeoutSecond"] = broken["webhooks"][0].pop("timeoutSeconds")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, NEWEST, strict=True)


def test_kubernetes_older_than_1_30_has_no_v1_admission_policy(default_install):
    """Why OLDEST is 1.30 (README: Install, requirements)."""
    policy = find(default_install, "ValidatingAdmissionPolicy")[0]
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(policy, "1.29.0", strict=True)


def test_only_the_expected_kinds_are_installed(default_install):
    kinds = sorted({o["kind"] for o in default_install})
    assert kinds == sorted([
        "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "MutatingWebhookConfiguration",
        "Namespace", "PodDisruptionBudget", "PriorityClass", "Role", "RoleBinding", "Service",
        "ServiceAccount", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
        "ValidatingWebhookConfiguration"])


def test_namespaced_objects_live_in_the_addon_namespace(default_install, cert_manager_install):
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass",
                      "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration",
                      "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    for obj in default_install + cert_manager_install:
        ns = obj["metadata"].get("namespace")
        if obj["kind"] in cluster_scoped:
            assert ns is None, f"{obj['kind']}/{obj['metadata']['name']} is cluster-scoped"
        else:
            assert ns == "kubevirt-ch", f"{obj['kind']}/{obj['metadata']['name']} is in {ns!r}"


def test_every_object_is_labelled_as_part_of_the_addon(default_install, cert_manager_install, guard):
    for obj in default_install + cert_manager_install + guard:
        labels = obj["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/part-of") == "kubevirt-ch", f"{obj['kind']}/{obj['metadata']['name']}"


def test_nothing_virt_operator_owns_is_created_or_patched(default_install, cert_manager_install, guard):
    """The add-on creates only its own objects (ecosystem.md §7.2): no KubeVirt CR, nothing in
    KubeVirt's namespace, no object named like KubeVirt's components."""
    for obj in default_install + cert_manager_install + guard:
        assert not obj["apiVersion"].startswith("kubevirt.io/"), obj["kind"]
        assert obj["metadata"].get("namespace") in (None, "kubevirt-ch")
        # every name is the add-on's own: none can collide with virt-operator's (virt-*, kubevirt-*)
        assert obj["metadata"]["name"].startswith(("kubevirt-ch", "ch-admission")), obj["metadata"]["name"]


def test_the_guard_is_not_part_of_the_install(default_install, cert_manager_install, guard):
    """Installed with the add-on, the guard would refuse every Cloud Hypervisor VMI."""
    guard_names = {o["metadata"]["name"] for o in guard}
    assert guard_names == {"kubevirt-ch-guard"}
    for obj in default_install + cert_manager_install:
        assert obj["metadata"]["name"] not in guard_names


def test_no_webhook_configuration_sets_a_ca_bundle(default_install, cert_manager_install):
    """A caBundle in the YAML would be reset by every `kubectl apply`, undoing the injection."""
    for obj in default_install + cert_manager_install:
        for hook in obj.get("webhooks", []):
            assert "caBundle" not in hook["clientConfig"], hook["name"]
