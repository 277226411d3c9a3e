"""Cloud Hypervisor VMIs that KubeVirt does not call outdated, through the real API server
(admission/launcher_status.py, docs/migration.md §6).

virt-controller and virt-handler do not run here (the control plane has no nodes), so their
writes are made as they make them, under their own identities (kubectl impersonation: the
admission request then names their ServiceAccounts, as in a cluster): virt-controller's Update
(PUT) of the whole VMI while it is Pending or Scheduling, and from Scheduled on its JSON Patch with
`test` operations (kubevirt pkg/virt-controller/watch/vmi/lifecycle.go@d923fdb815cd:
`updateStatus`, `prepareVMIPatch`, `setLauncherContainerInfo`). What the stored VMI then says is
judged with the workload updater's own rule (`is_outdated`, from workload-updater.go: `isOutdated`)
and the label `kubevirt.io/outdatedLauncherImage` (what `kubevirt_vmi_info{outdated}` reads).
"""

from __future__ import annotations

import copy
import json
import pathlib
import sys
import time
from typing import Any

import pytest

from tests.apiserver.cluster import Cluster
from tests.builders import new_vmi, with_hypervisor, with_label, with_memory
from tests.manifests.render import MANIFESTS, one, render
from tests.unit.admission.virt_controller import (
    has_outdated_label,
    is_outdated,
    prepare_vmi_patch,
    set_launcher_container_info,
)

pytestmark = pytest.mark.apiserver

CH = "ghcr.io/kubevirt-ch/ch-launcher:v0.1.0"       # what addon_manifests' configuration names
CH_OLD = "ghcr.io/kubevirt-ch/ch-launcher:v0.0.9"   # a pod started before an add-on upgrade
CH_NEXT = "ghcr.io/kubevirt-ch/ch-launcher:v0.2.0"  # what an upgraded add-on names
IMAGE_ANNOTATION = "kubevirt-ch.io/launcher-image"
CONTROLLER = ("--as=system:serviceaccount:kubevirt:kubevirt-controller", "--as-group=system:masters",
              "--as-group=system:authenticated")
NODE = "node01"
# virt-api lets virt-handler write only VMIs of its own node (vmi-update-admitter.go: the node name
# comes from the token's extra info)
HANDLER = ("--as=system:serviceaccount:kubevirt:kubevirt-handler", "--as-group=system:masters",
           "--as-group=system:authenticated", f"--as-user-extra=authentication.kubernetes.io/node-name={NODE}")
READY = [{"type": "Ready", "status": "True"}]


def vmi(name: str) -> dict[str, Any]:
    return new_vmi(name, with_label("app", name), with_hypervisor(), with_memory("128Mi"))


