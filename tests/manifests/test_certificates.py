"""The cert-manager overlay: a certificate the API server will accept for the webhook Service,
injected into exactly the add-on's two webhook configurations."""

from __future__ import annotations

from tests.manifests.render import one


def test_the_certificate_names_the_webhook_service(cert_manager_install):
    service = one(cert_manager_install, "Service", "ch-admission")
    name, ns = service["metadata"]["name"], service["metadata"]["namespace"]
    cert = one(cert_manager_install, "Certificate", "ch-admission-serving")
    # the API server calls https://<service>.<namespace>.svc:443
    assert f"{name}.{ns}.svc" in cert["spec"]["dnsNames"]
    assert "server auth" in cert["spec"]["usages"]
    assert cert["spec"]["secretName"] == "ch-admission-tls"


def test_the_certificate_is_issued_by_the_overlays_issuer(cert_manager_install):
    cert = one(cert_manager_install, "Certificate", "ch-admission-serving")
    ref = cert["spec"]["issuerRef"]
    issuer = one(cert_manager_install, ref["kind"], ref["name"])
    assert issuer["metadata"]["namespace"] == cert["metadata"]["namespace"] == "kubevirt-ch"
    assert ref["group"] == "cert-manager.io" and "selfSigned" in issuer["spec"]


def test_cainjector_fills_both_webhook_configurations_from_the_certificate(cert_manager_install):
    cert = one(cert_manager_install, "Certificate", "ch-admission-serving")
    source = f"{cert['metadata']['namespace']}/{cert['metadata']['name']}"
    configurations = [o for o in cert_manager_install if o["kind"].endswith("WebhookConfiguration")]
    assert len(configurations) == 2
    for o in configurations:
        assert o["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": source}, o["metadata"]["name"]


def test_the_default_install_needs_no_cert_manager(default_install):
    assert not [o for o in default_install if o["apiVersion"].startswith("cert-manager.io/")]
    for o in default_install:
        assert "cert-manager.io/inject-ca-from" not in o["metadata"].get("annotations", {})
