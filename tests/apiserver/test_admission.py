"""What a user sees through real kubectl: VMIs, VMs (with and without instancetypes and
preferences), VMI replica sets and pools that are allowed, warned about and denied, and a launcher
pod as virt-controller renders it, mutated. KubeVirt's own webhooks (virt-api) run beside ours, as
in a cluster."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from admission.mutate import RECORD_ANNOTATION
from tests.apiserver.cluster import Run
from tests.apiserver.objects_support import CH, create, launcher_pod, pool, replicaset, vm, vmi
from tests.apiserver.readme import row_showing, use_refused

GRAPHICS = "no display (VNC) on Cloud Hypervisor; use the serial console"
CDROM = "is not supported by Cloud Hypervisor: it emulates no CD-ROM; attach the image as a virtio disk instead"
VALIDATOR = '"virtualmachineinstances.validator.kubevirt-ch.io"'


# --- VirtualMachineInstances --------------------------------------------------------------------


def test_a_vmi_cloud_hypervisor_runs_is_created_without_a_word(cluster):
    assert create(cluster, vmi("runs")) == Run(("create", "-f", "-"), 0,
                                               "virtualmachineinstance.kubevirt.io/runs created\n")


def test_a_degraded_vmi_is_created_with_a_warning_naming_the_field(cluster):
    r = create(cluster, vmi("display", graphics=True))
    assert (r.rc, r.lines) == (0, [f"Warning: spec.domain.devices.autoattachGraphicsDevice: {GRAPHICS}",
                                   "virtualmachineinstance.kubevirt.io/display created"])


def test_a_vmi_cloud_hypervisor_cannot_run_is_refused_naming_the_field(cluster):
    r = create(cluster, vmi("cdrom", cdrom=True))
    assert (r.rc, r.lines) == (1, [(f"The request is invalid: spec.domain.devices.disks[1].cdrom: "
                                    f"spec.domain.devices.disks[1].cdrom {CDROM}")])
    assert cluster.kubectl("get", "vmi", "cdrom").rc == 1
    row_showing(r.lines[0])


def test_several_problems_are_listed_one_per_line(cluster):
    obj = vmi("two-problems", cdrom=True)
    obj["spec"]["domain"]["devices"]["interfaces"][0]["model"] = "e1000"
    r = create(cluster, obj)
    assert (r.rc, r.lines) == (1, [
        "The request is invalid: ",
        f"* spec.domain.devices.disks[1].cdrom: spec.domain.devices.disks[1].cdrom {CDROM}",
        ("* spec.domain.devices.interfaces[0].model: spec.domain.devices.interfaces[0].model 'e1000' is not "
         "supported: Cloud Hypervisor emulates only virtio-net NICs")])
    assert row_showing(r.lines[0]) == row_showing(r.lines[1])


def test_refusals_of_several_objects_in_one_file_name_the_webhook(cluster):
    """With more than one failed object, kubectl prints the API server's message for each."""
    r = create(cluster, vmi("bad-one", cdrom=True), vmi("bad-two", cdrom=True))
    line = (f'Error from server (Invalid): error when creating "STDIN": admission webhook {VALIDATOR} denied the '
            f"request: spec.domain.devices.disks[1].cdrom {CDROM}")
    assert (r.rc, r.lines) == (1, [line, line])
    row_showing(line)


def test_a_vmi_without_memory_is_refused_by_both_webhooks_ours_with_a_field(cluster):
    """KubeVirt's own cause has no field (`* : no memory requested`); which denial kubectl shows
    depends on which webhook answers first, and both say the same."""
    r = create(cluster, vmi("no-memory", memory=None))
    message = ("no memory requested, at least one of 'spec.domain.memory.guest', 'spec.domain.memory.hugepages."
               "pageSize' or 'spec.domain.resources.requests.memory' must be set")
    assert r.rc == 1
    assert r.lines in ([f"The request is invalid: spec.domain.memory.guest: {message}"],
                       [f"The request is invalid: : {message}"])


