"""Least privilege: what the ServiceAccount may do, exactly."""

from __future__ import annotations

from tests.manifests.render import find

SA = ("ServiceAccount", "ch-admission", "kubevirt-ch")


def grants(objects):
    """{(scope, apiGroup, resource, verb, resourceName or '*')} granted to the add-on's ServiceAccount."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
             for o in objects if o["kind"] in ("Role", "ClusterRole")}
    out = set()
    for b in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        subjects = {(s["kind"], s["name"], s.get("namespace")) for s in b["subjects"]}
        assert subjects == {SA}, f"{b['kind']}/{b['metadata']['name']} binds {subjects}"
        ref = b["roleRef"]
        role_ns = b["metadata"].get("namespace") if ref["kind"] == "Role" else None
        role = roles[(ref["kind"], role_ns, ref["name"])]
        scope = b["metadata"].get("namespace") or "cluster"
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        for name in rule.get("resourceNames", ["*"]):
                            out.add((scope, group, resource, verb, name))
    return out


def test_rules_use_no_wildcards(default_install, cert_manager_install):
    for o in find(default_install, "ClusterRole") + find(default_install, "Role") + find(cert_manager_install, "Role"):
        for rule in o["rules"]:
            for key in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(key, []), f"{o['metadata']['name']}: {key}"
            assert "nonResourceURLs" not in rule


def test_every_role_is_bound_and_every_binding_names_an_installed_role(default_install, cert_manager_install):
    for objects in (default_install, cert_manager_install):
        grants(objects)  # raises KeyError for a binding to a missing role
        bound = {b["roleRef"]["name"] for b in objects if b["kind"].endswith("RoleBinding")}
        assert bound == {r["metadata"]["name"] for r in objects if r["kind"] in ("Role", "ClusterRole")}


def test_the_default_install_grants_exactly_what_the_server_needs(default_install):
    assert grants(default_install) == {
        # the pod mutator reads the VMI that owns a launcher pod, in any namespace
        ("cluster", "kubevirt.io", "virtualmachineinstances", "get", "*"),
        ("cluster", "kubevirt.io", "virtualmachineinstances", "list", "*"),
        ("cluster", "kubevirt.io", "virtualmachineinstances", "watch", "*"),
        # the version gate reads the KubeVirt CR's status
        ("cluster", "kubevirt.io", "kubevirts", "get", "*"),
        # --self-signed: the CA bundle of its own two webhook configurations, by name
        ("cluster", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "get", "kubevirt-ch-validator"),
        ("cluster", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "patch", "kubevirt-ch-validator"),
        ("cluster", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "get",
         "kubevirt-ch-launcher-mutator"),
        ("cluster", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "patch",
         "kubevirt-ch-launcher-mutator"),
        # --self-signed: its own Secret, in its own namespace (create cannot be limited by name)
        ("kubevirt-ch", "", "secrets", "get", "ch-admission-tls"),
        ("kubevirt-ch", "", "secrets", "update", "ch-admission-tls"),
        ("kubevirt-ch", "", "secrets", "create", "*"),
    }


def test_no_secret_access_outside_the_addon_namespace(default_install, cert_manager_install):
    for objects in (default_install, cert_manager_install):
        for scope, group, resource, _verb, _name in grants(objects):
            if resource == "secrets":
                assert (scope, group) == ("kubevirt-ch", "")


def test_with_cert_manager_the_server_can_neither_patch_webhooks_nor_write_secrets(cert_manager_install):
    assert grants(cert_manager_install) == {
        ("cluster", "kubevirt.io", "virtualmachineinstances", "get", "*"),
        ("cluster", "kubevirt.io", "virtualmachineinstances", "list", "*"),
        ("cluster", "kubevirt.io", "virtualmachineinstances", "watch", "*"),
        ("cluster", "kubevirt.io", "kubevirts", "get", "*"),
    }
