"""Certificates: rotated on disk while the server runs, and self-managed against a fake API
server (one Secret shared by replicas, caBundle injected into both webhook configurations)."""

from __future__ import annotations

import base64
import hashlib
import shutil
import socket
import ssl
import threading
import time

import pytest

from tests.fakes.fake_kube_api import FakeKubeAPI
from tests.functional.admission_harness import CONFIG, AdmissionServer, client, make_tls

SECRET = "/api/v1/namespaces/kubevirt-ch/secrets/ch-admission-tls"
VALIDATOR = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/kubevirt-ch-validator"
MUTATOR = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/kubevirt-ch-launcher-mutator"


def served_cert(port: int, ca: str | None = None, name: str = "localhost") -> bytes:
    """The DER certificate a new TLS connection is given (verified against `ca` when given)."""
    ctx = ssl.create_default_context(cafile=ca) if ca else ssl._create_unverified_context()
    with (socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
          ctx.wrap_socket(raw, server_hostname=name) as s):
        return s.getpeercert(binary_form=True)


def wait_for_a_failed_reload(server: AdmissionServer, ca: str, timeout: float = 15.0) -> None:
    """Until the server has looked at its changed files and kept serving its pair (its failed-reload
    counter is 1): it looks on a new connection, at most once a second."""
    deadline = time.monotonic() + timeout
    while True:
        with client(ca) as fresh:  # a new connection each time
            metrics = fresh.get(server.url + "/metrics", timeout=5).text
        if 'ch_admission_tls_reloads_total{result="failed"} 1.0' in metrics:
            return
        assert time.monotonic() < deadline, f"the server did not look at its files within {timeout} s:\n{metrics}"
        time.sleep(0.1)


def replace_pair(src: dict, dst: dict) -> None:
    # key first, then certificate: in between the pair does not match, as in a real rotation
    shutil.copyfile(src["key"], dst["key"] + ".new")
    shutil.copyfile(src["cert"], dst["cert"] + ".new")
    import os
    os.replace(dst["key"] + ".new", dst["key"])
    os.replace(dst["cert"] + ".new", dst["cert"])


def test_a_certificate_rotated_on_disk_is_served_to_new_connections(tmp_path):
    live = {k: str(v) for k, v in make_tls(tmp_path, prefix="live-").items()}
    second = {k: str(v) for k, v in make_tls(tmp_path, prefix="next-").items()}
    s = AdmissionServer(["--tls-cert-file", live["cert"], "--tls-private-key-file", live["key"],
                         "--config", str(CONFIG)]).start()
    try:
        first = served_cert(s.port, live["ca"])
        kept = client(live["ca"])
        assert kept.get(s.url + "/healthz", timeout=5).status_code == 200  # a keep-alive connection

        # a half-done rotation (new key, old certificate) keeps the old pair serving
        shutil.copyfile(second["key"], live["key"])
        wait_for_a_failed_reload(s, live["ca"])
        assert served_cert(s.port, live["ca"]) == first

        replace_pair(second, live)
        deadline = time.monotonic() + 10
        while served_cert(s.port) == first:
            assert time.monotonic() < deadline, "the rotated certificate was never served"
            time.sleep(0.2)
        assert served_cert(s.port, second["ca"]) != first  # verifies against the new CA
        assert kept.get(s.url + "/healthz", timeout=5).status_code == 200  # the old connection still works
        with client(second["ca"]) as fresh:
            assert fresh.get(s.url + "/metrics",
                             timeout=5).text.count('ch_admission_tls_reloads_total{result="ok"} 1.0') == 1
        kept.close()
    finally:
        assert s.stop() == 0, "\n".join(s.log)


def test_a_garbage_certificate_file_never_interrupts_service(tmp_path):
    live = {k: str(v) for k, v in make_tls(tmp_path).items()}
    s = AdmissionServer(["--tls-cert-file", live["cert"], "--tls-private-key-file", live["key"],
                         "--config", str(CONFIG)]).start()
    try:
        first = served_cert(s.port, live["ca"])
        with open(live["cert"], "w") as f:
            f.write("-----BEGIN CERTIFICATE-----\nnot base64\n")
        wait_for_a_failed_reload(s, live["ca"])
        assert served_cert(s.port, live["ca"]) == first
    finally:
        assert s.stop() == 0


def test_missing_or_bad_certificate_files_stop_start_up_with_a_message(tmp_path):
    s = AdmissionServer(["--tls-cert-file", str(tmp_path / "absent.crt"), "--tls-private-key-file",
                         str(tmp_path / "absent.key"), "--config", str(CONFIG)])
    with pytest.raises(RuntimeError, match="TLS file not found"):
        s.start(timeout=20)
    assert s.proc.returncode == 2


def test_a_bad_config_file_stops_start_up_with_its_key(tmp_path):
    tls = make_tls(tmp_path)
    (tmp_path / "bad.yaml").write_text("launcher: {image: x, command: [/a], typo: 1}\n")
    s = AdmissionServer(["--tls-cert-file", str(tls["cert"]), "--tls-private-key-file", str(tls["key"]),
                         "--config", str(tmp_path / "bad.yaml")])
    with pytest.raises(RuntimeError, match=r"launcher\.typo: unknown key"):
        s.start(timeout=20)
    assert s.proc.returncode == 2


