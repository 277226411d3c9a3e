"""Small objects of every kind the webhooks and policies look at, selected or not, odd shapes included."""

from __future__ import annotations

import copy
from typing import Any

from tests.builders import new_vmi, with_annotations

KEY = "kubevirt-ch.io/hypervisor"
CH = {KEY: "cloud-hypervisor"}


def meta(annotations: dict | None = None, labels: dict | None = None, name: str = "x") -> dict[str, Any]:
    m: dict[str, Any] = {"name": name, "namespace": "default"}
    if annotations is not None:
        m["annotations"] = dict(annotations)
    if labels is not None:
        m["labels"] = dict(labels)
    return m


def vmi(annotations: dict | None = None) -> dict[str, Any]:
    return new_vmi("x", with_annotations(annotations))


def template(annotations: dict | None = None) -> dict[str, Any]:
    t: dict[str, Any] = {"spec": {"domain": {"devices": {}}}}
    if annotations is not None:
        t["metadata"] = {"annotations": dict(annotations)}
    return t


def vm(template_annotations: dict | None = None, own: dict | None = None) -> dict[str, Any]:
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": meta(own),
            "spec": {"runStrategy": "Always", "template": template(template_annotations)}}


def replicaset(template_annotations: dict | None = None, own: dict | None = None) -> dict[str, Any]:
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceReplicaSet", "metadata": meta(own),
            "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "b"}},
                     "template": template(template_annotations)}}


def pool(template_annotations: dict | None = None, own: dict | None = None,
         vm_template_own: dict | None = None) -> dict[str, Any]:
    vm_template: dict[str, Any] = {"spec": {"runStrategy": "Always", "template": template(template_annotations)}}
    if vm_template_own is not None:
        vm_template["metadata"] = {"annotations": dict(vm_template_own)}
    return {"apiVersion": "pool.kubevirt.io/v1beta1", "kind": "VirtualMachinePool", "metadata": meta(own),
            "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}},
                     "virtualMachineTemplate": vm_template}}


def launcher_pod(annotations: dict | None = None, labels: dict | None = None) -> dict[str, Any]:
    labels = {"kubevirt.io": "virt-launcher"} if labels is None else labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta(annotations, labels),
            "spec": {"containers": [{"name": "compute", "image": "virt-launcher"}]}}


def without(obj: dict, *path: str) -> dict:
    """A copy of obj with the field at path removed (odd shapes: no spec, no template, ...)."""
    out = copy.deepcopy(obj)
    cur = out
    for key in path[:-1]:
        cur = cur[key]
    cur.pop(path[-1], None)
    return out


# (kind, object, selected?) for CREATE: "selected" = the object or the VMI template it stamps out
# carries the annotation with the value cloud-hypervisor.
OTHER = {KEY: "qemu"}
UNRELATED = {"description": "cloud-hypervisor"}
SELECTED_ON_CREATE = [
    ("VirtualMachineInstance", vmi(CH), True),
    ("VirtualMachineInstance", vmi(), False),
    ("VirtualMachineInstance", vmi(OTHER), False),
    ("VirtualMachineInstance", vmi(UNRELATED), False),
    ("VirtualMachineInstance", vmi({}), False),
    ("VirtualMachine", vm(CH), True),
    ("VirtualMachine", vm(), False),
    ("VirtualMachine", vm(OTHER), False),
    ("VirtualMachine", vm({}), False),
    ("VirtualMachine", without(vm(), "spec", "template"), False),
    ("VirtualMachine", without(vm(), "spec"), False),
    ("VirtualMachineInstanceReplicaSet", replicaset(CH), True),
    ("VirtualMachineInstanceReplicaSet", replicaset(), False),
    ("VirtualMachineInstanceReplicaSet", without(replicaset(), "spec", "template"), False),
    ("VirtualMachinePool", pool(CH), True),
    ("VirtualMachinePool", pool(), False),
    ("VirtualMachinePool", pool(OTHER), False),
    ("VirtualMachinePool", without(pool(), "spec", "virtualMachineTemplate", "spec"), False),
    ("VirtualMachinePool", without(pool(), "spec", "virtualMachineTemplate"), False),
    ("VirtualMachinePool", without(pool(), "spec"), False),
    ("Pod", launcher_pod(CH), True),
    ("Pod", launcher_pod(), False),
    ("Pod", launcher_pod(OTHER), False),
]
# Owners annotated on themselves (not on the VMI template): their VMIs would not select Cloud
# Hypervisor, but the validating webhook still sends them so that the server can say so.
OWNER_ANNOTATED_ON_ITSELF = [
    ("VirtualMachine", vm(own=CH)),
    ("VirtualMachineInstanceReplicaSet", replicaset(own=CH)),
    ("VirtualMachinePool", pool(own=CH)),
    ("VirtualMachinePool", pool(vm_template_own=CH)),
]
