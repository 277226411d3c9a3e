"""An oracle of the KubeVirt code that decides whether a VMI's launcher is outdated, and of the
API server's write path it goes through, for tests of `admission/launcher_status.py`.

Written from `kubevirt/kubevirt @d923fdb815cd` (functions named as upstream):

- `set_launcher_container_info`: `pkg/virt-controller/watch/vmi/lifecycle.go`
  `setLauncherContainerInfo`.
- `prepare_vmi_patch`: the same file's `prepareVMIPatch`, for the fields the model carries
  (phase, conditions, launcherContainerImageVersion, labels), with its `add`-when-absent and
  `test`+`replace` ops.
- `VirtController.reconcile`: `updateStatus`'s choice of write: a JSON Patch when the cached VMI
  is `Running` or `Scheduled` (no expectations), else an Update when status, labels, annotations
  or finalizers changed, after which the controller expects the write's watch event
  (`vmiExpectations.SetExpectations(key, 1, 0)`) and skips the VMI (`execute`: `needsSync`) until
  it arrives or `ExpectationsTimeout` (5 minutes) passes: `stalled` counts those.
- `is_outdated`: `pkg/virt-controller/watch/workload-updater/workload-updater.go` `isOutdated`.
- `migrate`: what a completed migration leaves (`pkg/virt-handler/migration-target.go`
  `ackMigrationCompletion`: label and image emptied; the VMI now has the target pod).
- `kubevirt_vmi_mutator`: `pkg/virt-api/webhooks/mutating-webhook/mutators/vmi-mutator.go` on
  UPDATE: status changes by anyone but KubeVirt's service accounts are reverted.

`ApiServer` is the part of kube-apiserver's write path that matters here: a JSON Patch is applied
to the stored object (a failed `test` is a 422), the mutating webhooks see the result, and an
object identical to the stored one is not written (no new resourceVersion, no watch event; the
real API server shows the same in tests/apiserver/test_launcher_status.py). Before admission the
field manager stamps the writer's managedFields entry with the write's time when the write changes
anything (`_record`), as the real one does. The add-on's webhook
runs only when its matchConditions (read from addon_manifests, evaluated with CEL) hold; with
`webhook_up = False` it is skipped as failurePolicy Ignore skips an unreachable webhook.
"""

from __future__ import annotations

import base64
import copy
import itertools
import json
import pathlib
from dataclasses import dataclass, field
from typing import Any

import yaml

from admission.cluster import LauncherImage
from admission.config import Config
from admission.launcher_status import OUTDATED_LABEL, decide
from admission.review import parse_review
from tests import builders
from tests.builders import with_hypervisor, with_labels, with_phase, with_resource_version
from tests.manifests.cel import evaluate
from tests.unit.admission.jsonpatch import PatchError, apply_patch

REPO = pathlib.Path(__file__).resolve().parents[3]
WEBHOOKS = REPO / "addon_manifests" / "webhooks" / "51-mutatingwebhookconfiguration.yaml"
CONTROLLER = "system:serviceaccount:kubevirt:kubevirt-controller"
HANDLER = "system:serviceaccount:kubevirt:kubevirt-handler"
KUBEVIRT_ACCOUNTS = {f"system:serviceaccount:kubevirt:{a}" for a in (
    "kubevirt-apiserver", "kubevirt-controller", "kubevirt-handler", "kubevirt-synchronization-controller")}
_uids = itertools.count(1)


def status_webhook() -> dict[str, Any]:
    """The launcher-status webhook as addon_manifests declares it."""
    (doc,) = [d for d in yaml.safe_load_all(WEBHOOKS.read_text()) if d]
    (hook,) = [w for w in doc["webhooks"] if w["clientConfig"]["service"]["path"] == "/mutate-vmi"]
    return hook


# --- virt-controller ------------------------------------------------------------------------------


