"""Builders for admission tests: VMIs, their owners, and AdmissionReview requests."""

from __future__ import annotations

import copy
import itertools
from typing import Any

from admission.selection import ANNOTATION, VALUE
from tests import builders
from tests.builders import (
    Option,
    apply,
    new_vmi,
    with_annotations,
    with_cdrom,
    with_container_disk,
    with_memory_request,
    with_spec,
)

_uids = itertools.count(1)

CH = {ANNOTATION: VALUE}


def vmi(*options: Option, name: str = "testvmi", annotations: dict[str, str] | None = None,
        **spec: Any) -> dict[str, Any]:
    """A minimal VMI Cloud Hypervisor runs (a containerDisk, 1 vCPU, 128Mi); `spec` keys replace its
    parts, then `options` apply."""
    return new_vmi(name, with_container_disk("example.org/cirros:latest"), with_memory_request("128Mi"),
                   with_spec(**spec), with_annotations(annotations), *options)


def with_domain(obj: dict[str, Any], **domain: Any) -> dict[str, Any]:
    """A copy of `obj` with these `spec.domain` fields."""
    return apply(copy.deepcopy(obj), builders.with_domain(**domain))


def with_devices(obj: dict[str, Any], **devices: Any) -> dict[str, Any]:
    """A copy of `obj` with these `spec.domain.devices` fields."""
    return apply(copy.deepcopy(obj), builders.with_devices(**devices))


def undecodable_disks(vmi_obj: dict[str, Any], n: int) -> dict[str, Any]:
    """`n` disks whose name is a number: n certain problems, one per disk, whatever the translator covers."""
    out = copy.deepcopy(vmi_obj)
    out["spec"]["domain"]["devices"]["disks"] = [{"name": i, "disk": {}} for i in range(n)]
    return out


def cpu_features(vmi_obj: dict[str, Any], n: int) -> dict[str, Any]:
    """`n` explicit CPU features: Cloud Hypervisor offers the host CPU only, so each is a problem."""
    return with_domain(vmi_obj, cpu={"features": [{"name": f"feature{i}", "policy": "require"} for i in range(n)]})


def cdrom(vmi_obj: dict[str, Any]) -> dict[str, Any]:
    return apply(copy.deepcopy(vmi_obj), with_cdrom("cd", "example.org/iso:latest"))


def template_of(vmi_obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in vmi_obj["metadata"].items() if k not in ("name", "namespace")}
    return {"metadata": meta, "spec": copy.deepcopy(vmi_obj["spec"])}


def vm(vmi_obj: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "testvm", "namespace": "default"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": meta,
            "spec": {"runStrategy": "Always", "template": template_of(vmi_obj)}}


def replicaset(vmi_obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceReplicaSet",
            "metadata": {"name": "testrs", "namespace": "default"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "b"}}, "template": template_of(vmi_obj)}}


def pool(vmi_obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "pool.kubevirt.io/v1beta1", "kind": "VirtualMachinePool",
            "metadata": {"name": "testpool", "namespace": "default"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "b"}},
                     "virtualMachineTemplate": {"metadata": {}, "spec": {"template": template_of(vmi_obj)}}}}


_RESOURCES = {
    "VirtualMachineInstance": ("kubevirt.io", "v1", "virtualmachineinstances"),
    "VirtualMachine": ("kubevirt.io", "v1", "virtualmachines"),
    "VirtualMachineInstanceReplicaSet": ("kubevirt.io", "v1", "virtualmachineinstancereplicasets"),
    "VirtualMachinePool": ("pool.kubevirt.io", "v1beta1", "virtualmachinepools"),
    "VirtualMachineInstanceMigration": ("kubevirt.io", "v1", "virtualmachineinstancemigrations"),
    "Pod": ("", "v1", "pods"),
}


def vmim(vmi_name: str = "testvmi", name: str = "", **spec: Any) -> dict[str, Any]:
    """A VirtualMachineInstanceMigration of `vmi_name` (`virtctl migrate` names it
    `kubevirt-migrate-vm-` + a generated suffix)."""
    meta: dict[str, Any] = {"namespace": "default"}
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = "kubevirt-migrate-vm-"
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration", "metadata": meta,
            "spec": {"vmiName": vmi_name, **spec}}


