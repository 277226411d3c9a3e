"""The webhooks as a user meets them on a real node: a refusal printed as the README shows it, and
a VMI without the annotation left to KubeVirt's own path beside the add-on's."""

from __future__ import annotations

from typing import Any

from admission.mutate import RECORD_ANNOTATION
from tests.apiserver.readme import use_refused
from tests.cluster.node import NodeCluster
from tests.cluster.objects import CH, annotated_vmi


def test_a_refused_vm_prints_what_the_readme_shows(node_cluster: NodeCluster):
    obj, shown = use_refused()
    r = node_cluster.kubectl("apply", "-f", "-", input=node_cluster.yaml(obj))
    assert (r.rc, r.lines) == (1, shown)
    assert node_cluster.kubectl("get", "vm", obj["metadata"]["name"]).rc == 1  # nothing was created


def test_a_vmi_without_the_annotation_is_left_to_kubevirt(node_cluster: NodeCluster):
    """A virtio NIC: its pod keeps virt-launcher with KubeVirt's overhead and its vhost-net request,
    so on this node, which has no /dev/vhost-net, it stays Pending, as any QEMU VMI with a virtio
    NIC would here. (One that QEMU can run here, running beside Cloud Hypervisor VMIs:
    test_beside_qemu.py.)"""
    plain = annotated_vmi("plain")
    del plain["metadata"]["annotations"]
    r = node_cluster.kubectl("create", "-f", "-", input=node_cluster.yaml(plain))
    assert (r.rc, r.lines) == (0, ["virtualmachineinstance.kubevirt.io/plain created"]), r.out
    try:
        def pending_pod() -> dict[str, Any] | None:
            created = node_cluster.json("get", "vmi", "plain")
            pods = node_cluster.json("get", "pods", "-l", f"kubevirt.io/created-by={created['metadata']['uid']}")
            conditions = {c["type"]: c for pod in pods["items"] for c in pod["status"].get("conditions", [])}
            scheduled = conditions.get("PodScheduled", {})
            return pods["items"][0] if scheduled.get("reason") == "Unschedulable" else None
        pod = node_cluster.wait_for(pending_pod, "the plain VMI's pod to be unschedulable", timeout=60)
        compute = next(c for c in pod["spec"]["containers"] if c["name"] == "compute")
        assert compute["image"] == node_cluster.launcher_image()
        assert compute["command"][0] == "/usr/bin/virt-launcher-monitor"
        assert compute["resources"]["requests"]["devices.kubevirt.io/vhost-net"] == "1"
        assert RECORD_ANNOTATION not in pod["metadata"]["annotations"]
        assert not set(CH) & set(pod["metadata"]["annotations"])
        assert not any(v["name"] == "kubevirt-ch-vhost-net" for v in pod["spec"]["volumes"])
        condition = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
        assert "Insufficient devices.kubevirt.io/vhost-net" in condition["message"]
        assert node_cluster.json("get", "vmi", "plain")["status"]["phase"] in ("Pending", "Scheduling")
    finally:
        node_cluster.kubectl("delete", "vmi", "plain", "--wait=false")
