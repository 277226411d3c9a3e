"""The validating webhook over real HTTPS: KubeVirt's examples, multi-problem objects, owners,
warnings, and every kind of malformed body, against a real `ch-admission serve` process."""

from __future__ import annotations

import copy
import json
import socket
import ssl
import time
import warnings

import pytest
import yaml

from admission.selection import ANNOTATION, VALUE
from tests.conftest import KUBEVIRT_EXAMPLES, require_shared
from tests.functional.admission_harness import CONFIG, AdmissionServer, post_review
from tests.unit.admission import builders as b

VMI_KINDS = {"VirtualMachineInstance": "", "VirtualMachine": "spec.template.",
             "VirtualMachineInstanceReplicaSet": "spec.template.",
             "VirtualMachinePool": "spec.virtualMachineTemplate.spec.template."}
BASELINES = {"vmi-fedora", "vmi-masquerade", "vmi-ephemeral", "vmi-nocloud"}  # contract.md §0


@pytest.fixture(scope="module")
def server(tls):
    s = AdmissionServer(["--tls-cert-file", str(tls["cert"]), "--tls-private-key-file", str(tls["key"]),
                         "--config", str(CONFIG)]).start()
    yield s
    assert s.stop() == 0, "\n".join(s.log)


def examples():
    directory = require_shared(KUBEVIRT_EXAMPLES)
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") in VMI_KINDS:
                yield path.stem, doc


def annotate(doc):
    out = copy.deepcopy(doc)
    path = {"VirtualMachineInstance": (), "VirtualMachine": ("spec", "template"),
            "VirtualMachineInstanceReplicaSet": ("spec", "template"),
            "VirtualMachinePool": ("spec", "virtualMachineTemplate", "spec", "template")}[doc["kind"]]
    node = out
    for key in path:
        node = node[key]
    node.setdefault("metadata", {}).setdefault("annotations", {})[ANNOTATION] = VALUE
    return out


def test_every_kubevirt_example_is_answered_for_with_and_without_the_annotation(server, https):
    seen = 0
    for name, doc in examples():
        seen += 1
        plain = post_review(https, server.url, b.review(doc, kind=doc["kind"]))
        assert plain == {"uid": plain["uid"], "allowed": True}, name
        answer = post_review(https, server.url, b.review(annotate(doc), kind=doc["kind"]))
        prefix = VMI_KINDS[doc["kind"]]
        if answer["allowed"]:
            assert all(isinstance(w, str) and w for w in answer.get("warnings", [])), name
        else:
            status = answer["status"]
            assert (status["code"], status["reason"]) == (422, "Invalid"), name
            assert 1 <= len(status["details"]["causes"]) <= 10, name
            for cause in status["details"]["causes"]:
                assert cause["type"].startswith("FieldValue"), name
                assert cause.get("field", prefix).startswith(prefix), (name, cause)
                assert cause["message"] in status["message"], name
        if name in BASELINES:
            assert answer["allowed"] is True, (name, answer)
    assert seen >= 30  # 22 VMIs, 12 VMs, a pool and a replica set (contract.md §0)


def test_all_problems_are_reported_and_capped_at_ten(server, https):
    answer = post_review(https, server.url, b.review(b.undecodable_disks(b.vmi(annotations=b.CH), 12)))
    status = answer["status"]
    assert [c["field"] for c in status["details"]["causes"]] == [
        f"spec.domain.devices.disks[{i}].name" for i in range(10)]
    assert status["message"].endswith(", and 2 more validation errors")
    assert status["message"].count("spec.domain.devices.disks[") == 10


@pytest.mark.parametrize(("wrap", "prefix"), [
    (b.vm, "spec.template."), (b.replicaset, "spec.template."), (b.pool, "spec.virtualMachineTemplate.spec.template."),
])
def test_owner_templates_are_refused_with_their_prefix(server, https, wrap, prefix):
    obj = wrap(b.undecodable_disks(b.vmi(annotations=b.CH), 3))
    status = post_review(https, server.url, b.review(obj))["status"]
    assert [c["field"] for c in status["details"]["causes"]] == [
        f"{prefix}spec.domain.devices.disks[{i}].name" for i in range(3)]


