"""`ch-admission outdated`: the table, the mismatches, the resync patch (admission/outdated.py)."""

from __future__ import annotations

from admission.config import parse_config
from admission.outdated import resync_patch, rows, table
from tests.builders import (
    new_vmi,
    with_annotation,
    with_annotations,
    with_hypervisor,
    with_labels,
    with_namespace,
    with_resource_version,
    with_status,
)

CH = "ghcr.io/kubevirt-ch/ch-launcher:v0.2.0"
OLD = "ghcr.io/kubevirt-ch/ch-launcher:v0.1.0"
KV = "quay.io/kubevirt/virt-launcher:v1.9.0"
CONFIG = parse_config({"launcher": {"image": CH, "command": ["/usr/bin/ch-launcher"]}})


def vmi(name, phase="Running", image=None, status_image=KV, labelled=False, ch=True, namespace="default"):
    return new_vmi(name, with_namespace(namespace), with_resource_version("7"), with_annotations({}),
                   *([with_hypervisor()] if ch else []),
                   *([with_annotation("kubevirt-ch.io/launcher-image", image)] if image is not None else []),
                   with_labels({"kubevirt.io/outdatedLauncherImage": ""} if labelled else {"app": "x"}),
                   with_status(phase=phase, launcherContainerImageVersion=status_image))


def test_each_cloud_hypervisor_vmi_says_what_kubevirt_sees_and_should_see():
    found = rows([
        vmi("current", image=CH),                                         # rewritten by the webhook
        vmi("upgraded-away", image=OLD),                                  # rewritten before an add-on upgrade
        vmi("outage", image=CH, status_image=CH, labelled=True),          # written while the webhook was down
        vmi("old", image=OLD, status_image=OLD, labelled=True),           # outdated, as it should be
        vmi("never-rewritten", status_image=CH, labelled=True),           # the webhook never saw it
        vmi("starting", phase="Scheduling", status_image=CH, labelled=True),
        vmi("qemu", ch=False, status_image=OLD, labelled=True),
    ], CONFIG)
    assert [(r.name, r.image, r.kubevirt, r.wanted, r.mismatch) for r in found] == [
        ("current", CH, "current", "current", False),
        ("never-rewritten", CH, "outdated", "current", True),
        ("old", OLD, "outdated", "outdated", False),
        ("outage", CH, "outdated", "current", True),
        ("starting", CH, "-", "-", False),
        ("upgraded-away", OLD, "current", "outdated", True),
    ]
    text = table(found).splitlines()
    assert text[0].split() == ["NAMESPACE", "NAME", "PHASE", "LAUNCHER", "IMAGE", "KUBEVIRT", "SEES", "SHOULD", "SEE"]
    assert text[2].split() == ["default", "never-rewritten", "Running", CH, "outdated", "current"]


def test_the_resync_patch_removes_the_label_and_annotation_of_an_unchanged_vmi_only():
    assert resync_patch(vmi("outage", image=CH, status_image=CH, labelled=True)) == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
        {"op": "remove", "path": "/metadata/labels/kubevirt.io~1outdatedLauncherImage"},
        {"op": "remove", "path": "/metadata/annotations/kubevirt-ch.io~1launcher-image"},
    ]
    assert resync_patch(vmi("upgraded-away", image=OLD)) == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
        {"op": "remove", "path": "/metadata/annotations/kubevirt-ch.io~1launcher-image"},
    ]