def review(obj: Any, operation: str = "CREATE", old: Any = None, kind: str | None = None,
           namespace: str = "default", dry_run: bool = False, name: str | None = None) -> dict[str, Any]:
    """An AdmissionReview v1 request as the API server sends it."""
    kind = kind or (obj.get("kind") if isinstance(obj, dict) else None) or "VirtualMachineInstance"
    group, version, resource = _RESOURCES.get(kind, ("example.org", "v1", kind.lower() + "s"))
    if name is None:
        name = obj.get("metadata", {}).get("name", "") if isinstance(obj, dict) else ""
    request: dict[str, Any] = {
        "uid": f"uid-{next(_uids)}",
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": resource},
        "name": name,
        "namespace": namespace,
        "operation": operation,
        "userInfo": {"username": "system:serviceaccount:kubevirt:kubevirt-controller", "groups": []},
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": f"{operation.title()}Options"},
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def launcher_pod(vmi_obj: dict[str, Any], overhead: int | None = 290 * 2**20, memory: str = "128Mi",
                 limit: bool = False, migration: bool = False, hugepages: bool = False,
                 nic: bool = True) -> dict[str, Any]:
    """A launcher pod as virt-controller renders it for `vmi_obj` (template.go@v1.9.0, abridged; main
    moves the monitor's flags from `command` to `args`):
    the compute container's memory is the guest's plus `overhead` (request, and limit if any), and
    `overhead` is in `kubevirt.io/memory-overhead-bytes` (None: no annotation, as with old KubeVirt).
    With `nic` (a virtio interface, as the default pod network gives every VMI that does not set
    `autoattachPodInterface: false`) the devices `tun` and `vhost-net` are requested and limited
    beside `kvm`, as the real virt-controller renders them (tests/cluster shows it on a node)."""
    from ch_launcher.kubevirt.quantity import quantity_bytes
    meta = vmi_obj["metadata"]
    guest = quantity_bytes(memory)
    kv = overhead if overhead is not None else 0
    request = kv if hugepages else guest + kv
    resources: dict[str, Any] = {"requests": {"memory": str(request), "cpu": "100m",
                                              "devices.kubevirt.io/kvm": "1", "ephemeral-storage": "50M"},
                                 "limits": {"devices.kubevirt.io/kvm": "1"}}
    if nic:
        for kind in ("requests", "limits"):
            resources[kind].update({"devices.kubevirt.io/tun": "1", "devices.kubevirt.io/vhost-net": "1"})
    if limit:
        resources["limits"]["memory"] = str(request)
    if hugepages:
        resources["requests"]["hugepages-2Mi"] = memory
        resources["limits"]["hugepages-2Mi"] = memory
    annotations = dict(meta.get("annotations") or {})
    annotations.update({"kubevirt.io/domain": meta["name"], "kubectl.kubernetes.io/default-container": "compute",
                        "kubevirt.io/migrationTransportUnix": "true"})
    if overhead is not None:
        annotations["kubevirt.io/memory-overhead-bytes"] = str(overhead)
    labels = {"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": meta.get("uid", "vmi-uid"),
              "vmi.kubevirt.io/id": meta["name"]}
    if migration:
        labels["kubevirt.io/migrationJobUID"] = "migration-uid"
    command = ["/usr/bin/virt-launcher-monitor", "--qemu-timeout", "288s", "--name", meta["name"],
               "--uid", meta.get("uid", "vmi-uid"), "--namespace", meta.get("namespace", "default"),
               "--kubevirt-share-dir", "/var/run/kubevirt", "--ephemeral-disk-dir",
               "/var/run/kubevirt-ephemeral-disks", "--container-disk-dir", "/var/run/kubevirt/container-disks",
               "--grace-period-seconds", "45", "--hook-sidecars", "0", "--ovmf-path", "/usr/share/OVMF",
               "--disk-memory-limit", "2097152000", "--hypervisor", "kvm"]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": f"virt-launcher-{meta['name']}-", "namespace": meta.get("namespace", "default"),
                     "labels": labels, "annotations": annotations,
                     "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                          "name": meta["name"], "uid": meta.get("uid", "vmi-uid"),
                                          "controller": True, "blockOwnerDeletion": True}]},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/arch": "amd64", "kubevirt.io/schedulable": "true"},
            "initContainers": [{"name": "container-disk-binary", "image": "quay.io/kubevirt/virt-launcher:v1.9.0",
                                "command": ["/usr/bin/cp", "/usr/bin/container-disk", "/init/usr/bin/container-disk"]}],
            "containers": [
                {"name": "compute", "image": "quay.io/kubevirt/virt-launcher:v1.9.0", "imagePullPolicy": "IfNotPresent",
                 "command": command, "resources": resources},
                {"name": "volumecontainerdisk", "image": "example.org/cirros:latest",
                 "command": ["/usr/bin/container-disk"], "resources": {"requests": {"memory": "1M"}}},
            ],
        },
    }