def set_launcher_container_info(vmi: dict[str, Any], pod_image: str, launcher_image: str) -> dict[str, Any]:
    out = copy.deepcopy(vmi)
    labels = out["metadata"].get("labels")
    if pod_image != "" and pod_image != launcher_image:
        if labels is None:
            labels = out["metadata"]["labels"] = {}
        labels[OUTDATED_LABEL] = ""
    elif labels is not None:
        labels.pop(OUTDATED_LABEL, None)
    out.setdefault("status", {})["launcherContainerImageVersion"] = pod_image
    return out


def _st(vmi: dict[str, Any], key: str, default: Any = None) -> Any:
    return (vmi.get("status") or {}).get(key, default)


def prepare_vmi_patch(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = []
    if _st(old, "conditions") != _st(new, "conditions"):
        ops += [{"op": "test", "path": "/status/conditions", "value": _st(old, "conditions")},
                {"op": "replace", "path": "/status/conditions", "value": _st(new, "conditions")}]
    if _st(old, "phase") != _st(new, "phase"):
        ops += [{"op": "test", "path": "/status/phase", "value": _st(old, "phase")},
                {"op": "replace", "path": "/status/phase", "value": _st(new, "phase")}]
    old_image, new_image = _st(old, "launcherContainerImageVersion", ""), _st(new, "launcherContainerImageVersion", "")
    if old_image != new_image:
        if old_image == "":
            ops.append({"op": "add", "path": "/status/launcherContainerImageVersion", "value": new_image})
        else:
            ops += [{"op": "test", "path": "/status/launcherContainerImageVersion", "value": old_image},
                    {"op": "replace", "path": "/status/launcherContainerImageVersion", "value": new_image}]
    old_labels, new_labels = old["metadata"].get("labels"), new["metadata"].get("labels")
    if (old_labels or {}) != (new_labels or {}):  # equality.Semantic: nil and empty maps are equal
        if old_labels is None:
            ops.append({"op": "add", "path": "/metadata/labels", "value": new_labels})
        else:
            ops += [{"op": "test", "path": "/metadata/labels", "value": old_labels},
                    {"op": "replace", "path": "/metadata/labels", "value": new_labels}]
    return ops


def is_outdated(vmi: dict[str, Any], launcher_image: str) -> bool:
    if _st(vmi, "phase") in ("Succeeded", "Failed"):
        return False
    image = _st(vmi, "launcherContainerImageVersion", "")
    return image != "" and image != launcher_image


def has_outdated_label(vmi: dict[str, Any]) -> bool:
    return OUTDATED_LABEL in (vmi["metadata"].get("labels") or {})


# --- the API server -------------------------------------------------------------------------------


class Conflict(Exception):
    """The API server refused the write (a failed JSON Patch `test`, or a stale resourceVersion)."""


def kubevirt_vmi_mutator(old: dict[str, Any], new: dict[str, Any], user: str) -> dict[str, Any]:
    if user not in KUBEVIRT_ACCOUNTS and new.get("status") != old.get("status"):
        new = copy.deepcopy(new)
        new["status"] = copy.deepcopy(old.get("status"))
    return new


@dataclass
class ApiServer:
    """One stored VMI and the admission chain in front of it."""

    stored: dict[str, Any]
    config: Config
    launcher: LauncherImage
    webhook_up: bool = True
    resource_version: int = 1
    events: int = 0  # watch events (writes that stored something)
    calls: int = 0   # requests that reached the add-on's server
    clock: int = 0   # seconds; each write is one later
    hook: dict[str, Any] = field(default_factory=status_webhook)

    def _admit(self, new: dict[str, Any], user: str) -> dict[str, Any]:
        new = kubevirt_vmi_mutator(self.stored, new, user)
        request = {"uid": f"uid-{next(_uids)}", "operation": "UPDATE", "namespace": "default",
                   "name": new["metadata"]["name"], "userInfo": {"username": user},
                   "kind": {"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachineInstance"},
                   "resource": {"group": "kubevirt.io", "version": "v1", "resource": "virtualmachineinstances"},
                   "object": new, "oldObject": self.stored}
        matched = all(bool(evaluate(c["expression"], object=new, oldObject=self.stored, request=request))
                      for c in self.hook["matchConditions"])
        if not matched or not self.webhook_up:
            return new
        self.calls += 1
        outcome = decide(parse_review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                       "request": request}), self.config, self.launcher)
        response = outcome.review["response"]
        assert response["allowed"] is True
        if "patch" not in response:
            return new
        return apply_patch(new, json.loads(base64.b64decode(response["patch"])))

    def _record(self, new: dict[str, Any], user: str) -> dict[str, Any]:
        """The API server's field manager, before admission: a write that changes anything gets
        its manager's managedFields entry stamped with the write's time (apimachinery
        managedfields/internal/managedfieldsupdater.go). Every write here is a second after the
        last (the worst case: the real API server's times have one-second resolution)."""
        self.clock += 1
        bare = {**new, "metadata": {k: v for k, v in new["metadata"].items() if k != "managedFields"}}
        stored = {**self.stored, "metadata": {k: v for k, v in self.stored["metadata"].items() if k != "managedFields"}}
        if bare == stored:
            return new
        new = copy.deepcopy(new)
        entries = [e for e in self.stored["metadata"].get("managedFields", []) if e["manager"] != user]
        new["metadata"]["managedFields"] = [*entries, {"manager": user, "operation": "Update", "time": self.clock}]
        return new

    def _store(self, new: dict[str, Any]) -> bool:
        new = copy.deepcopy(new)
        new["metadata"]["resourceVersion"] = self.stored["metadata"]["resourceVersion"]
        if new == self.stored:
            return False
        self.resource_version += 1
        new["metadata"]["resourceVersion"] = str(self.resource_version)
        self.stored = new
        self.events += 1
        return True

    def patch(self, ops: list[dict[str, Any]], user: str) -> bool:
        """Returns whether something was stored (and announced)."""
        try:
            new = apply_patch(self.stored, ops)
        except PatchError as e:
            raise Conflict(str(e)) from None
        return self._store(self._admit(self._record(new, user), user))

    def update(self, obj: dict[str, Any], user: str) -> bool:
        if obj["metadata"].get("resourceVersion") != self.stored["metadata"]["resourceVersion"]:
            raise Conflict("stale resourceVersion")
        return self._store(self._admit(self._record(obj, user), user))


