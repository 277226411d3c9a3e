"""The installed objects work together, as the cluster would use them.

The Deployment's own container (command, args, env, volumes: see pod.py) runs as a real process
against a fake API server that holds the rendered webhook configurations and enforces the
rendered RBAC for the add-on's ServiceAccount (403 Forbidden otherwise, as the real one). Then,
as the API server would: every webhook is called at its clientConfig path, over TLS verified with
its caBundle for the name `<service>.<namespace>.svc`, and the kubelet's probes are sent.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
from typing import Any

import pytest

from admission.certs import make_ca, make_serving
from tests.fakes.fake_kube_api import FakeKubeAPI, status
from tests.manifests.pod import Container
from tests.manifests.rbac import Authorizer, Request, parse
from tests.manifests.render import one
from tests.unit.admission import builders

pytestmark = pytest.mark.timeout(120)
LAUNCHER_IMAGE = "ghcr.io/kubevirt-ch/ch-launcher:v0.1.0"  # addon_manifests' configuration


class RBACFakeKubeAPI(FakeKubeAPI):
    """FakeKubeAPI that answers 403 to what the rendered RBAC does not allow."""

    def __init__(self, authorizer: Authorizer):
        super().__init__()
        self.authorizer = authorizer
        self.denied: list[Request] = []

    def _route(self, method: str, path: str, payload: Any, content_type: str):
        request = parse(method, path)
        if not self.authorizer.allows(request):
            with self.lock:
                self.denied.append(request)
            return 403, status(403, "Forbidden", request.describe(self.authorizer.user))
        return super()._route(method, path, payload, content_type)


def configuration_path(obj: dict[str, Any]) -> str:
    return f"/apis/admissionregistration.k8s.io/v1/{obj['kind'].lower()}s/{obj['metadata']['name']}"


def https(port: int, server_name: str, ca_pem: bytes, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
    """One request to 127.0.0.1:port, verifying the certificate for `server_name` against `ca_pem`."""
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    with ctx.wrap_socket(raw, server_hostname=server_name) as tls:
        conn = http.client.HTTPConnection(server_name, port, timeout=10)
        conn.sock = tls
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        response = conn.getresponse()
        return response.status, response.read()


def reviews_for(webhook_name: str) -> dict[str, Any]:
    vmi = builders.vmi(annotations=builders.CH)
    vmi["metadata"]["uid"] = "vmi-uid"
    if webhook_name.startswith("virtualmachineinstances."):
        return builders.review(vmi)
    if webhook_name.startswith("virtualmachines."):
        return builders.review(builders.vm(vmi))
    if webhook_name.startswith("replicasets."):
        return builders.review(builders.replicaset(vmi))
    if webhook_name.startswith("pools."):
        return builders.review(builders.pool(vmi))
    if webhook_name.startswith("launcher-status."):  # virt-controller's write of a running VMI
        running = {**vmi, "metadata": {**vmi["metadata"], "labels": {"kubevirt.io/outdatedLauncherImage": ""}},
                   "status": {"phase": "Running", "launcherContainerImageVersion": LAUNCHER_IMAGE}}
        return builders.review(running, operation="UPDATE", old=running)
    if webhook_name.startswith("migrations."):  # `virtctl migrate` of the VMI (a containerDisk: refused)
        return builders.review(builders.vmim(vmi["metadata"]["name"]), name="")
    assert webhook_name.startswith("launcher-pods.")
    return builders.review(builders.launcher_pod(vmi), kind="Pod", name="")


def seed(api: FakeKubeAPI, objects: list[dict[str, Any]]) -> None:
    """What exists in the cluster: KubeVirt, the owner VMI of the launcher pod, and the webhooks."""
    api.add_kubevirt("v1.9.0-beta.0-1264-gd923fdb815cd", deployment_config={
        "registry": "quay.io/kubevirt", "kubeVirtVersion": "v1.9.0-beta.0-1264-gd923fdb815cd"})
    vmi = builders.vmi(annotations=builders.CH)
    vmi["metadata"]["uid"] = "vmi-uid"
    api.add_vmi(vmi)
    for o in objects:
        if o["kind"].endswith("WebhookConfiguration"):
            api.put(configuration_path(o), o)


def exercise(container: Container, api: FakeKubeAPI, objects: list[dict[str, Any]]) -> None:
    """Call every webhook and both probes as the API server and the kubelet would."""
    service = one(objects, "Service", "ch-admission")
    calls = 0
    for o in objects:
        if not o["kind"].endswith("WebhookConfiguration"):
            continue
        stored = api.get(configuration_path(o))
        for hook in stored["webhooks"]:
            assert hook["clientConfig"].get("caBundle"), f"{hook['name']}: no caBundle"
            ca = base64.b64decode(hook["clientConfig"]["caBundle"])
            svc = hook["clientConfig"]["service"]
            assert (svc["name"], svc["namespace"]) == (service["metadata"]["name"], service["metadata"]["namespace"])
            review = reviews_for(hook["name"])
            code, body = https(container.port, f"{svc['name']}.{svc['namespace']}.svc", ca, "POST", svc["path"], review)
            assert code == 200, f"{hook['name']}: HTTP {code}: {body[:300]!r}"
            answer = json.loads(body)
            assert answer["response"]["uid"] == review["request"]["uid"]
            if hook["name"].startswith("migrations."):  # it read the VMI, within its RBAC, and judged it
                assert answer["response"]["allowed"] is False, answer["response"]
                assert answer["response"]["status"]["message"].startswith(
                    "Cannot migrate VMI, Reason: DisksNotLiveMigratable, Message: volume 'containerdisk'")
                calls += 1
                continue
            assert answer["response"]["allowed"] is True, f"{hook['name']}: {answer['response']}"
            if hook["name"].startswith(("launcher-pods.", "launcher-status.")):
                assert answer["response"]["patchType"] == "JSONPatch" and answer["response"]["patch"]
            if hook["name"].startswith("launcher-status."):
                assert {"op": "replace", "path": "/status/launcherContainerImageVersion",
                        "value": "quay.io/kubevirt/virt-launcher:v1.9.0-beta.0-1264-gd923fdb815cd"} \
                    in json.loads(base64.b64decode(answer["response"]["patch"]))
            calls += 1
    assert calls == 7
    (c,) = one(objects, "Deployment", "ch-admission")["spec"]["template"]["spec"]["containers"]
    for probe in ("readinessProbe", "livenessProbe"):
        get = c[probe]["httpGet"]
        assert get["scheme"] == "HTTPS"
        code, body = https(container.port, f"{service['metadata']['name']}.kubevirt-ch.svc", ca, "GET", get["path"])
        assert code == 200, f"{probe} {get['path']}: HTTP {code}: {body[:200]!r}"


@pytest.fixture
def fake_api(tmp_path, request):
    apis = []

    def start(objects):
        api = RBACFakeKubeAPI(Authorizer(objects, "kubevirt-ch", "ch-admission")).start(tmp_path)
        apis.append(api)
        return api

    yield start
    for api in apis:
        api.stop()


@pytest.fixture
def containers():
    started = []
    yield started
    for c in started:
        c.stop()


def test_the_default_install_injects_its_ca_and_serves_every_webhook_within_its_rbac(
        tmp_path, default_install, fake_api, containers):
    api = fake_api(default_install)
    seed(api, default_install)
    deployment = one(default_install, "Deployment", "ch-admission")
    container = Container(deployment, default_install, tmp_path / "pod",
                          ["--kubeconfig", api.kubeconfig, "--port=0", "--address=127.0.0.1"])
    containers.append(container)
    container.start()
    assert api.get("/api/v1/namespaces/kubevirt-ch/secrets/ch-admission-tls") is not None
    exercise(container, api, default_install)
    # The only refusals: looking for each configuration under the other kind (RBAC by name answers 403).
    for denied in api.denied:
        assert denied.verb == "get" and denied.resource.endswith("webhookconfigurations"), denied
        assert {denied.resource, denied.name} not in ({"validatingwebhookconfigurations", "kubevirt-ch-validator"},
                                                      {"mutatingwebhookconfigurations", "kubevirt-ch-launcher-mutator"})


def test_the_cert_manager_install_serves_the_mounted_certificate_without_write_rights(
        tmp_path, cert_manager_install, fake_api, containers):
    certificate = one(cert_manager_install, "Certificate", "ch-admission-serving")
    ca, ca_key = make_ca("cert-manager test CA")
    cert, key = make_serving(ca, ca_key, certificate["spec"]["dnsNames"])
    secret = {"tls.crt": cert, "tls.key": key, "ca.crt": ca}
    api = fake_api(cert_manager_install)
    seed(api, cert_manager_install)
    for o in cert_manager_install:  # what cainjector does
        if o["kind"].endswith("WebhookConfiguration"):
            stored = api.get(configuration_path(o))
            for hook in stored["webhooks"]:
                hook["clientConfig"]["caBundle"] = base64.b64encode(ca).decode()
            api.put(configuration_path(o), stored)
    deployment = one(cert_manager_install, "Deployment", "ch-admission")
    container = Container(deployment, cert_manager_install, tmp_path / "pod",
                          ["--kubeconfig", api.kubeconfig, "--port=0", "--address=127.0.0.1"],
                          secrets={certificate["spec"]["secretName"]: secret})
    containers.append(container)
    container.start()
    exercise(container, api, cert_manager_install)
    assert api.denied == []
    assert not [p for m, p in api.requests if m != "GET"]  # no writes at all