@pytest.mark.parametrize("text", ["clusters: [unclosed\n", "just a string\n", ""])
def test_an_unreadable_kubeconfig_stops_start_up_with_a_message(tmp_path, text):
    tls = make_tls(tmp_path)
    (tmp_path / "kubeconfig").write_text(text)
    s = AdmissionServer(["--tls-cert-file", str(tls["cert"]), "--tls-private-key-file", str(tls["key"]),
                         "--config", str(CONFIG), "--kubeconfig", str(tmp_path / "kubeconfig")])
    with pytest.raises(RuntimeError, match="cannot load kubeconfig"):
        s.start(timeout=20)
    assert s.proc.returncode == 2
    assert not any("Traceback" in line for line in s.log)


# --- self-managed ---------------------------------------------------------------------------


@pytest.fixture
def api(tmp_path):
    fake = FakeKubeAPI().start(tmp_path)
    fake.add_kubevirt("v1.9.0")
    fake.add_webhook_configuration("validating", "kubevirt-ch-validator", [
        "virtualmachineinstances.validator.kubevirt-ch.io", "virtualmachines.validator.kubevirt-ch.io",
        "replicasets.validator.kubevirt-ch.io", "pools.validator.kubevirt-ch.io"])
    fake.add_webhook_configuration("mutating", "kubevirt-ch-launcher-mutator", ["launcher-pods.mutator.kubevirt-ch.io"])
    yield fake
    fake.stop()


def self_signed(api: FakeKubeAPI, cert_dir) -> AdmissionServer:
    return AdmissionServer(["--self-signed", "--cert-dir", str(cert_dir), "--namespace", "kubevirt-ch",
                            "--config", str(CONFIG), "--kubeconfig", api.kubeconfig])


def bundles(api: FakeKubeAPI) -> list[str]:
    found = []
    for path in (VALIDATOR, MUTATOR):
        found += [w["clientConfig"].get("caBundle", "") for w in api.get(path)["webhooks"]]
    return found


def test_two_replicas_share_one_secret_and_inject_its_ca(api, tmp_path):
    replicas = [self_signed(api, tmp_path / f"certs{i}") for i in range(2)]
    errors: list[BaseException] = []

    def start(r):
        try:
            r.start()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=start, args=(r,)) for r in replicas]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert not errors, errors
        secret = api.get(SECRET)
        assert secret is not None
        ca = base64.b64decode(secret["data"]["ca.crt"])
        assert set(secret["data"]) == {"ca.crt", "ca.key", "tls.crt", "tls.key"}
        ca_file = tmp_path / "trusted-ca.crt"
        ca_file.write_bytes(ca)
        name = "ch-admission.kubevirt-ch.svc"
        certs = {hashlib.sha256(served_cert(r.port, str(ca_file), name)).hexdigest() for r in replicas}
        assert len(certs) == 1  # both replicas serve the same chain, valid for the Service name
        assert bundles(api) == [base64.b64encode(ca).decode()] * 5
        assert (tmp_path / "certs0" / "ca.crt").read_bytes() == ca
    finally:
        for r in replicas:
            assert r.stop() == 0, "\n".join(r.log)


def test_a_restart_reuses_the_secret_and_re_injects_a_reset_ca_bundle(api, tmp_path):
    first = self_signed(api, tmp_path / "a").start()
    assert first.stop() == 0
    secret_version = api.get(SECRET)["metadata"]["resourceVersion"]
    for path in (VALIDATOR, MUTATOR):  # `kubectl apply` of the manifests resets caBundle
        obj = api.get(path)
        for w in obj["webhooks"]:
            w["clientConfig"].pop("caBundle", None)
        api.put(path, obj)
    second = self_signed(api, tmp_path / "b").start()
    try:
        assert api.get(SECRET)["metadata"]["resourceVersion"] == secret_version
        assert api.count("POST", "/api/v1/namespaces/kubevirt-ch/secrets") == 1
        ca = base64.b64decode(api.get(SECRET)["data"]["ca.crt"])
        assert bundles(api) == [base64.b64encode(ca).decode()] * 5
    finally:
        assert second.stop() == 0


def test_an_expiring_serving_certificate_is_renewed_with_the_same_ca(api, tmp_path):
    import datetime

    from admission.certs import Bundle, dns_names, make_ca, make_serving
    ca_cert, ca_key = make_ca()
    cert, key = make_serving(ca_cert, ca_key, dns_names("ch-admission", "kubevirt-ch"),
                             validity=datetime.timedelta(days=2))
    api.put(SECRET, {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                     "metadata": {"name": "ch-admission-tls", "namespace": "kubevirt-ch"},
                     "data": Bundle(ca_cert, ca_key, cert, key).to_secret_data()})
    s = self_signed(api, tmp_path / "c").start()
    try:
        data = api.get(SECRET)["data"]
        assert base64.b64decode(data["ca.crt"]) == ca_cert
        assert base64.b64decode(data["tls.crt"]) != cert
    finally:
        assert s.stop() == 0


def test_self_signed_without_rbac_fails_start_up_clearly(api, tmp_path):
    api.fail_with = 403
    s = self_signed(api, tmp_path / "d")
    with pytest.raises(RuntimeError, match="HTTP 403"):
        s.start(timeout=30)
    assert s.proc.returncode == 1


def test_a_stop_while_the_api_server_is_unreachable_ends_start_up_at_once(tmp_path):
    gone = FakeKubeAPI().start(tmp_path)
    gone.stop()  # its kubeconfig now points at a closed port: start-up keeps retrying for a minute
    s = self_signed(gone, tmp_path / "e").start(until="self-managed certificates not ready")
    assert s.stop() == 0, "\n".join(s.log)  # within stop()'s 10 s, not SIGKILLed after them
    assert any("stopped during start-up" in line for line in s.log)