# --- the controllers ------------------------------------------------------------------------------


@dataclass
class VirtController:
    """virt-controller's VMI controller for one VMI, with an informer that is up to date."""

    launcher_image: str
    writes: int = 0
    stalled: int = 0  # Updates that stored nothing: the VMI is skipped until ExpectationsTimeout

    def reconcile(self, api: ApiServer, pod_image: str | None, phase: str | None = None,
                  conditions: list[dict[str, Any]] | None = None) -> None:
        """One `updateStatus`: `pod_image` None when the VMI's pod does not exist; `phase` and
        `conditions` what the rest of updateStatus would set (unchanged when None)."""
        cached = api.stored
        new = copy.deepcopy(cached)
        if pod_image is not None:
            new = set_launcher_container_info(new, pod_image, self.launcher_image)
        if phase is not None:
            new["status"]["phase"] = phase
        if conditions is not None:
            new["status"]["conditions"] = conditions
        if _st(cached, "phase") in ("Running", "Scheduled"):
            ops = prepare_vmi_patch(cached, new)
            if ops:
                self.writes += 1
                api.patch(ops, CONTROLLER)
            return
        changed = any(new.get(k) != cached.get(k) for k in ("status",)) or any(
            new["metadata"].get(k) != cached["metadata"].get(k) for k in ("labels", "annotations", "finalizers"))
        if changed:
            self.writes += 1
            if not api.update(new, CONTROLLER):
                self.stalled += 1


def migrate(api: ApiServer) -> None:
    """The target's virt-handler acknowledges a completed migration."""
    new = copy.deepcopy(api.stored)
    (new["metadata"].get("labels") or {}).pop(OUTDATED_LABEL, None)
    new["status"]["launcherContainerImageVersion"] = ""
    api.update(new, HANDLER)


def new_vmi(name: str = "ch-vmi", phase: str = "Pending", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return builders.new_vmi(name, with_resource_version("1"), with_hypervisor(), with_labels(labels), with_phase(phase))
