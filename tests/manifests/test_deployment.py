"""The admission Deployment: availability, hardening, and flags the server actually accepts."""

from __future__ import annotations

import pathlib

import pytest

from admission import cli as admission_cli
from tests.manifests.render import one


def deployment(objects):
    return one(objects, "Deployment", "ch-admission")


def container(objects):
    (c,) = deployment(objects)["spec"]["template"]["spec"]["containers"]
    return c


def mounts(objects):
    return {m["name"]: m for m in container(objects)["volumeMounts"]}


def volumes(objects):
    return {v["name"]: v for v in deployment(objects)["spec"]["template"]["spec"]["volumes"]}


def server_flags(objects):
    """The container's command line, parsed by ch-admission's own parser (unknown flags fail)."""
    c = container(objects)
    assert c["command"] == ["/usr/bin/ch-admission"]
    assert c["args"][0] == "serve"
    return admission_cli.parse_args(c["args"])


def test_two_replicas_spread_and_protected_by_a_disruption_budget(default_install):
    d = deployment(default_install)
    assert d["spec"]["replicas"] == 2
    assert d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = d["spec"]["template"]["spec"]
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    selector = d["spec"]["selector"]["matchLabels"]
    assert anti["podAffinityTerm"]["labelSelector"]["matchLabels"] == selector
    pdb = one(default_install, "PodDisruptionBudget", "ch-admission")
    assert pdb["spec"]["selector"]["matchLabels"] == selector
    assert pdb["spec"]["minAvailable"] == 1
    service = one(default_install, "Service", "ch-admission")
    assert service["spec"]["selector"] == selector
    assert set(selector.items()) <= set(d["spec"]["template"]["metadata"]["labels"].items())


def test_the_server_has_a_priority_class_of_its_own(default_install):
    pod = deployment(default_install)["spec"]["template"]["spec"]
    pc = one(default_install, "PriorityClass", pod["priorityClassName"])
    assert pc["value"] == 1_000_000_000  # as KubeVirt's control plane; the most a user class may have
    # Not the cluster's default: left out, as the API server leaves out false (writing it made every
    # re-apply report the class `configured`; tests/apiserver/test_install.py).
    assert pc.get("globalDefault", False) is False


@pytest.mark.parametrize("install", ["default_install", "cert_manager_install"])
def test_the_server_runs_non_root_read_only_without_capabilities(install, request):
    objects = request.getfixturevalue(install)
    pod = deployment(objects)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container(objects)["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "privileged" not in sc
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    for v in pod["volumes"]:
        assert "hostPath" not in v, v["name"]


def test_the_namespace_enforces_the_restricted_pod_security_profile(default_install):
    ns = one(default_install, "Namespace", "kubevirt-ch")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_resources_are_requested_and_memory_is_bounded(default_install):
    res = container(default_install)["resources"]
    assert res["requests"]["cpu"] and res["requests"]["memory"]
    assert res["limits"]["memory"]


def test_probes_use_the_servers_health_paths_over_https(default_install):
    c = container(default_install)
    (port,) = c["ports"]
    assert (port["name"], port["containerPort"]) == ("https", 8443)
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = c[probe]["httpGet"]
        assert (get["path"], get["port"], get["scheme"]) == (path, "https", "HTTPS"), probe


def test_the_default_install_manages_its_own_certificates(default_install):
    flags = server_flags(default_install)
    assert flags.port == admission_cli.DEFAULT_PORT == container(default_install)["ports"][0]["containerPort"]
    assert flags.self_signed is True
    assert flags.cert_secret == "ch-admission-tls"
    assert flags.service == one(default_install, "Service", "ch-admission")["metadata"]["name"]
    assert set(flags.webhook_configurations.split(",")) == {
        o["metadata"]["name"] for o in default_install if o["kind"].endswith("WebhookConfiguration")}
    # the certificates go to a writable volume, since the root filesystem is read-only
    cert_mount = mounts(default_install)["certs"]
    assert cert_mount["mountPath"] == flags.cert_dir == admission_cli.DEFAULT_CERT_DIR
    assert not cert_mount.get("readOnly")
    assert "emptyDir" in volumes(default_install)["certs"]
    # --namespace comes from POD_NAMESPACE (the server's default), filled by the downward API
    env = {e["name"]: e for e in container(default_install)["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_the_config_file_flag_points_into_the_mounted_configmap(default_install):
    flags = server_flags(default_install)
    config_mount = mounts(default_install)["config"]
    assert "subPath" not in config_mount  # subPath mounts never see ConfigMap updates
    path = pathlib.PurePosixPath(flags.config)
    assert str(path.parent) == config_mount["mountPath"]
    configmap = one(default_install, "ConfigMap", volumes(default_install)["config"]["configMap"]["name"])
    assert path.name in configmap["data"]


def test_with_cert_manager_the_server_reads_the_certificate_secret(cert_manager_install):
    flags = server_flags(cert_manager_install)
    assert flags.self_signed is False
    secret_volume = volumes(cert_manager_install)["certs"]
    assert set(secret_volume) == {"name", "secret"}  # the emptyDir is gone, not merged
    certificate = one(cert_manager_install, "Certificate", "ch-admission-serving")
    assert secret_volume["secret"]["secretName"] == certificate["spec"]["secretName"]
    mount = mounts(cert_manager_install)["certs"]
    assert mount["readOnly"] is True
    assert flags.tls_cert_file == f"{mount['mountPath']}/tls.crt"
    assert flags.tls_private_key_file == f"{mount['mountPath']}/tls.key"
    # mode 0440: readable through the pod's fsGroup, which owns Secret volume files
    pod = deployment(cert_manager_install)["spec"]["template"]["spec"]
    assert secret_volume["secret"]["defaultMode"] == 0o440
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]