def test_vmis_without_the_annotation_are_not_ours(cluster):
    assert create(cluster, vmi("on-qemu", annotations=None, cdrom=True)).out == \
        "virtualmachineinstance.kubevirt.io/on-qemu created\n"
    assert create(cluster, vmi("other-value", annotations={"kubevirt-ch.io/hypervisor": "qemu"}, cdrom=True)).out \
        == "virtualmachineinstance.kubevirt.io/other-value created\n"


def test_a_vmis_backend_cannot_change_after_creation(cluster):
    create(cluster, vmi("fixed-backend"))
    r = cluster.kubectl("annotate", "vmi", "fixed-backend", "kubevirt-ch.io/hypervisor-")
    field = "metadata.annotations[kubevirt-ch.io/hypervisor]"
    assert (r.rc, r.lines) == (1, [(f"The request is invalid: {field}: {field}: the hypervisor of an existing "
                                    "VirtualMachineInstance cannot change (was 'cloud-hypervisor', now absent); "
                                    "delete and re-create the VMI instead")])


# --- VirtualMachines, with and without instancetypes and preferences ----------------------------


def test_vms_are_judged_by_their_template_with_its_paths(cluster):
    assert create(cluster, vm("vm-runs")).out == "virtualmachine.kubevirt.io/vm-runs created\n"
    r = create(cluster, vm("vm-display", graphics=True))
    assert r.lines == [f"Warning: spec.template.spec.domain.devices.autoattachGraphicsDevice: {GRAPHICS}",
                       "virtualmachine.kubevirt.io/vm-display created"]
    r = create(cluster, vm("vm-cdrom", cdrom=True))
    assert (r.rc, r.lines) == (1, [(f"The request is invalid: spec.template.spec.domain.devices.disks[1].cdrom: "
                                    f"spec.template.spec.domain.devices.disks[1].cdrom {CDROM}")])


def test_a_vm_annotated_on_itself_is_told_where_the_annotation_belongs(cluster):
    r = create(cluster, vm("vm-own", template_annotations=None, own=CH))
    assert r.lines == [("Warning: kubevirt-ch.io/hypervisor in metadata.annotations does not reach the "
                        "VirtualMachine's VMIs: set it in spec.template.metadata.annotations to run them on Cloud "
                        "Hypervisor"), "virtualmachine.kubevirt.io/vm-own created"]


INSTANCETYPE = {"apiVersion": "instancetype.kubevirt.io/v1beta1", "kind": "VirtualMachineClusterInstancetype",
                "metadata": {"name": "ch.small"}, "spec": {"cpu": {"guest": 2}, "memory": {"guest": "2Gi"}}}
PREFERENCE = {"apiVersion": "instancetype.kubevirt.io/v1beta1", "kind": "VirtualMachineClusterPreference",
              "metadata": {"name": "ch.e1000"}, "spec": {"devices": {"preferredInterfaceModel": "e1000"}}}


@pytest.fixture(scope="module")
def instancetypes(cluster):
    cluster.ok("apply", "-f", "-", input=cluster.yaml(INSTANCETYPE, PREFERENCE))


def instancetype_vm(name: str, preference: str | None = None) -> dict[str, Any]:
    """What `virtctl create vm --instancetype ch.small [--preference P]` writes: no memory and
    no CPU in the template."""
    obj = vm(name, memory=None)
    obj["spec"]["instancetype"] = {"kind": "VirtualMachineClusterInstancetype", "name": "ch.small"}
    if preference:
        obj["spec"]["preference"] = {"kind": "VirtualMachineClusterPreference", "name": preference}
    return obj