class Controllers:
    """virt-controller's and virt-handler's writes of one VMI, against the real API server."""

    def __init__(self, cluster: Cluster, name: str):
        self.cluster, self.name = cluster, name
        self.kv = cluster.launcher_image()

    def get(self) -> dict[str, Any]:
        return self.cluster.json("get", "vmi", self.name, "-n", "default")

    def update(self, who: tuple[str, ...], obj: dict[str, Any]) -> str:
        return self.cluster.ok("replace", *who, "-f", "-", input=self.cluster.yaml(obj))

    def reconcile(self, pod_image: str, phase: str | None = None,
                  conditions: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """One `updateStatus` of virt-controller for a pod whose compute image is `pod_image`:
        an Update before Scheduled, a JSON Patch from then on. Returns the patch it sent ([]
        when it sent an Update or nothing)."""
        cached = self.get()
        new = set_launcher_container_info(cached, pod_image, self.kv)
        if phase is not None:
            new["status"]["phase"] = phase
        if phase == "Scheduled":
            new["status"]["nodeName"] = NODE  # the pod's node
        if conditions is not None:
            new["status"]["conditions"] = conditions
        if cached["status"].get("phase") in ("Scheduled", "Running"):
            ops = prepare_vmi_patch(cached, new)
            if ops:
                self.cluster.ok("patch", *CONTROLLER, "vmi", self.name, "-n", "default", "--type=json",
                                "-p", json.dumps(ops))
            return ops
        if new != cached:
            self.update(CONTROLLER, new)
        return []

    def start(self, pod_image: str) -> dict[str, Any]:
        """From creation to Running, as the controllers write it; the stored VMI."""
        self.cluster.ok("create", "-f", "-", input=self.cluster.yaml(vmi(self.name)))
        self.reconcile(pod_image, phase="Scheduling")      # the pod exists
        self.reconcile(pod_image, phase="Scheduled")       # the pod runs
        running = self.get()
        running["status"]["phase"] = "Running"             # virt-handler: the domain runs
        self.update(HANDLER, running)
        self.reconcile(pod_image, conditions=READY)
        return self.get()


def looks(v: dict[str, Any], kv: str) -> str:
    """What KubeVirt makes of a stored VMI: the workload updater's rule, and the label agrees."""
    outdated = is_outdated(v, kv)
    assert has_outdated_label(v) is outdated, v["metadata"].get("labels")
    return "outdated" if outdated else "current"


def outdated_command(cluster: Cluster, *args: str):
    """`ch-admission outdated` with the cluster admin's kubeconfig and addon_manifests' configuration."""
    cli = pathlib.Path(sys.executable).parent / "ch-admission"
    return cluster._in_netns([str(cli), "outdated", f"--kubeconfig={cluster.run_dir / 'kubeconfig'}", *args])


def row_of(table: str, name: str) -> list[str]:
    (row,) = [line.split() for line in table.splitlines() if line.split()[:2] == ["default", name]]
    return row


def test_a_running_vmi_of_the_configured_ch_launcher_is_not_outdated_and_stays_so(cluster):
    c = Controllers(cluster, "ls-current")
    stored = c.start(CH)
    assert looks(stored, c.kv) == "current"
    assert stored["status"]["launcherContainerImageVersion"] == c.kv
    assert stored["metadata"]["labels"] == {"app": "ls-current"}
    assert stored["metadata"]["annotations"][IMAGE_ANNOTATION] == CH   # what the pod really runs
    # virt-controller computes the label again at every reconcile and sends its patch; the
    # webhook makes it what is stored, so the API server stores (and announces) nothing
    # (including the managedFields time the API server stamps on each write: patches go on
    # until they span more than a second of its clock)
    version = stored["metadata"]["resourceVersion"]
    start, sent = time.monotonic(), 0
    while sent < 2 or time.monotonic() - start < 2.5:
        assert c.reconcile(CH) != []
        sent += 1
        assert c.get()["metadata"]["resourceVersion"] == version
    assert c.get() == stored


def test_while_it_starts_the_vmi_looks_as_virt_controller_writes_it(cluster):
    """Before Scheduled virt-controller PUTs the VMI and waits for the write's watch event: the
    webhook leaves those writes alone (none becomes a no-op), and the workload updater does not
    act on VMIs that are not running."""
    c = Controllers(cluster, "ls-starting")
    cluster.ok("create", "-f", "-", input=cluster.yaml(vmi("ls-starting")))
    c.reconcile(CH, phase="Scheduling")
    stored = c.get()
    assert has_outdated_label(stored) and stored["status"]["launcherContainerImageVersion"] == CH
    assert IMAGE_ANNOTATION not in stored["metadata"]["annotations"]


def test_a_vmi_whose_pod_runs_another_ch_launcher_is_outdated_and_says_which(cluster):
    c = Controllers(cluster, "ls-old")
    stored = c.start(CH_OLD)
    assert looks(stored, c.kv) == "outdated"
    assert stored["status"]["launcherContainerImageVersion"] == CH_OLD
    assert stored["metadata"]["annotations"][IMAGE_ANNOTATION] == CH_OLD
    # the workload updater migrates it; the target's virt-handler empties both fields
    # (pkg/virt-handler/migration-target.go: ackMigrationCompletion) and virt-controller fills
    # them in from the new pod, which runs the configured image
    moved = copy.deepcopy(stored)
    moved["metadata"]["labels"].pop("kubevirt.io/outdatedLauncherImage")
    moved["status"]["launcherContainerImageVersion"] = ""
    c.update(HANDLER, moved)
    c.reconcile(CH)
    after = c.get()
    assert looks(after, c.kv) == "current" and after["metadata"]["annotations"][IMAGE_ANNOTATION] == CH


def test_a_vmi_on_qemu_is_left_to_kubevirt(cluster):
    c = Controllers(cluster, "ls-qemu")
    plain = vmi("ls-qemu")
    del plain["metadata"]["annotations"]
    cluster.ok("create", "-f", "-", input=cluster.yaml(plain))
    c.reconcile(CH, phase="Scheduling")
    c.reconcile(CH, phase="Scheduled")
    stored = c.get()
    assert looks(stored, c.kv) == "outdated"
    assert "annotations" not in stored["metadata"] or IMAGE_ANNOTATION not in stored["metadata"]["annotations"]


def test_after_an_addon_upgrade_the_old_image_vmis_are_reported_and_a_resync_makes_them_outdated(cluster, tmp_path):
    """The configuration now names CH_NEXT (an edited ConfigMap and a restart of the server). A VMI
    the webhook wrote as current still looks current until virt-controller writes it again;
    `ch-admission outdated` reports it, `--resync` makes virt-controller write it, and the webhook
    leaves it outdated, so the workload updater moves it once."""
    c = Controllers(cluster, "ls-upgraded")
    c.start(CH)
    text = one(render(MANIFESTS), "ConfigMap", "ch-admission-config")["data"]["config.yaml"]
    assert CH in text
    upgraded = tmp_path / "config.yaml"
    upgraded.write_text(text.replace(CH, CH_NEXT))
    cluster.stop_admission()
    try:
        cluster.start_admission(config=upgraded.read_text())
        listed = outdated_command(cluster, f"--config={upgraded}")
        assert listed.returncode == 1, listed.stdout
        assert row_of(listed.stdout, "ls-upgraded")[2:] == ["Running", CH, "current", "outdated"]
        resynced = outdated_command(cluster, f"--config={upgraded}", "--resync")
        assert resynced.returncode == 0 and "resynced default/ls-upgraded" in resynced.stdout, resynced.stdout
        c.reconcile(CH)  # the resync's watch event: virt-controller writes the VMI again
        stored = c.get()
        assert looks(stored, c.kv) == "outdated" and stored["status"]["launcherContainerImageVersion"] == CH
        assert stored["metadata"]["annotations"][IMAGE_ANNOTATION] == CH
        assert row_of(outdated_command(cluster, f"--config={upgraded}").stdout, "ls-upgraded")[-2:] == \
            ["outdated", "outdated"]
    finally:
        cluster.stop_admission()
        cluster.start_admission()


def test_with_the_server_down_a_write_goes_through_as_sent_and_a_resync_makes_it_current_again(cluster):
    """failurePolicy Ignore: with the server down, virt-controller's patch is stored as sent (the
    validating webhooks let status writes through without calling the server), so the VMI looks
    outdated, as without the add-on. `ch-admission outdated` reports it; `--resync` makes
    virt-controller write it again, and the webhook, up again, makes it current."""
    c = Controllers(cluster, "ls-outage")
    c.start(CH)
    assert row_of(outdated_command(cluster).stdout, "ls-outage")[-2:] == ["current", "current"]
    with cluster.admission_stopped():
        c.reconcile(CH, conditions=[*READY, {"type": "LiveMigratable", "status": "True"}])
        assert looks(c.get(), c.kv) == "outdated"
    listed = outdated_command(cluster)
    assert listed.returncode == 1
    assert row_of(listed.stdout, "ls-outage")[-2:] == ["outdated", "current"]
    resynced = outdated_command(cluster, "--resync")
    assert resynced.returncode == 0 and "resynced default/ls-outage" in resynced.stdout, resynced.stdout
    c.reconcile(CH)  # the resync's watch event: virt-controller writes the VMI again
    assert looks(c.get(), c.kv) == "current"
    assert row_of(outdated_command(cluster).stdout, "ls-outage")[-2:] == ["current", "current"]
