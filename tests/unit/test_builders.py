"""tests/builders.py: the VMI a test builds is the one KubeVirt's model reads, options apply in order,
and the VMI keeps copies of what it was given."""

from __future__ import annotations

from ch_launcher.kubevirt.vmi import parse_vmi
from tests.builders import (
    apply,
    new_vmi,
    with_cloud_init,
    with_container_disk,
    with_cpu,
    with_hypervisor,
    with_masquerade,
    with_memory,
    with_memory_request,
    with_namespace,
    with_status,
    with_uid,
)


def test_a_built_vmi_reads_back_through_the_launchers_model():
    vmi = parse_vmi(new_vmi(
        "web", with_namespace("tenant"), with_uid("u-1"), with_hypervisor(), with_cpu(cores=2),
        with_memory("256Mi"), with_memory_request("256Mi"), with_container_disk("example.org/os:1"),
        with_cloud_init(), with_masquerade(), with_status(phase="Scheduled"),
    ))
    assert (vmi.metadata.name, vmi.metadata.namespace, vmi.metadata.uid) == ("web", "tenant", "u-1")
    assert vmi.metadata.annotations == {"kubevirt-ch.io/hypervisor": "cloud-hypervisor"}
    assert vmi.spec.domain.cpu is not None and vmi.spec.domain.cpu.cores == 2
    assert [d.name for d in vmi.spec.domain.devices.disks] == ["containerdisk", "cloudinitdisk"]
    assert [v.name for v in vmi.spec.volumes] == ["containerdisk", "cloudinitdisk"]
    assert [(i.name, n.name) for i, n in zip(vmi.spec.domain.devices.interfaces, vmi.spec.networks, strict=True)] \
        == [("default", "default")]


def test_a_later_option_wins_and_apply_edits_in_place():
    vmi = new_vmi("v", with_memory("1Gi"), with_memory("2Gi", maxGuest="4Gi"))
    assert vmi["spec"]["domain"]["memory"] == {"guest": "2Gi", "maxGuest": "4Gi"}
    assert apply(vmi, with_namespace(None)) is vmi
    assert "namespace" not in vmi["metadata"]


def test_the_vmi_holds_copies_of_what_an_option_was_given():
    interface = {"name": "default", "masquerade": {}}
    vmi = new_vmi("v", with_masquerade(), with_status(interfaces=[interface]))
    interface["masquerade"]["ports"] = [{"port": 80}]
    assert vmi["status"]["interfaces"] == [{"name": "default", "masquerade": {}}]
