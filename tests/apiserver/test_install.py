"""`kubectl apply -k addon_manifests/` on a real API server: what it prints, what it grants, and
that applying it again changes nothing."""

from __future__ import annotations

import pytest

from tests.apiserver.cluster import SORT_NOTICE
from tests.apiserver.objects_support import INSTALLED
from tests.apiserver.readme import row_showing
from tests.builders import new_vmi, with_hypervisor, with_memory
from tests.manifests.render import MANIFESTS, one, render

SA = "system:serviceaccount:kubevirt-ch:ch-admission"


def test_the_install_creates_the_webhooks_first_and_nothing_warns(cluster):
    """In the kustomization's own order (webhook configurations first), and without a single
    warning: the Deployment passes the namespace's Pod Security `restricted` profile."""
    assert cluster.install_output.without_sort_notice() == [f"{name} created" for name in INSTALLED]


def test_applying_again_changes_nothing(cluster):
    """Every object `unchanged`, except the PodDisruptionBudget: kubectl's client-side apply always
    sends a PDB's spec.selector whole (its patch strategy is `replace`: apimachinery
    pkg/util/strategicpatch handleMapDiff), so kubectl prints `configured` for it although the
    API server stores nothing new."""
    before = cluster.json("get", "pdb", "ch-admission", "-n", "kubevirt-ch")["metadata"]
    again = cluster.kubectl("apply", "-k", "addon_manifests/")
    assert again.rc == 0
    expected = [f"{name} unchanged" for name in INSTALLED]
    pdb = "poddisruptionbudget.policy/ch-admission"
    expected[INSTALLED.index(pdb)] = f"{pdb} configured"
    assert again.without_sort_notice() == expected
    after = cluster.json("get", "pdb", "ch-admission", "-n", "kubevirt-ch")["metadata"]
    assert (after["resourceVersion"], after["generation"]) == (before["resourceVersion"], before["generation"])
    assert row_showing("poddisruptionbudget.policy/ch-admission configured")
    assert row_showing(next(line for line in again.lines if SORT_NOTICE.match(line)))
    diff = cluster.kubectl("diff", "-k", "addon_manifests/")
    assert (diff.rc, diff.without_sort_notice()) == (0, [])


def test_the_server_injected_its_ca_into_both_webhook_configurations(cluster):
    secret = cluster.json("get", "secret", "ch-admission-tls", "-n", "kubevirt-ch")
    for kind, name in (("validatingwebhookconfiguration", "kubevirt-ch-validator"),
                       ("mutatingwebhookconfiguration", "kubevirt-ch-launcher-mutator")):
        for hook in cluster.json("get", kind, name)["webhooks"]:
            assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"], hook["name"]


@pytest.mark.parametrize("policy", ["kubevirt-ch-unserved-namespaces", "kubevirt-ch-guard"])
def test_the_policies_type_check_without_warnings(cluster, policy):
    """kube-controller-manager type-checks every expression against the real schemas (KubeVirt's
    CRDs, Pod); a field that does not exist would be an expressionWarning."""
    if policy == "kubevirt-ch-guard":
        cluster.ok("apply", "-k", "addon_manifests/guard/")
    try:
        status = cluster.wait_for(
            lambda: (cluster.json("get", "validatingadmissionpolicy", policy).get("status") or {}).get("typeChecking")
            is not None and cluster.json("get", "validatingadmissionpolicy", policy)["status"],
            f"the type check of {policy}")
        generation = cluster.json("get", "validatingadmissionpolicy", policy)["metadata"]["generation"]
        assert status == {"observedGeneration": generation, "typeChecking": {}}
    finally:
        if policy == "kubevirt-ch-guard":
            cluster.ok("delete", "-k", "addon_manifests/guard/")
            # the API server drops a deleted policy within about a second: let no later test meet it
            probe = cluster.yaml(new_vmi("after-guard", with_hypervisor(), with_memory("128Mi")))
            cluster.wait_for(lambda: "kubevirt-ch-guard" not in cluster.kubectl(
                "create", "--dry-run=server", "-f", "-", input=probe).out, "the guard to be gone")