def test_a_warning_reaches_the_client(server, https):
    answer = post_review(https, server.url, b.review(b.vm(b.vmi(), annotations=b.CH)))
    assert answer["allowed"] is True
    assert any("spec.template.metadata.annotations" in w for w in answer["warnings"])


def test_what_needs_the_guest_agent_is_admitted_with_how_the_guest_must_run_it(server, https):
    """A guestAgentPing probe and SSH keys through qemuGuestAgent: allowed, each field warned with
    the command the guest must run (whether it does cannot be known before it boots)."""
    credentials = [{"sshPublicKey": {"source": {"secret": {"secretName": "keys"}},
                                     "propagationMethod": {"qemuGuestAgent": {"users": ["root"]}}}}]
    body = b.vmi(annotations=b.CH, readinessProbe={"guestAgentPing": {}}, accessCredentials=credentials)
    answer = post_review(https, server.url, b.review(body))
    assert answer["allowed"] is True
    agent = [w for w in answer["warnings"] if "qemu-ga --method=vsock-listen --path=4294967295:1023" in w]
    assert sorted(w.split(":", 1)[0] for w in agent) == ["spec.accessCredentials[0].sshPublicKey",
                                                         "spec.readinessProbe.guestAgentPing"], answer["warnings"]


def test_a_backend_change_on_update_is_refused(server, https):
    answer = post_review(https, server.url, b.review(b.vmi(), "UPDATE", b.vmi(annotations=b.CH)))
    assert answer["allowed"] is False
    assert answer["status"]["details"]["causes"][0]["field"] == "metadata.annotations[kubevirt-ch.io/hypervisor]"


def test_dry_run_requests_get_the_same_answer(server, https):
    obj = b.undecodable_disks(b.vmi(annotations=b.CH), 2)
    wet = post_review(https, server.url, b.review(obj))
    dry = post_review(https, server.url, b.review(obj, dry_run=True))
    assert dry["status"] == wet["status"]


# --- malformed input ----------------------------------------------------------------------


@pytest.mark.parametrize(("data", "content_type", "code", "text"), [
    (b"{broken", "application/json", 400, "not valid JSON"),
    (b"[]", "application/json", 400, "must be a JSON object"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "application/json", 400, "no request"),
    (b'{"apiVersion": "v1", "kind": "AdmissionReview", "request": {"uid": "x"}}', "application/json", 400,
     "expected apiVersion"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}', "application/json", 400,
     "request.uid"),
    (b"{}", "text/plain", 415, "Content-Type must be application/json"),
    (b"", "application/json", 400, "not valid JSON"),
])
def test_malformed_bodies_get_a_clear_status(server, https, data, content_type, code, text):
    for path in ("/validate", "/mutate-pod"):
        r = https.post(server.url + path, data=data, headers={"Content-Type": content_type}, timeout=10)
        assert r.status_code == code
        body = r.json()
        assert body["kind"] == "Status" and body["code"] == code and text in body["message"]


def test_an_object_that_is_not_an_object_is_a_400_admission_response(server, https):
    answer = post_review(https, server.url, b.review("a string", kind="VirtualMachineInstance"))
    assert answer["allowed"] is False and answer["status"]["code"] == 400


