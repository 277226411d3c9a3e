"""Host devices as the cluster's KubeVirt CR permits them, through real kubectl and the real API
server, KubeVirt's virt-api beside (the CR has the `HostDevices` feature gate it wants, and
permits `kubevirt.io/storage` as USB and a GPU as PCI: tests/apiserver/cluster.py). A USB one
is refused at its field on VMIs and every owner's template, on create and on update; a PCI one
is created without a word; a resource the CR starts to permit as USB while the server runs is
refused within seconds."""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest

from tests.apiserver.cluster import PCI_RESOURCE, PERMITTED_HOST_DEVICES, USB_RESOURCE, Cluster
from tests.apiserver.objects_support import pool, replicaset, vm, vmi
from tests.apiserver.readme import row_showing


def usb_refusal(field: str, resource: str = USB_RESOURCE) -> str:
    return (f"{field} '{resource}' is not supported: it is a USB device (permittedHostDevices.usb of the KubeVirt "
            f"CR) and Cloud Hypervisor has no USB controller")


def with_host_devices(obj: dict[str, Any], *resources: str) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    spec = obj["spec"]
    if obj["kind"] == "VirtualMachinePool":
        spec = spec["virtualMachineTemplate"]["spec"]
    if obj["kind"] != "VirtualMachineInstance":
        spec = spec["template"]["spec"]
    spec["domain"]["devices"]["hostDevices"] = [{"name": f"dev{i}", "deviceName": r} for i, r in enumerate(resources)]
    return obj


def apply(cluster: Cluster, obj: dict[str, Any]):
    return cluster.kubectl("apply", "-f", "-", input=cluster.yaml(obj))


@pytest.mark.parametrize(("obj", "prefix"), [
    (vmi("usb-vmi"), ""),
    (vm("usb-vm"), "spec.template."),
    (replicaset("usb-replicas"), "spec.template."),
    (pool("usb-pool"), "spec.virtualMachineTemplate.spec.template."),
], ids=["vmi", "vm", "replicaset", "pool"])
def test_kubectl_apply_of_a_usb_host_device_prints_the_denial_with_its_field(cluster, obj, prefix):
    r = apply(cluster, with_host_devices(obj, PCI_RESOURCE, USB_RESOURCE))
    field = f"{prefix}spec.domain.devices.hostDevices[1].deviceName"
    assert (r.rc, r.lines) == (1, [f"The request is invalid: {field}: {usb_refusal(field)}"])
    row_showing(r.lines[0])
    kind = obj["kind"].lower()
    assert cluster.kubectl("get", kind, obj["metadata"]["name"]).rc == 1


def test_a_host_device_the_kubevirt_cr_permits_as_pci_is_created_without_a_word(cluster):
    r = apply(cluster, with_host_devices(vmi("pci-vmi"), PCI_RESOURCE))
    assert (r.rc, r.lines) == (0, ["virtualmachineinstance.kubevirt.io/pci-vmi created"])


def test_adding_a_usb_host_device_to_a_vm_is_refused_and_the_vm_stays_as_it_was(cluster):
    assert apply(cluster, vm("grows-usb")).lines == ["virtualmachine.kubevirt.io/grows-usb created"]
    r = apply(cluster, with_host_devices(vm("grows-usb"), USB_RESOURCE))
    field = "spec.template.spec.domain.devices.hostDevices[0].deviceName"
    assert (r.rc, r.lines) == (1, [f"The request is invalid: {field}: {usb_refusal(field)}"])
    row_showing(r.lines[0])
    assert "hostDevices" not in cluster.json("get", "vm", "grows-usb")["spec"]["template"]["spec"]["domain"]["devices"]


def test_a_resource_permitted_as_usb_while_the_server_runs_is_refused_within_seconds(cluster):
    """An operator (or a controller that permits a USB device when a user claims one) adds a
    `usb` entry: the server reads the CR again for objects with host devices once its read is
    5 s old, so within seconds the same VMI is refused where it was admitted with a warning."""
    resource = "example.org/bootable-usb"
    text = cluster.yaml(with_host_devices(vmi("late-usb"), resource))
    before = cluster.kubectl("create", "--dry-run=server", "-f", "-", input=text)
    assert (before.rc, before.lines) == (0, [
        (f"Warning: spec.domain.devices.hostDevices[0]: {resource} must be a PCI or mediated device: a USB one "
         "fails the start (Cloud Hypervisor has no USB)"),
        "virtualmachineinstance.kubevirt.io/late-usb created (server dry run)"])
    permitted = copy.deepcopy(PERMITTED_HOST_DEVICES)
    permitted["usb"].append({"resourceName": resource, "externalResourceProvider": True})
    patch = {"spec": {"configuration": {"permittedHostDevices": permitted}}}
    cluster.ok("patch", "kubevirt", "kubevirt", "-n", "kubevirt", "--type=merge", "-p", json.dumps(patch))
    try:
        changed = time.monotonic()
        r = cluster.wait_for(lambda: (lambda r: r if r.rc != 0 else None)(
            cluster.kubectl("create", "--dry-run=server", "-f", "-", input=text)), "the refusal", timeout=30)
        took = time.monotonic() - changed
        field = "spec.domain.devices.hostDevices[0].deviceName"
        assert r.lines == [f"The request is invalid: {field}: {usb_refusal(field, resource)}"]
        assert took < 5 + 3, f"refused {took:.1f} s after the change"  # HOST_DEVICES_MAX_AGE + kubectl's round trips
    finally:
        restore = {"spec": {"configuration": {"permittedHostDevices": PERMITTED_HOST_DEVICES}}}
        cluster.ok("patch", "kubevirt", "kubevirt", "-n", "kubevirt", "--type=merge", "-p", json.dumps(restore))