def the_vmi_virt_controller_creates(vm_obj: dict[str, Any], name: str) -> dict[str, Any]:
    """The VMI of a VM as virt-controller renders it: the template with the instancetype's size
    (and the preference's defaults) applied (kubevirt pkg/instancetype/apply@d923fdb815cd)."""
    template = copy.deepcopy(vm_obj["spec"]["template"])
    template["spec"]["domain"]["memory"] = {"guest": INSTANCETYPE["spec"]["memory"]["guest"]}
    template["spec"]["domain"]["cpu"] = {"sockets": INSTANCETYPE["spec"]["cpu"]["guest"], "cores": 1, "threads": 1}
    model = PREFERENCE["spec"]["devices"]["preferredInterfaceModel"] if "preference" in vm_obj["spec"] else None
    if model:
        for iface in template["spec"]["domain"]["devices"]["interfaces"]:
            iface.setdefault("model", model)
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": name, "namespace": "default", **template.get("metadata", {})},
            "spec": template["spec"]}


def test_a_vm_taking_its_size_from_an_instancetype_is_allowed_as_kubevirt_allows_it(cluster, instancetypes):
    """KubeVirt asks for memory on VMIs only (the instancetype is applied when the VMI is
    created); the VMI is then judged with the instancetype's size."""
    obj = instancetype_vm("vm-instancetype")
    assert create(cluster, obj).out == "virtualmachine.kubevirt.io/vm-instancetype created\n"
    assert create(cluster, the_vmi_virt_controller_creates(obj, "vm-instancetype")).out == \
        "virtualmachineinstance.kubevirt.io/vm-instancetype created\n"


def test_an_instancetype_vm_with_a_display_is_warned_about_its_template(cluster, instancetypes):
    obj = instancetype_vm("vm-instancetype-display")
    obj["spec"]["template"]["spec"]["domain"]["devices"].pop("autoattachGraphicsDevice")
    r = create(cluster, obj)
    assert (r.rc, r.lines) == (0, [f"Warning: spec.template.spec.domain.devices.autoattachGraphicsDevice: {GRAPHICS}",
                                   "virtualmachine.kubevirt.io/vm-instancetype-display created"])


def test_what_a_preference_brings_is_judged_when_the_vmi_is_created(cluster, instancetypes):
    """The webhook does not read instancetypes and preferences: a preference's e1000 NIC cannot
    be seen in the VM's template, so the VM is accepted and its VMI refused (virt-controller
    shows that as the VM's FailedCreate event), with the field."""
    obj = instancetype_vm("vm-e1000", preference="ch.e1000")
    assert create(cluster, obj).out == "virtualmachine.kubevirt.io/vm-e1000 created\n"
    r = create(cluster, the_vmi_virt_controller_creates(obj, "vm-e1000"))
    assert (r.rc, r.lines) == (1, [("The request is invalid: spec.domain.devices.interfaces[0].model: "
                                    "spec.domain.devices.interfaces[0].model 'e1000' is not supported: Cloud "
                                    "Hypervisor emulates only virtio-net NICs")])


def test_an_instancetype_vm_that_sets_memory_itself_is_refused_by_kubevirt(cluster, instancetypes):
    """KubeVirt's own rule (the instancetype conflict), unchanged by the add-on."""
    obj = instancetype_vm("vm-conflict")
    obj["spec"]["template"]["spec"]["domain"]["memory"] = {"guest": "1Gi"}
    r = create(cluster, obj)
    assert r.rc == 1 and "spec.template.spec.domain.memory.guest" in r.out
    assert "kubevirt-ch" not in r.out


# --- replica sets and pools ---------------------------------------------------------------------


def test_replica_sets_and_pools_are_judged_by_their_vmi_template(cluster):
    """Allowed, warned about and refused, each with the template's path."""
    assert create(cluster, replicaset("rs-runs")).out == \
        "virtualmachineinstancereplicaset.kubevirt.io/rs-runs created\n"
    r = create(cluster, replicaset("rs-cdrom", cdrom=True))
    assert (r.rc, r.lines) == (1, [(f"The request is invalid: spec.template.spec.domain.devices.disks[1].cdrom: "
                                    f"spec.template.spec.domain.devices.disks[1].cdrom {CDROM}")])
    r = create(cluster, replicaset("rs-display", graphics=True))
    assert r.lines == [f"Warning: spec.template.spec.domain.devices.autoattachGraphicsDevice: {GRAPHICS}",
                       "virtualmachineinstancereplicaset.kubevirt.io/rs-display created"]
    prefix = "spec.virtualMachineTemplate.spec.template.spec"
    r = create(cluster, pool("pool-display", graphics=True))
    assert r.lines == [f"Warning: {prefix}.domain.devices.autoattachGraphicsDevice: {GRAPHICS}",
                       "virtualmachinepool.pool.kubevirt.io/pool-display created"]
    r = create(cluster, pool("pool-cdrom", cdrom=True))
    assert (r.rc, r.lines) == (1, [(f"The request is invalid: {prefix}.domain.devices.disks[1].cdrom: "
                                    f"{prefix}.domain.devices.disks[1].cdrom {CDROM}")])


