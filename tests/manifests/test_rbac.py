"""Least privilege: what the ServiceAccount may do, exactly, and that it is what the server's
Kubernetes client code calls (admission/kube.py)."""

from __future__ import annotations

import re

from tests.manifests.render import REPO, find

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


# Events about cluster-wide conditions, on its own Deployment (whose uid it reads for them)
EVENTS = {("kubevirt-ch", "", "events", "create", "*"), ("kubevirt-ch", "apps", "deployments", "get", "ch-admission")}


def test_the_default_install_grants_exactly_what_the_server_needs(default_install):
    assert grants(default_install) == {
        # the pod mutator reads the VMI that owns a launcher pod, in any namespace
        ("cluster", "kubevirt.io", "virtualmachineinstances", "get", "*"),
        # the version gate reads the KubeVirt CR's status
        ("cluster", "kubevirt.io", "kubevirts", "get", "*"),
        # --self-signed: the CA bundle of its own two webhook configurations, by name
        ("cluster", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "get", "kubevirt-ch-validator"),
        ("cluster", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "patch",
         "kubevirt-ch-validator"),
        ("cluster", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "get",
         "kubevirt-ch-launcher-mutator"),
        ("cluster", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "patch",
         "kubevirt-ch-launcher-mutator"),
        # --self-signed: its own Secret, in its own namespace (create cannot be limited by name)
        ("kubevirt-ch", "", "secrets", "get", "ch-admission-tls"),
        ("kubevirt-ch", "", "secrets", "update", "ch-admission-tls"),
        ("kubevirt-ch", "", "secrets", "create", "*"),
        *EVENTS,
    }


def test_no_secret_access_outside_the_addon_namespace(default_install, cert_manager_install):
    for objects in (default_install, cert_manager_install):
        for scope, group, resource, _verb, _name in grants(objects):
            if resource == "secrets":
                assert (scope, group) == ("kubevirt-ch", "")


def test_with_cert_manager_the_server_can_neither_patch_webhooks_nor_write_secrets(cert_manager_install):
    assert grants(cert_manager_install) == {
        ("cluster", "kubevirt.io", "virtualmachineinstances", "get", "*"),
        ("cluster", "kubevirt.io", "kubevirts", "get", "*"),
        *EVENTS,
    }


# kubernetes-client method -> RBAC verb (the resource comes from the method name or, for custom
# objects, from the plural the call names).
CLIENT_VERBS = {"get": "get", "read": "get", "list": "list", "watch": "watch", "create": "create",
                "replace": "update", "patch": "patch", "delete": "delete"}
BUILTIN_RESOURCES = {"secret": ("", "secrets"), "event": ("", "events"), "deployment": ("apps", "deployments"),
                     "validating_webhook_configuration": ("admissionregistration.k8s.io",
                                                          "validatingwebhookconfigurations"),
                     "mutating_webhook_configuration": ("admissionregistration.k8s.io",
                                                        "mutatingwebhookconfigurations")}


def server_api_calls() -> set[tuple[str, str, str]]:
    """{(apiGroup, resource, verb)} of every API call in admission/kube.py."""
    source = (REPO / "admission" / "kube.py").read_text()
    calls = set()
    # calls and references alike (`call = self.admission.patch_..._configuration if ...`)
    for m in re.finditer(r"self\.(?:core|admission|custom|apps|rbac)\.(\w+)(\([^)]*)?", source):
        method, args = m.group(1), m.group(2) or ""
        verb_word, _, rest = method.partition("_")
        assert verb_word in CLIENT_VERBS, f"teach this test the RBAC verb of {method}"
        verb = CLIENT_VERBS[verb_word]
        if "custom_object" in rest:
            group, plural = re.match(r'\(\s*"([^"]+)",\s*"[^"]+",\s*\w+,\s*"([^"]+)"', args).groups()
            calls.add((group, plural, verb))
            continue
        resource = rest.removeprefix("namespaced_").removesuffix("_with_http_info")
        assert resource in BUILTIN_RESOURCES, f"teach this test the resource of {method}"
        calls.add((*BUILTIN_RESOURCES[resource], verb))
    return calls


def test_the_default_install_grants_what_the_server_calls_and_nothing_more(default_install):
    granted = {(group, resource, verb) for _scope, group, resource, verb, _name in grants(default_install)}
    assert granted == server_api_calls()


def test_the_call_scan_sees_the_servers_reads():
    """Guards the test above against a scan that finds nothing."""
    calls = server_api_calls()
    assert ("kubevirt.io", "virtualmachineinstances", "get") in calls
    assert ("", "secrets", "create") in calls