@pytest.mark.parametrize("path", ["/validate", "/mutate-pod"])
@pytest.mark.parametrize("obj, shown", [([b.vmi(annotations=b.CH)], "an array"), ("a string", "a string")])
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", ""])
def test_a_request_object_that_is_not_an_object_is_refused_on_both_paths(server, https, path, obj, shown,
                                                                           operation):
    """Whatever the operation and kind (a list once passed /validate, a string /mutate-pod)."""
    body = b.review(obj, kind="Pod" if path == "/mutate-pod" else "VirtualMachineInstance")
    body["request"]["operation"] = operation
    answer = post_review(https, server.url, body, path)
    message = (f"request.object must be a JSON object (the object under admission), got {shown}" if operation
               else "request.operation must be one of CREATE, UPDATE, DELETE, CONNECT, got ''")
    assert answer == {"uid": body["request"]["uid"], "allowed": False, "status": {"message": message, "code": 400}}


def test_an_oversized_body_is_refused_without_reading_it(server, tls):
    ctx = ssl.create_default_context(cafile=str(tls["ca"]))
    with (socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
          ctx.wrap_socket(raw, server_hostname="localhost") as s):
        s.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 50000000\r\n\r\n{\"apiVersion\":")
        started = time.monotonic()
        reply = b""
        while b"exceeds the limit" not in reply:
            chunk = s.recv(65536)
            assert chunk, reply
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 413")
        assert time.monotonic() - started < 5


def test_an_oversized_chunked_body_is_refused(server, https):
    def chunks():
        piece = b" " * (1 << 20)
        for _ in range(5):
            yield piece
    r = https.post(server.url + "/validate", data=chunks(), headers={"Content-Type": "application/json"}, timeout=20)
    assert r.status_code == 413


def test_a_body_that_never_arrives_does_not_hang_the_server(server, tls, https):
    ctx = ssl.create_default_context(cafile=str(tls["ca"]))
    with (socket.create_connection(("127.0.0.1", server.port), timeout=30) as raw,
          ctx.wrap_socket(raw, server_hostname="localhost") as s):
        s.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{")
        # meanwhile other clients are served
        assert https.get(server.url + "/healthz", timeout=5).status_code == 200
        reply = s.recv(65536)
        assert reply.startswith(b"HTTP/1.1 408")


def test_wrong_methods_and_paths_are_refused(server, https):
    assert https.get(server.url + "/validate", timeout=5).status_code == 405
    assert https.post(server.url + "/nowhere", json={}, timeout=5).status_code == 404


def test_health_readiness_and_metrics(server, https):
    assert https.get(server.url + "/healthz", timeout=5).text == "ok\n"
    assert https.get(server.url + "/readyz", timeout=5).status_code == 200
    post_review(https, server.url, b.review(b.undecodable_disks(b.vmi(annotations=b.CH), 1)))
    metrics = https.get(server.url + "/metrics", timeout=5).text
    assert 'ch_admission_requests_total{path="/validate",verdict="denied"}' in metrics
    assert 'ch_admission_request_duration_seconds_bucket{le="0.005",path="/validate"}' in metrics


def test_tls_1_2_is_accepted_and_older_versions_are_refused(server, tls):
    def handshake(version):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(str(tls["ca"]))
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # let this client offer old versions at all
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            ctx.minimum_version = ctx.maximum_version = version
        with (socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
              ctx.wrap_socket(raw, server_hostname="localhost") as s):
            return s.version()

    assert handshake(ssl.TLSVersion.TLSv1_2) == "TLSv1.2"
    with pytest.raises(ssl.SSLError) as e:
        handshake(ssl.TLSVersion.TLSv1_1)
    if "NO_PROTOCOLS_AVAILABLE" in str(e.value) or "no protocols available" in str(e.value):
        pytest.skip("this OpenSSL build cannot offer TLS 1.1, so the server's refusal cannot be observed")


def test_plain_http_is_not_served(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = s.recv(1024)
    assert not reply.startswith(b"HTTP/1.1 200")


def test_the_server_survives_all_of_this(server, https):
    # after every malformed request above, the same process still answers
    assert server.proc.poll() is None
    answer = post_review(https, server.url, b.review(json.loads(json.dumps(b.vmi()))))
    assert answer["allowed"] is True
