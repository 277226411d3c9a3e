"""Migrations through the real API server, with virt-api's webhooks judging beside the add-on's.

`evictionStrategy` (ch_launcher/convert/policy.py, docs/features.md): admitted for Cloud
Hypervisor VMIs that can live-migrate, refused with KubeVirt's LiveMigratable reason and the
field's path for those that cannot (a drain would block on migrations that fail at once), for
VMIs and for the VMI templates of VirtualMachines (server-side dry runs). VirtualMachineInstance-
Migrations (admission/migrations.py): refused in virt-api's words for a Cloud Hypervisor VMI that
cannot migrate, through `kubectl create` and `virtctl migrate`; admitted otherwise. VMIs on QEMU
are KubeVirt's business."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.apiserver.cluster import REPO
from tests.apiserver.readme import row_showing
from tests.builders import new_vmi, with_annotations, with_devices, with_masquerade, with_memory, with_spec

pytestmark = pytest.mark.apiserver

CH_ANNOTATIONS = {"kubevirt-ch.io/hypervisor": "cloud-hypervisor"}
CONTAINER_DISK = {"devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}}
ROOT = [{"name": "root", "containerDisk": {"image": "quay.io/containerdisks/fedora:41"}}]
READONLY_ROOT = {"devices": {"disks": [{"name": "root", "disk": {"bus": "virtio", "readonly": True}}]}}


def vmi(name: str, strategy: str, disks: dict[str, Any] | None = None, ch: bool = True) -> dict[str, Any]:
    # masquerade: the pod network's default bridge binding cannot migrate (KubeVirt's own rule)
    root = [with_devices(**disks["devices"]), with_spec(volumes=ROOT)] if disks is not None else []
    return new_vmi(name, with_spec(evictionStrategy=strategy), with_masquerade(),
                   with_devices(autoattachGraphicsDevice=False), with_memory("128Mi"), *root,
                   with_annotations(CH_ANNOTATIONS if ch else None))


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
    row_showing(r.lines[0])


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


# --- migrations: what Cloud Hypervisor cannot migrate is refused when the migration is created ----

MIGRATION_REFUSAL = ("Cannot migrate VMI, Reason: DisksNotLiveMigratable, Message: volume 'root' (containerDisk) is "
                     "local to the pod and writable: Cloud Hypervisor cannot copy disks during a migration")
MIGRATION_WEBHOOK = '"migrations.validator.kubevirt-ch.io"'
# virt-api lets virt-handler write only VMIs of its own node (vmi-update-admitter.go: the node name
# comes from the token's extra info)
NODE = "node01"
CONTROLLER = ("--as=system:serviceaccount:kubevirt:kubevirt-controller", "--as-group=system:masters",
              "--as-group=system:authenticated")
HANDLER = ("--as=system:serviceaccount:kubevirt:kubevirt-handler", "--as-group=system:masters",
           "--as-group=system:authenticated", f"--as-user-extra=authentication.kubernetes.io/node-name={NODE}")


def vmim(name: str, vmi_name: str) -> dict[str, Any]:
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"vmiName": vmi_name}}


def running(cluster, obj: dict[str, Any]) -> None:
    """Create the VMI, then write it as virt-controller (Scheduled on its node) and virt-handler
    (Running) do: no controllers run here."""
    cluster.ok("create", "-f", "-", input=cluster.yaml(obj))
    for who, status in ((CONTROLLER, {"phase": "Scheduled", "nodeName": NODE}), (HANDLER, {"phase": "Running"})):
        stored = cluster.json("get", "vmi", obj["metadata"]["name"], "-n", "default")
        stored.setdefault("status", {}).update(status)
        cluster.ok("replace", *who, "-f", "-", input=cluster.yaml(stored))


def test_kubectl_create_of_a_migration_cloud_hypervisor_cannot_carry_out_prints_the_refusal(cluster, tmp_path):
    running(cluster, vmi("mig-stuck", "None", CONTAINER_DISK))
    path = tmp_path / "vmim.yaml"
    path.write_text(cluster.yaml(vmim("mig-stuck-1", "mig-stuck")))
    r = cluster.kubectl("create", "-f", str(path))
    assert r.rc == 1
    assert r.lines == [(f'Error from server: error when creating "{path}": admission webhook '
                        f'{MIGRATION_WEBHOOK} denied the request: {MIGRATION_REFUSAL}')], r.out
    assert cluster.kubectl("get", "vmim", "mig-stuck-1", "-n", "default").rc == 1, "nothing was created"
    row_showing(r.lines[0])


def test_a_migratable_cloud_hypervisor_vmi_may_migrate(cluster):
    running(cluster, vmi("mig-movable", "LiveMigrate", READONLY_ROOT))
    r = cluster.kubectl("create", "-f", "-", input=cluster.yaml(vmim("mig-movable-1", "mig-movable")))
    assert (r.rc, r.lines) == (0, ["virtualmachineinstancemigration.kubevirt.io/mig-movable-1 created"]), r.out


def test_the_migration_of_a_vmi_on_qemu_is_untouched(cluster):
    running(cluster, vmi("mig-on-qemu", "None", CONTAINER_DISK, ch=False))
    r = cluster.kubectl("create", "-f", "-", input=cluster.yaml(vmim("mig-on-qemu-1", "mig-on-qemu")))
    assert (r.rc, r.lines) == (0, ["virtualmachineinstancemigration.kubevirt.io/mig-on-qemu-1 created"]), r.out


def test_virtctl_migrate_prints_the_refusal(cluster):
    """`virtctl migrate` asks virt-api's subresource API, which creates the VMIM: our refusal
    reaches the user through virt-api's own error."""
    from tests.conftest import require_shared

    unpack = require_shared(REPO.parent / "shared" / "unpack.sh")
    virtctl = subprocess.run([str(unpack), "kubevirt/virtctl"], capture_output=True, text=True,
                             check=True).stdout.strip()
    machine = vm("mig-vm", "None", CONTAINER_DISK)
    for key in ("name", "namespace"):
        machine["spec"]["template"]["metadata"].pop(key, None)
    cluster.ok("create", "-f", "-", input=cluster.yaml(machine))
    running(cluster, vmi("mig-vm", "None", CONTAINER_DISK))
    proc = cluster._in_netns([virtctl, "migrate", "mig-vm", "-n", "default"])
    assert proc.returncode == 1
    # (before it, virtctl prints "failed to validate metadata: $Format:%h$ is not a valid semver
    # identifier", about a version stamp of this offline-built control plane)
    assert proc.stdout.splitlines()[-1] == (f'Error migrating VirtualMachine Internal error occurred: admission '
                                            f'webhook {MIGRATION_WEBHOOK} denied the request: {MIGRATION_REFUSAL}'), \
        proc.stdout
    row_showing(proc.stdout.splitlines()[-1])
    listed = cluster.json("get", "vmim", "-n", "default")["items"]
    assert not [m for m in listed if m["spec"]["vmiName"] == "mig-vm"], "nothing was created"


