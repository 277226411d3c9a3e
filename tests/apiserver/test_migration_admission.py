"""`evictionStrategy` through the real API server (ch_launcher/convert/policy.py, README's
lifecycle table): admitted for Cloud Hypervisor VMIs that can live-migrate, refused with KubeVirt's
LiveMigratable reason and the field's path for those that cannot (a drain would block on
migrations that fail at once), for VMIs and for the VMI templates of VirtualMachines. VMIs on QEMU
are KubeVirt's business. Server-side dry runs: virt-api's webhooks and the add-on's both judge."""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = pytest.mark.apiserver

CH_ANNOTATIONS = {"kubevirt-ch.io/hypervisor": "cloud-hypervisor"}
CONTAINER_DISK = {"devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}}
ROOT = [{"name": "root", "containerDisk": {"image": "quay.io/containerdisks/fedora:41"}}]
READONLY_ROOT = {"devices": {"disks": [{"name": "root", "disk": {"bus": "virtio", "readonly": True}}]}}


def vmi(name: str, strategy: str, disks: dict[str, Any] | None = None, ch: bool = True) -> dict[str, Any]:
    # masquerade: the pod network's default bridge binding cannot migrate (KubeVirt's own rule)
    devices = {"autoattachGraphicsDevice": False, "interfaces": [{"name": "default", "masquerade": {}}]}
    spec: dict[str, Any] = {"evictionStrategy": strategy, "networks": [{"name": "default", "pod": {}}],
                            "domain": {"memory": {"guest": "128Mi"}, "devices": devices}}
    if disks is not None:
        devices.update(copy.deepcopy(disks["devices"]))
        spec["volumes"] = copy.deepcopy(ROOT)
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if ch:
        meta["annotations"] = dict(CH_ANNOTATIONS)
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "metadata": meta, "spec": spec}


def vm(name: str, strategy: str, disks: dict[str, Any] | None = None) -> dict[str, Any]:
    template = vmi(name, strategy, disks)
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"runStrategy": "Halted",
                     "template": {"metadata": template["metadata"] | {"name": None, "namespace": None},
                                  "spec": template["spec"]}}}


def dry_run(cluster, obj: dict[str, Any]):
    for key in ("name", "namespace"):
        if obj["kind"] == "VirtualMachine":
            obj["spec"]["template"]["metadata"].pop(key, None)
    return cluster.kubectl("create", "--dry-run=server", "-f", "-", input=cluster.yaml(obj))


@pytest.mark.parametrize("strategy", ["LiveMigrate", "LiveMigrateIfPossible"])
@pytest.mark.parametrize("disks", [None, READONLY_ROOT], ids=["no-disks", "read-only-containerdisk"])
def test_a_migratable_cloud_hypervisor_vmi_may_be_evicted_by_live_migration(cluster, strategy, disks):
    r = dry_run(cluster, vmi("evict-movable", strategy, disks))
    assert (r.rc, r.lines) == (0, ["virtualmachineinstance.kubevirt.io/evict-movable created (server dry run)"]), r.out


@pytest.mark.parametrize("strategy", ["LiveMigrate", "LiveMigrateIfPossible"])
def test_a_cloud_hypervisor_vmi_that_cannot_migrate_is_refused_naming_the_field_and_kubevirts_reason(cluster, strategy):
    r = dry_run(cluster, vmi("evict-stuck", strategy, CONTAINER_DISK))
    assert r.rc == 1
    assert f"spec.evictionStrategy is not supported: {strategy}: Cloud Hypervisor cannot live-migrate this VMI" in r.out
    assert "DisksNotLiveMigratable: volume 'root' (containerDisk) is local to the pod" in r.out
    assert "use None or External" in r.out


def test_a_virtual_machines_template_is_judged_at_its_own_path(cluster):
    r = dry_run(cluster, vm("evict-stuck-vm", "LiveMigrate", CONTAINER_DISK))
    assert r.rc == 1
    assert "spec.template.spec.evictionStrategy is not supported: LiveMigrate: Cloud Hypervisor cannot live-migrate" \
        in r.out
    ok = dry_run(cluster, vm("evict-movable-vm", "LiveMigrate"))
    assert (ok.rc, ok.lines) == (0, ["virtualmachine.kubevirt.io/evict-movable-vm created (server dry run)"]), ok.out


