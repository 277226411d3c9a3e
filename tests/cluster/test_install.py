"""The README's Install on a real node: the add-on's server runs as the pods of its Deployment,
from the image `make images` built, and does what it does in any cluster (its certificate, its
CA in the webhooks)."""

from __future__ import annotations

import base64

from tests.apiserver.test_install import INSTALLED
from tests.cluster.images import ADMISSION_IMAGE
from tests.cluster.node import NodeCluster, archive_reference


def test_the_readmes_install_runs_the_server_as_its_deployments_pods_from_the_built_image(node_cluster: NodeCluster):
    assert [run.args for run in node_cluster.install_runs] == [
        ("apply", "-k", "addon_manifests/"), ("-n", "kubevirt-ch", "rollout", "status", "deployment/ch-admission")]
    apply, rollout = node_cluster.install_runs
    assert apply.without_sort_notice() == [f"{name} created" for name in INSTALLED]
    assert rollout.rc == 0 and rollout.lines[-1] == 'deployment "ch-admission" successfully rolled out'

    pods = node_cluster.json("get", "pods", "-n", "kubevirt-ch", "-l", "app.kubernetes.io/name=ch-admission")["items"]
    assert len(pods) == 2  # the Deployment's replicas, both on the one node (anti-affinity is preferred only)
    assert node_cluster.images is not None
    for pod in pods:
        assert (pod["status"]["phase"], pod["spec"]["nodeName"]) == ("Running", "node01")
        (status,) = pod["status"]["containerStatuses"]
        assert status["ready"] and status["restartCount"] == 0
        assert status["image"] == ADMISSION_IMAGE
        assert status["imageID"] == archive_reference(node_cluster.images.admission)  # the archive we built
    logs = node_cluster.kubectl("logs", "-n", "kubevirt-ch", pods[0]["metadata"]["name"])
    assert any("INFO admission: serving https://0.0.0.0:8443" in line for line in logs.lines), logs.out

    # what the server did at start in its pod: its Secret, and its CA in both webhook configurations
    secret = node_cluster.json("get", "secret", "ch-admission-tls", "-n", "kubevirt-ch")
    ca = base64.b64decode(secret["data"]["ca.crt"])
    for kind, name in (("validatingwebhookconfiguration", "kubevirt-ch-validator"),
                       ("mutatingwebhookconfiguration", "kubevirt-ch-launcher-mutator")):
        for webhook in node_cluster.json("get", kind, name)["webhooks"]:
            assert base64.b64decode(webhook["clientConfig"]["caBundle"]) == ca, (name, webhook["name"])
