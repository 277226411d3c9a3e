"""Install and uninstall order, as `kubectl apply -k` / `kubectl delete -k` process the rendered list.

kubectl handles objects in the order `kubectl kustomize` prints them (ecosystem.md §7.2), so the
rendered order is what decides whether an uninstall leaves a failurePolicy: Fail webhook pointing
at a server that no longer exists.
"""

from __future__ import annotations

import pytest

SERVER_KINDS = {"Deployment", "Service", "ServiceAccount", "Namespace"}


def positions(objects):
    return {(o["kind"], o["metadata"]["name"]): i for i, o in enumerate(objects)}


@pytest.mark.parametrize("install", ["default_install", "cert_manager_install"])
def test_webhook_configurations_are_deleted_before_their_server(install, request):
    objects = request.getfixturevalue(install)
    pos = positions(objects)
    webhooks = [i for (kind, _), i in pos.items() if kind.endswith("WebhookConfiguration")]
    server = [i for (kind, _), i in pos.items() if kind in SERVER_KINDS]
    assert len(webhooks) == 2 and server
    assert max(webhooks) < min(server)


@pytest.mark.parametrize("install", ["default_install", "cert_manager_install"])
def test_the_namespace_comes_before_everything_in_it(install, request):
    objects = request.getfixturevalue(install)
    ns_at = positions(objects)[("Namespace", "kubevirt-ch")]
    for i, o in enumerate(objects):
        if o["metadata"].get("namespace") == "kubevirt-ch":
            assert i > ns_at, f"{o['kind']}/{o['metadata']['name']}"


def test_a_policy_comes_before_its_binding(default_install, guard):
    for objects in (default_install, guard):
        pos = positions(objects)
        for (kind, name), i in pos.items():
            if kind == "ValidatingAdmissionPolicyBinding":
                assert pos[("ValidatingAdmissionPolicy", name)] < i


def test_the_webhooks_kustomization_holds_only_the_webhook_configurations(webhooks):
    assert sorted(o["kind"] for o in webhooks) == ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