@pytest.mark.parametrize("strategy", ["None", "External"])
def test_eviction_without_migration_is_admitted_for_any_cloud_hypervisor_vmi(cluster, strategy):
    r = dry_run(cluster, vmi("evict-stays", strategy, CONTAINER_DISK))
    assert (r.rc, r.lines) == (0, ["virtualmachineinstance.kubevirt.io/evict-stays created (server dry run)"]), r.out


def test_a_vmi_on_qemu_is_left_to_kubevirt(cluster):
    r = dry_run(cluster, vmi("evict-on-qemu", "LiveMigrate", CONTAINER_DISK, ch=False))
    assert (r.rc, r.lines) == (0, ["virtualmachineinstance.kubevirt.io/evict-on-qemu created (server dry run)"]), r.out


# --- the cluster's default eviction strategy -----------------------------------------------------


@contextlib.contextmanager
def default_eviction(cluster, strategy: str) -> Iterator[None]:
    """The KubeVirt CR's spec.configuration.evictionStrategy set, and the admission server restarted
    (it reads the CR at start-up, then every 5 minutes); both undone afterwards."""
    def set_to(value: str | None) -> None:
        cluster.ok("patch", "kubevirt", "kubevirt", "-n", "kubevirt", "--type=merge",
                   "-p", json.dumps({"spec": {"configuration": {"evictionStrategy": value}}}))
        with cluster.admission_stopped():
            pass

    set_to(strategy)
    try:
        yield
    finally:
        set_to(None)


def test_the_clusters_migrating_default_refuses_a_vmi_that_cannot_migrate_and_warns_its_vm(cluster):
    """virt-api writes the KubeVirt CR's evictionStrategy into every new VMI without its own, before
    the webhooks judge it (setDefaultEvictionStrategy), but not into a VM's template: the VMI is
    refused saying where its strategy came from, the VM is warned that its VMIs will be."""
    bare = vmi("evict-default", "LiveMigrate", CONTAINER_DISK)
    del bare["spec"]["evictionStrategy"]
    movable = vmi("evict-default-ok", "LiveMigrate", READONLY_ROOT)
    del movable["spec"]["evictionStrategy"]
    machine = vm("evict-default-vm", "LiveMigrate", CONTAINER_DISK)
    del machine["spec"]["template"]["spec"]["evictionStrategy"]
    with default_eviction(cluster, "LiveMigrate"):
        r = dry_run(cluster, bare)
        ok = dry_run(cluster, movable)
        warned = dry_run(cluster, machine)
    assert r.rc == 1 and r.lines == [
        "The request is invalid: spec.evictionStrategy: spec.evictionStrategy is not supported: LiveMigrate (the "
        "cluster's default, the KubeVirt CR's configuration.evictionStrategy, which virt-api sets in every VMI without "
        "its own): Cloud Hypervisor cannot live-migrate this VMI (DisksNotLiveMigratable: volume 'root' "
        "(containerDisk) is local to the pod and writable: Cloud Hypervisor cannot copy disks during a migration), so "
        "a node drain would block on migrations that fail; use None or External, or make the VMI migratable"], r.out
    assert (ok.rc, ok.lines) == (0, ["virtualmachineinstance.kubevirt.io/evict-default-ok created (server dry run)"]), \
        ok.out
    assert warned.rc == 0 and warned.lines == [
        "Warning: spec.template.spec.evictionStrategy is not set, so virt-api will set the cluster's default "
        "LiveMigrate (the KubeVirt CR's configuration.evictionStrategy) in the VMI, which is then refused: Cloud "
        "Hypervisor cannot live-migrate it (DisksNotLiveMigratable: volume 'root' (containerDisk) is local to the pod "
        "and writable: Cloud Hypervisor cannot copy disks during a migration), so a node drain would block on it; set "
        "None (the VM stops on a drain) or External, or make the VMI migratable",
        "virtualmachine.kubevirt.io/evict-default-vm created (server dry run)"], warned.out