def test_with_the_server_down_a_migration_goes_through(cluster):
    """failurePolicy Ignore: no migration is held up by the add-on being away; the source launcher
    fails one Cloud Hypervisor cannot carry out (docs/migration.md §4)."""
    running(cluster, vmi("mig-while-down", "None", CONTAINER_DISK))
    with cluster.admission_stopped():
        r = cluster.kubectl("create", "-f", "-", input=cluster.yaml(vmim("mig-while-down-1", "mig-while-down")))
    assert (r.rc, r.lines) == (0, ["virtualmachineinstancemigration.kubevirt.io/mig-while-down-1 created"]), r.out


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
        ("The request is invalid: spec.evictionStrategy: spec.evictionStrategy is not supported: LiveMigrate (the "
         "cluster's default, the KubeVirt CR's configuration.evictionStrategy, which virt-api sets in every VMI "
         "without its own): Cloud Hypervisor cannot live-migrate this VMI (DisksNotLiveMigratable: volume 'root' "
         "(containerDisk) is local to the pod and writable: Cloud Hypervisor cannot copy disks during a migration), so "
         "a node drain would block on migrations that fail; use None or External, or make the VMI migratable")], r.out
    assert row_showing(r.lines[0]) == row_showing(warned.lines[0])
    assert (ok.rc, ok.lines) == (0, ["virtualmachineinstance.kubevirt.io/evict-default-ok created (server dry run)"]), \
        ok.out
    assert warned.rc == 0 and warned.lines == [
        ("Warning: spec.template.spec.evictionStrategy is not set, so virt-api will set the cluster's default "
         "LiveMigrate (the KubeVirt CR's configuration.evictionStrategy) in the VMI, which is then refused: Cloud "
         "Hypervisor cannot live-migrate it (DisksNotLiveMigratable: volume 'root' (containerDisk) is local to the pod "
         "and writable: Cloud Hypervisor cannot copy disks during a migration), so a node drain would block on it; set "
         "None (the VM stops on a drain) or External, or make the VMI migratable"),
        "virtualmachine.kubevirt.io/evict-default-vm created (server dry run)"], warned.out
