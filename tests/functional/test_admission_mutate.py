"""The pod mutator over HTTPS against a fake Kubernetes API server (real HTTPS, bearer token,
reached through a kubeconfig file): a launcher pod mutated, the patch applied, mutated again."""

from __future__ import annotations

import base64
import json

import pytest

from admission.mutate import RECORD_ANNOTATION
from admission.overhead import ch_overhead, plan_of
from ch_launcher.kubevirt.quantity import MiB, quantity_bytes
from ch_launcher.kubevirt.vmi import parse_vmi
from tests.builders import with_namespace, with_uid
from tests.fakes.fake_kube_api import FakeKubeAPI
from tests.functional.admission_harness import CONFIG, AdmissionServer, client, make_tls, post_review
from tests.unit.admission import builders as b
from tests.unit.admission.jsonpatch import apply_patch

IMAGE = "ghcr.io/kubevirt-ch/ch-launcher:v0.1.0"


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    fake = FakeKubeAPI().start(tmp_path_factory.mktemp("api"))
    fake.add_kubevirt("v1.9.0", bindings={"managedtap": "20Mi"})
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def server(api, tls):
    s = AdmissionServer(["--tls-cert-file", str(tls["cert"]), "--tls-private-key-file", str(tls["key"]),
                         "--config", str(CONFIG), "--kubeconfig", api.kubeconfig]).start()
    yield s
    assert s.stop() == 0, "\n".join(s.log)


def a_vmi(name, namespace="ns1", **kw):
    return b.vmi(with_namespace(namespace), with_uid(f"uid-of-{name}"), name=name, annotations=b.CH, **kw)


def mutate(https, server, pod, namespace="ns1"):
    """Send the pod as the API server does (name empty: generateName) and apply the patch."""
    answer = post_review(https, server.url, b.review(pod, kind="Pod", namespace=namespace, name=""), "/mutate-pod")
    patched = None
    if "patch" in answer:
        assert answer["patchType"] == "JSONPatch"
        patched = apply_patch(pod, json.loads(base64.b64decode(answer["patch"])))
    return answer, patched


def compute(pod):
    return next(c for c in pod["spec"]["containers"] if c["name"] == "compute")


def test_a_launcher_pod_is_mutated_once_and_a_second_pass_changes_nothing(api, server, https):
    vmi = a_vmi("alpha")
    api.add_vmi(vmi)
    pod = b.launcher_pod(vmi, overhead=290 * MiB, limit=True)
    answer, patched = mutate(https, server, pod)
    assert answer["allowed"] is True and patched is not None
    c = compute(patched)
    assert c["image"] == IMAGE
    assert c["command"] == ["/usr/bin/ch-launcher", *compute(pod)["command"][1:]]
    ours = ch_overhead(parse_vmi(vmi), plan_of(parse_vmi(vmi))).total
    assert quantity_bytes(c["resources"]["requests"]["memory"]) == 128 * MiB + ours
    assert quantity_bytes(c["resources"]["limits"]["memory"]) == 128 * MiB + ours
    assert patched["metadata"]["annotations"]["kubevirt.io/memory-overhead-bytes"] == str(ours)
    assert json.loads(patched["metadata"]["annotations"][RECORD_ANNOTATION])["image"]["to"] == IMAGE
    assert patched["spec"]["containers"][1] == pod["spec"]["containers"][1]
    assert api.count("GET", "/apis/kubevirt.io/v1/namespaces/ns1/virtualmachineinstances/alpha") == 1

    again, repatched = mutate(https, server, patched)
    assert again["allowed"] is True and repatched is None and "patch" not in again


def test_a_migration_target_pod_is_mutated_the_same_way(api, server, https):
    vmi = a_vmi("beta")
    api.add_vmi(vmi)
    _, patched = mutate(https, server, b.launcher_pod(vmi, migration=True))
    assert compute(patched)["image"] == IMAGE


def test_a_binding_plugins_declared_overhead_is_read_from_the_kubevirt_cr(api, server, https):
    vmi = a_vmi("gamma")
    vmi["spec"]["domain"]["devices"]["interfaces"] = [{"name": "default", "binding": {"name": "managedtap"}}]
    vmi["spec"]["networks"] = [{"name": "default", "pod": {}}]
    api.add_vmi(vmi)
    _, patched = mutate(https, server, b.launcher_pod(vmi))
    expected = ch_overhead(parse_vmi(vmi), plan_of(parse_vmi(vmi)), bindings={"managedtap": 20 * MiB}).total
    assert patched["metadata"]["annotations"]["kubevirt.io/memory-overhead-bytes"] == str(expected)


def test_a_missing_vmi_fails_closed_with_its_name(server, https):
    answer, _ = mutate(https, server, b.launcher_pod(a_vmi("ghost")))
    assert answer["allowed"] is False
    assert "VirtualMachineInstance ns1/ghost not found" in answer["status"]["message"]


def test_an_api_outage_fails_closed(api, server, https):
    vmi = a_vmi("delta")
    api.add_vmi(vmi)
    api.fail_with = 503
    try:
        answer, _ = mutate(https, server, b.launcher_pod(vmi))
    finally:
        api.fail_with = None
    assert answer["allowed"] is False
    assert "HTTP 503" in answer["status"]["message"]


def test_a_vmi_the_translator_refuses_fails_closed_with_causes(api, server, https):
    vmi = b.undecodable_disks(a_vmi("epsilon"), 2)
    api.add_vmi(vmi)
    answer, _ = mutate(https, server, b.launcher_pod(vmi))
    assert answer["allowed"] is False and answer["status"]["code"] == 422
    assert len(answer["status"]["details"]["causes"]) == 2


def test_pods_that_are_not_ours_are_not_looked_up(api, server, https):
    vmi = b.vmi(name="plain")
    vmi["metadata"].update(namespace="ns1", uid="u")
    pod = b.launcher_pod(vmi)
    answer, patched = mutate(https, server, pod)
    assert answer == {"uid": answer["uid"], "allowed": True} and patched is None
    assert api.count("GET", "/apis/kubevirt.io/v1/namespaces/ns1/virtualmachineinstances/plain") == 0


def test_an_unsupported_kubevirt_version_refuses_launcher_pods_and_new_ch_vmis(tmp_path):
    fake = FakeKubeAPI().start(tmp_path)
    tls = make_tls(tmp_path)
    fake.add_kubevirt("v1.12.0")
    vmi = a_vmi("zeta")
    fake.add_vmi(vmi)
    s = AdmissionServer(["--tls-cert-file", str(tls["cert"]), "--tls-private-key-file", str(tls["key"]),
                         "--config", str(CONFIG), "--kubeconfig", fake.kubeconfig]).start()
    try:
        with client(tls["ca"]) as https:
            answer, _ = mutate(https, s, b.launcher_pod(vmi))
            assert answer["allowed"] is False and "KubeVirt v1.12.0" in answer["status"]["message"]
            created = post_review(https, s.url, b.review(vmi))
            assert created["allowed"] is False
            assert "KubeVirt v1.12.0" in created["status"]["message"]
            assert post_review(https, s.url, b.review(b.vmi()))["allowed"] is True  # others unaffected
            assert https.get(s.url + "/readyz", timeout=5).status_code == 200
    finally:
        assert s.stop() == 0
        fake.stop()
