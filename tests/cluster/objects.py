"""Objects the cluster stories create, as a user writes them."""

from __future__ import annotations

from typing import Any

from tests.cluster.images import DISK_IMAGE

CH = {"kubevirt-ch.io/hypervisor": "cloud-hypervisor"}


def annotated_vmi(name: str) -> dict[str, Any]:
    """A small annotated VMI: a containerDisk (the local image), cloud-init NoCloud, a masquerade
    interface on the pod network, no display; KubeVirt's defaults for the rest (non-root, 1 vCPU)."""
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": name, "annotations": dict(CH)},
            "spec": {"domain": {"memory": {"guest": "128Mi"},
                                "devices": {"autoattachGraphicsDevice": False,
                                            "disks": [{"name": "containerdisk", "disk": {"bus": "virtio"}},
                                                      {"name": "cloudinitdisk", "disk": {"bus": "virtio"}}],
                                            "interfaces": [{"name": "default", "masquerade": {}}]}},
                     "networks": [{"name": "default", "pod": {}}],
                     "volumes": [{"name": "containerdisk", "containerDisk": {"image": DISK_IMAGE}},
                                 {"name": "cloudinitdisk",
                                  "cloudInitNoCloud": {"userData": "#cloud-config\npassword: ch\n"}}]}}


def annotated_vm(name: str, run_strategy: str = "Always") -> dict[str, Any]:
    """A VirtualMachine whose template is `annotated_vmi(name)` (the annotation on the template)."""
    vmi = annotated_vmi(name)
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": name},
            "spec": {"runStrategy": run_strategy,
                     "template": {"metadata": {"annotations": vmi["metadata"]["annotations"]}, "spec": vmi["spec"]}}}