def rules(cluster, namespace: str) -> list[str]:
    """The resource rows of `kubectl auth can-i --list` as the ServiceAccount (the non-resource
    URLs and self-reviews are Kubernetes' defaults for every authenticated user)."""
    out = cluster.ok("auth", "can-i", "--list", f"--as={SA}", "-n", namespace).splitlines()
    assert out[0].split() == ["Resources", "Non-Resource", "URLs", "Resource", "Names", "Verbs"]
    rows = [" ".join(line.split()) for line in out[1:] if not line.startswith(" ")]
    return sorted(r for r in rows if not r.startswith("self"))


def test_the_service_account_has_exactly_its_intended_rights(cluster):
    cluster_wide = [
        "kubevirts.kubevirt.io [] [] [get]",
        "mutatingwebhookconfigurations.admissionregistration.k8s.io [] [kubevirt-ch-launcher-mutator] [get patch]",
        "validatingwebhookconfigurations.admissionregistration.k8s.io [] [kubevirt-ch-validator] [get patch]",
        "virtualmachineinstances.kubevirt.io [] [] [get]",
    ]
    assert rules(cluster, "default") == cluster_wide
    assert rules(cluster, "kubevirt-ch") == sorted([
        *cluster_wide,
        "deployments.apps [] [ch-admission] [get]",
        "events [] [] [create]",
        "secrets [] [] [create]",
        "secrets [] [ch-admission-tls] [get update]",
    ])


@pytest.mark.parametrize("question, answer", [
    ("get virtualmachineinstances.kubevirt.io -A", "yes"),
    ("list virtualmachineinstances.kubevirt.io -A", "no"),
    ("update virtualmachineinstances.kubevirt.io -n default", "no"),
    ("get kubevirts.kubevirt.io/kubevirt -n kubevirt", "yes"),
    ("patch kubevirts.kubevirt.io/kubevirt -n kubevirt", "no"),
    ("patch validatingwebhookconfigurations/kubevirt-ch-validator -A", "yes"),
    ("patch validatingwebhookconfigurations/virt-api-validator -A", "no"),
    ("patch mutatingwebhookconfigurations/virt-api-mutator -A", "no"),
    ("get secrets/ch-admission-tls -n kubevirt-ch", "yes"),
    ("get secrets/kubevirt-virt-handler-certs -n kubevirt", "no"),
    ("list secrets -n kubevirt-ch", "no"),
    ("create secrets -n default", "no"),
    ("create events -n kubevirt-ch", "yes"),
    ("create events -n kubevirt", "no"),
    ("get deployments.apps/ch-admission -n kubevirt-ch", "yes"),
    ("get deployments.apps/virt-api -n kubevirt", "no"),
    ("create pods -n default", "no"),
])
def test_kubectl_auth_can_i_as_the_service_account(cluster, question, answer):
    r = cluster.kubectl("auth", "can-i", *question.split(), f"--as={SA}")
    assert (r.out, r.rc) == (f"{answer}\n", 0 if answer == "yes" else 1)


def test_a_webhook_configuration_replaced_without_its_ca_fails_with_x509_until_the_server_injects_it(cluster):
    """A tool that writes the webhook configuration whole (`kubectl replace`, some GitOps setups)
    drops the CA the server injected: every Cloud Hypervisor VMI is refused with kubectl's x509
    error, as the README's row shows, until the server injects it again (at start-up, and every
    10 minutes)."""
    config = one(render(MANIFESTS), "ValidatingWebhookConfiguration", "kubevirt-ch-validator")
    try:
        assert cluster.kubectl("replace", "-f", "-", input=cluster.yaml(config)).rc == 0
        vmi = new_vmi("no-ca", with_hypervisor(), with_memory("128Mi"))
        r = cluster.kubectl("create", "--dry-run=server", "-f", "-", input=cluster.yaml(vmi))
        assert (r.rc, r.lines) == (1, [
            ('Error from server (InternalError): error when creating "STDIN": Internal error occurred: failed calling '
             'webhook "virtualmachineinstances.validator.kubevirt-ch.io": failed to call webhook: Post '
             '"https://ch-admission.kubevirt-ch.svc:443/validate?timeout=5s": tls: failed to verify certificate: '
             'x509: certificate signed by unknown authority')])
        assert "`x509: certificate signed by unknown authority`" in row_showing(r.lines[0])
    finally:
        cluster.stop_admission()
        cluster.start_admission()  # returns once the API server reaches it again: the CA is back
    assert all(hook["clientConfig"].get("caBundle") for hook in
               cluster.json("get", "validatingwebhookconfiguration", "kubevirt-ch-validator")["webhooks"])
