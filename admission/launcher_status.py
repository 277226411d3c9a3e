"""Cloud Hypervisor VMIs that KubeVirt does not call outdated: the `/mutate-vmi` webhook. Pure.

What KubeVirt does (`kubevirt @d923fdb815cd`):

- virt-controller, on every reconcile of a VMI whose pod exists
  (`pkg/virt-controller/watch/vmi/lifecycle.go`: `updateStatus`), takes the image of the pod's
  `compute` container and calls `setLauncherContainerInfo`: it stores that image in
  `status.launcherContainerImageVersion` and labels the VMI `kubevirt.io/outdatedLauncherImage: ""`
  when the image is not empty and differs from its own launcher image (`--launcher-image`, which
  virt-operator renders from its deployment config), removing the label otherwise.
- The write: for a VMI whose (cached) phase is `Scheduled` or `Running` a JSON Patch of the main
  resource with `test` ops (`prepareVMIPatch`; the VMI CRD has no status subresource), sent on
  every reconcile where the computed fields differ from the cached ones; in every other phase an
  Update (PUT) of the whole object, after which virt-controller *expects* to see the write come
  back (`vmiExpectations.SetExpectations(key, 1, 0)`) and does not sync that VMI again until it
  does, or until `ExpectationsTimeout` (5 minutes) passes.
- The workload updater (`pkg/virt-controller/watch/workload-updater/workload-updater.go`:
  `isOutdated`) calls a running VMI outdated when `status.launcherContainerImageVersion` is not
  empty and differs from the same launcher image; it migrates (or evicts) those, and only while
  the KubeVirt CR's `status.phase` is `Deployed` and `observedDeploymentID == targetDeploymentID`.
  The metric `kubevirt_vmi_info{outdated}` reads the label.
- After a migration the target's virt-handler empties both (`pkg/virt-handler/migration-target.go`:
  `ackMigrationCompletion`), and virt-controller fills them in again from the new pod.

The compute image of a Cloud Hypervisor pod is the ch-launcher image, so virt-controller calls
every such VMI outdated. This webhook intercepts virt-controller's own writes of annotated VMIs
that carry the label (`addon_manifests/webhooks/51-mutatingwebhookconfiguration.yaml`) and, when
the image reported is the ch-launcher image the add-on's configuration names, writes what
virt-controller writes for a current launcher: its own launcher image in the status, no label.
The truth stays visible in the annotation `kubevirt-ch.io/launcher-image` (the image the pod
runs). A VMI whose pod runs another image (an older ch-launcher) is left as virt-controller wrote
it: outdated, so the workload updater moves it once, into a pod of the configured image.

Why this cannot loop and never holds virt-controller up:

- The rewrite makes virt-controller's next write of the same VMI identical to what is stored, and
  the API server does not store (or announce) an identical object: no new resourceVersion, no
  watch event, no new reconcile (`tests/apiserver/test_launcher_status.py` checks it). Identical
  includes `metadata.managedFields`, whose entry for virt-controller the API server stamps with
  the time of its write before admission: for exactly that write the patch puts the stored
  entries back (`_managed_fields_to_restore`), or each patch a second after the last would be
  stored.
- Only writes that leave a VMI `Scheduled` or `Running` are rewritten: those are virt-controller's
  JSON Patches (which it does not wait for) and the one Update that moves a VMI into `Scheduled`,
  which changes the phase and so is always stored. An Update in another phase is passed through
  unchanged; rewriting it could turn it into a no-op, and virt-controller would then wait
  5 minutes for an event that never comes.
- The webhook's failurePolicy is Ignore: when it is down, virt-controller's write goes through as
  it sent it (the VMI looks outdated, as without the add-on). Anything this module cannot decide
  (the KubeVirt CR unreadable, no deployment config in it) is passed through the same way.

virt-controller's launcher image comes from the KubeVirt CR (`cluster.kubevirt_launcher_image`).
"""

from __future__ import annotations

import copy
from typing import Any

from admission.cluster import LauncherImage
from admission.config import Config
from admission.review import AdmissionRequest, allow
from admission.rules import Outcome
from admission.selection import VALUE, annotations_of, get, hypervisor

OUTDATED_LABEL = "kubevirt.io/outdatedLauncherImage"
IMAGE_ANNOTATION = "kubevirt-ch.io/launcher-image"  # mutate.py drops it from the pods virt-controller renders
CONTROLLER_ACCOUNT = "kubevirt-controller"  # virt-operator's ControllerServiceAccountName
# The phases in which virt-controller patches rather than updates (lifecycle.go: updateStatus).
PATCHED_PHASES = ("Scheduled", "Running")


