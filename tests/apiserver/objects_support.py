"""The objects the API-server stories create, as a user writes them (a VMI, a VM, a VMI replica
set, a pool, and a launcher pod as virt-controller renders it), how they create them, what the
install prints, and how many reviews the server has answered."""

from __future__ import annotations

import re
from typing import Any

from tests.apiserver.cluster import Cluster, Run
from tests.builders import (
    new_vmi,
    with_annotations,
    with_cdrom,
    with_container_disk,
    with_devices,
    with_masquerade,
    with_memory,
    with_spec,
)

CH = {"kubevirt-ch.io/hypervisor": "cloud-hypervisor"}


def spec(graphics: bool = False, cdrom: bool = False, memory: str | None = "128Mi", **extra: Any) -> dict[str, Any]:
    """A VMI spec Cloud Hypervisor runs; `graphics` leaves KubeVirt's default display on (a
    warning), `cdrom` adds a CD-ROM (a denial)."""
    options = [with_container_disk("quay.io/containerdisks/fedora:latest", name="root"), with_masquerade()]
    if not graphics:
        options.append(with_devices(autoattachGraphicsDevice=False))
    if cdrom:
        options.append(with_cdrom("iso", "example.org/installer:latest"))
    if memory:
        options.append(with_memory(memory))
    made: dict[str, Any] = new_vmi("template", *options, with_spec(**extra))["spec"]
    return made


def vmi(name: str, annotations: dict[str, str] | None = CH, **kw: Any) -> dict[str, Any]:
    return new_vmi(name, with_annotations(annotations), with_spec(**spec(**kw)))


def vm(name: str, template_annotations: dict[str, str] | None = CH, own: dict[str, str] | None = None,
       **kw: Any) -> dict[str, Any]:
    template: dict[str, Any] = {"spec": spec(**kw)}
    if template_annotations is not None:
        template["metadata"] = {"annotations": dict(template_annotations)}
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if own is not None:
        meta["annotations"] = dict(own)
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": meta,
            "spec": {"runStrategy": "Halted", "template": template}}


def replicaset(name: str, **kw: Any) -> dict[str, Any]:
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceReplicaSet",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}, "annotations": dict(CH)}, "spec": spec(**kw)}}}


def pool(name: str, **kw: Any) -> dict[str, Any]:
    return {"apiVersion": "pool.kubevirt.io/v1beta1", "kind": "VirtualMachinePool",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "virtualMachineTemplate": {
                         "metadata": {"labels": {"app": name}},
                         "spec": {"runStrategy": "Halted",
                                  "template": {"metadata": {"labels": {"app": name}, "annotations": dict(CH)},
                                               "spec": spec(**kw)}}}}}


def create(cluster: Cluster, *objects: dict[str, Any]) -> Run:
    return cluster.kubectl("create", "-f", "-", input=cluster.yaml(*objects))


def launcher_pod(owner: dict[str, Any]) -> dict[str, Any]:
    """The compute container of a launcher pod as virt-controller renders it at the reference's
    commit (kubevirt pkg/virt-controller/services/template.go@d923fdb815cd: the monitor's flags
    in `args`; 128Mi guest + 290Mi overhead; the VMI's annotations copied)."""
    meta = owner["metadata"]
    overhead = 290 * 2**20
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "generateName": f"virt-launcher-{meta['name']}-", "namespace": meta["namespace"],
        "labels": {"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": meta["uid"],
                   "vmi.kubevirt.io/id": meta["name"]},
        "annotations": {**meta.get("annotations", {}), "kubevirt.io/domain": meta["name"],
                        "kubevirt.io/memory-overhead-bytes": str(overhead),
                        "kubectl.kubernetes.io/default-container": "compute"},
        "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "name": meta["name"],
                             "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                 "nodeSelector": {"kubernetes.io/arch": "amd64", "kubevirt.io/schedulable": "true"},
                 "containers": [{
                     "name": "compute", "image": "quay.io/kubevirt/virt-launcher:v1.9.0",
                     "imagePullPolicy": "IfNotPresent", "command": ["/usr/bin/virt-launcher-monitor"],
                     "args": ["--qemu-timeout", "288s", "--name", meta["name"], "--uid", meta["uid"],
                              "--namespace", meta["namespace"], "--kubevirt-share-dir", "/var/run/kubevirt",
                              "--ephemeral-disk-dir", "/var/run/kubevirt-ephemeral-disks",
                              "--container-disk-dir", "/var/run/kubevirt/container-disks",
                              "--grace-period-seconds", "45", "--hook-sidecars", "0",
                              "--ovmf-path", "/usr/share/OVMF", "--disk-memory-limit", "2097152000",
                              "--hypervisor", "kvm"],
                     "resources": {"requests": {"cpu": "100m", "memory": str(128 * 2**20 + overhead)},
                                   "limits": {"memory": str(128 * 2**20 + overhead)}}}]}}


INSTALLED = [
    "validatingwebhookconfiguration.admissionregistration.k8s.io/kubevirt-ch-validator",
    "mutatingwebhookconfiguration.admissionregistration.k8s.io/kubevirt-ch-launcher-mutator",
    "namespace/kubevirt-ch",
    "serviceaccount/ch-admission",
    "clusterrole.rbac.authorization.k8s.io/kubevirt-ch:ch-admission",
    "clusterrolebinding.rbac.authorization.k8s.io/kubevirt-ch:ch-admission",
    "clusterrole.rbac.authorization.k8s.io/kubevirt-ch:ch-admission-cabundle",
    "clusterrolebinding.rbac.authorization.k8s.io/kubevirt-ch:ch-admission-cabundle",
    "role.rbac.authorization.k8s.io/ch-admission-certs",
    "rolebinding.rbac.authorization.k8s.io/ch-admission-certs",
    "role.rbac.authorization.k8s.io/ch-admission-events",
    "rolebinding.rbac.authorization.k8s.io/ch-admission-events",
    "configmap/ch-admission-config",
    "priorityclass.scheduling.k8s.io/kubevirt-ch-critical",
    "deployment.apps/ch-admission",
    "service/ch-admission",
    "poddisruptionbudget.policy/ch-admission",
    "validatingadmissionpolicy.admissionregistration.k8s.io/kubevirt-ch-unserved-namespaces",
    "validatingadmissionpolicybinding.admissionregistration.k8s.io/kubevirt-ch-unserved-namespaces",
]


def reviews(cluster: Cluster) -> int:
    """Admission requests the server has answered so far (both paths, every verdict)."""
    return int(sum(float(v) for v in re.findall(r'^ch_admission_requests_total\{path="/(?:validate|mutate-pod)",'
                                                r'verdict="[^"]+"\} (\S+)$', cluster.metrics(), re.MULTILINE)))