# --- the cluster's workload updater is the operators' business --------------------------------


def test_no_vmi_hears_about_the_clusters_workload_update_methods_nor_operators_while_vmis_stay_current(cluster):
    """The session's KubeVirt CR sets workloadUpdateMethods: [LiveMigrate] and carries virt-operator's
    deployment config, so /mutate-vmi knows virt-controller's launcher image and keeps running Cloud
    Hypervisor VMIs current (tests/apiserver/test_launcher_status.py): no condition holds.
    (Without a readable launcher image operators get WorkloadUpdateLiveMigrate:
    tests/functional/test_admission_conditions.py.)"""
    assert "Warning" not in create(cluster, vmi("not-warned")).out
    assert not any("cluster condition WorkloadUpdate" in line for line in cluster.admission.log)
    assert 'ch_admission_cluster_condition{condition="WorkloadUpdateLiveMigrate"} 0.0' in cluster.metrics()


# --- the launcher pod ---------------------------------------------------------------------------


def test_a_launcher_pod_of_a_ch_vmi_is_mutated_to_ch_launcher(cluster):
    create(cluster, vmi("mutated"))
    owner = cluster.json("get", "vmi", "mutated")
    r = create(cluster, launcher_pod(owner))
    assert r.rc == 0 and re.fullmatch(r"pod/virt-launcher-mutated-[a-z0-9]{5} created\n", r.out), r.out
    pod = cluster.json("get", r.out.split()[0])
    (compute,) = pod["spec"]["containers"]
    assert compute["image"] == "ghcr.io/kubevirt-ch/ch-launcher:v0.1.0"
    assert compute["command"] == ["/usr/bin/ch-launcher"]
    assert compute["args"][:2] == ["--qemu-timeout", "288s"]  # virt-launcher's flags stay
    record = json.loads(pod["metadata"]["annotations"][RECORD_ANNOTATION])
    ours = record["memoryOverheadBytes"]["cloudHypervisor"]
    assert record["memoryOverheadBytes"]["kubevirt"] == 290 * 2**20
    assert pod["metadata"]["annotations"]["kubevirt.io/memory-overhead-bytes"] == str(ours)
    assert ours < 290 * 2**20
    for kind in ("requests", "limits"):
        assert compute["resources"][kind]["memory"] == record[f"{kind}.memory"]["to"]
        assert record[f"{kind}.memory"]["from"] == str(128 * 2**20 + 290 * 2**20)


def test_the_launcher_pod_of_a_vmi_on_qemu_is_left_alone(cluster):
    create(cluster, vmi("stays-qemu", annotations=None))
    owner = cluster.json("get", "vmi", "stays-qemu")
    r = create(cluster, launcher_pod(owner))
    pod = cluster.json("get", r.out.split()[0])
    assert pod["spec"]["containers"][0]["image"] == "quay.io/kubevirt/virt-launcher:v1.9.0"
    assert RECORD_ANNOTATION not in pod["metadata"]["annotations"]


def test_the_readmes_example_output_is_what_kubectl_prints(cluster):
    """README "Use": its VM, changed as the text says, gives exactly the output shown there."""
    obj, shown = use_refused()
    r = cluster.kubectl("apply", "-f", "-", input=cluster.yaml(obj))
    assert (r.rc, r.lines) == (1, shown)