def controller_username(kubevirt_namespace: str) -> str:
    """virt-controller's identity in the API server's admission requests."""
    return f"system:serviceaccount:{kubevirt_namespace}:{CONTROLLER_ACCOUNT}"


def _candidate(request: AdmissionRequest, config: Config) -> str | None:
    """The image virt-controller reports for a request this webhook judges, else None."""
    vmi = request.object
    if request.operation != "UPDATE" or request.kind not in ("VirtualMachineInstance", "") \
            or not isinstance(vmi, dict) or hypervisor(vmi) != VALUE:
        return None
    if get(request.raw, "userInfo", "username") != controller_username(config.kubevirt.namespace):
        return None
    status = get(vmi, "status")
    if not isinstance(status, dict) or status.get("phase") not in PATCHED_PHASES:
        return None
    reported = status.get("launcherContainerImageVersion")
    return reported if isinstance(reported, str) and reported else None  # "": the pod's image is not known yet


def wants_launcher_image(request: AdmissionRequest, config: Config) -> bool:
    """Whether `decide()` needs virt-controller's launcher image (the server reads it only then)."""
    return _candidate(request, config) is not None


def decide(request: AdmissionRequest, config: Config, launcher: LauncherImage | None) -> Outcome:
    """One `/mutate-vmi` request. `launcher` None: the server has no API client (nothing known).

    Verdicts: `ignored` (not virt-controller's write of a Cloud Hypervisor VMI that leaves it
    `Scheduled`/`Running` with a known pod image), `current` (rewritten as virt-controller writes a
    current launcher), `outdated` (the pod runs another image: left outdated, the annotation says
    which), `unknown` (virt-controller's launcher image is not known: passed through, outdated).
    Never raises, never denies.
    """
    uid = request.uid
    vmi = request.object
    reported = _candidate(request, config)
    if reported is None:
        return Outcome(allow(uid), "ignored")
    known = launcher.image if launcher is not None else None
    if reported == known:
        return Outcome(allow(uid), "ignored")  # KubeVirt's own launcher runs in this pod
    labels = get(vmi, "metadata", "labels")
    labels = labels if isinstance(labels, dict) else {}
    ops: list[dict[str, Any]] = []
    if annotations_of(vmi).get(IMAGE_ANNOTATION) != reported:
        ops.append({"op": "add", "path": _pointer("metadata", "annotations", IMAGE_ANNOTATION), "value": reported})
    if reported != config.launcher.image:
        return Outcome(allow(uid, patch=ops), "outdated")
    if known is None:
        return Outcome(allow(uid, patch=ops), "unknown")
    ops.append({"op": "replace", "path": "/status/launcherContainerImageVersion", "value": known})
    if OUTDATED_LABEL in labels:
        ops.append({"op": "remove", "path": _pointer("metadata", "labels", OUTDATED_LABEL)})
    old_fields = _managed_fields_to_restore(request, reported, known)
    if old_fields is not None:
        ops.append({"op": "replace", "path": "/metadata/managedFields", "value": old_fields})
    return Outcome(allow(uid, patch=ops, audit={"launcher-image": reported, "reported-as": known}), "current")


def _managed_fields_to_restore(request: AdmissionRequest, reported: str, known: str) -> list[Any] | None:
    """The stored VMI's managedFields when the rewritten write changes nothing else, else None.

    The API server records a write's fields for its manager *before* mutating admission, with the
    time of the write (apimachinery `managedfields/internal/managedfieldsupdater.go`: the entry of
    a manager whose operation changed any field gets `time.Now()`). virt-controller's patch sets
    the label and its pod image; after the rewrite nothing differs from what is stored but that
    entry's time, so without this, every such patch sent a second or more after the last would be
    stored (a new resourceVersion and a watch event that makes virt-controller and virt-handler
    reconcile again; tests/apiserver/test_launcher_status.py shows it). Restoring the stored
    entries makes the object identical, and the API server stores nothing. Only for exactly that
    case: any other change keeps the API server's own record."""
    new, old = request.object, request.old_object
    if not isinstance(new, dict) or not isinstance(old, dict):
        return None
    old_fields = get(old, "metadata", "managedFields")
    if not isinstance(old_fields, list) or get(new, "metadata", "managedFields") == old_fields:
        return None
    rewritten = copy.deepcopy(new)
    meta = rewritten.setdefault("metadata", {})
    labels = meta.get("labels")
    if isinstance(labels, dict):
        labels.pop(OUTDATED_LABEL, None)
    meta.setdefault("annotations", {})[IMAGE_ANNOTATION] = reported
    rewritten["status"]["launcherContainerImageVersion"] = known
    meta["managedFields"] = old_fields
    return copy.deepcopy(old_fields) if rewritten == old else None


def _pointer(*parts: str) -> str:
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)
