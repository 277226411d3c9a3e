"""The validating webhook (`/validate`), as a pure function of the request.

For VirtualMachineInstance, VirtualMachine, VirtualMachineInstanceReplicaSet and
VirtualMachinePool objects selected for Cloud Hypervisor (`selection.py`), ask the translator
(`ch_launcher.convert.check`: the same code the launcher runs, so the two cannot disagree) and
answer in KubeVirt's format (`review.py`): every problem a 422 cause with its field path (owners'
paths prefixed, e.g. `spec.template.spec.domain.devices.disks[1].cdrom`), degradations as
warnings. Unselected objects are allowed untouched.

UPDATE (`ecosystem.md` §3.2): a VMI's selection cannot be added, removed or changed (the backend
of an existing VMI is fixed); otherwise the feature check runs only when the VMI's spec (owners:
the template, or their selection) changed, so KubeVirt's own label, annotation and finalizer
updates are never refused; objects being deleted are always allowed. DELETE and CONNECT are
allowed. `dryRun` needs nothing special: the webhook has no side effects.

The cluster's KubeVirt (`cluster.KubeVirtStatus`, from its CR) is consulted whenever the
features are judged: on CREATE the version gate, on CREATE and UPDATE which host-device
resources it permits as USB (the translator refuses those: Cloud Hypervisor has no USB) and its
default eviction strategy (a warning for a VMI that cannot migrate and would take it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from admission.cluster import KubeVirtStatus, version_problem
from admission.config import Config
from admission.review import AdmissionRequest, Cause, allow, deny, deny_invalid
from admission.selection import (
    ANNOTATION,
    ANNOTATION_FIELD,
    VALUE,
    Target,
    get,
    hypervisor,
    object_at,
    prefix_field,
    prefix_paths,
    target,
)
from ch_launcher.convert import LauncherEnv, NoMemoryRequested, check

# An object that asks for host devices or GPUs is judged with the KubeVirt CR read at most this
# long ago, so that a resource just permitted as USB (by an operator, or a controller that edits
# permittedHostDevices when a user claims a USB device) is refused from then on.
HOST_DEVICES_MAX_AGE = 5.0


@dataclass(frozen=True)
class Outcome:
    """The AdmissionReview to send and a one-word verdict for metrics and logs:
    `ignored` (not ours), `allowed`, `warned` (allowed with warnings), `denied`, `invalid`."""

    review: dict[str, Any]
    verdict: str


@dataclass(frozen=True)
class KubeVirtWanted:
    """`validate()` will consult the cluster's KubeVirt status, read at most `max_age` seconds
    ago (None: however old the server's cache allows)."""

    max_age: float | None = None


def wants_kubevirt_status(request: AdmissionRequest) -> KubeVirtWanted | None:
    """Whether `validate()` will consult the cluster's KubeVirt status (whenever it judges a
    selected object's features: CREATE, and an UPDATE that changed them), so the server fetches
    it only then; for objects asking for host devices or GPUs, fresh (HOST_DEVICES_MAX_AGE)."""
    t = _triage(request)
    if not isinstance(t, Target):
        return None
    return KubeVirtWanted(HOST_DEVICES_MAX_AGE if _asks_for_host_devices(t) else None)


def validate(request: AdmissionRequest, config: Config, kubevirt: KubeVirtStatus | None = None, *,
             version_gate: bool = True) -> Outcome:
    """Decide one `/validate` request. Never raises for any request content.

    `kubevirt`: the cluster's KubeVirt as last read, None without one (no gate, no host device
    known as USB). `version_gate` False judges host devices by it but never gates on its
    version (offline `check --kubevirt-cr`, which reads a file, not a running KubeVirt).
    """
    first = _triage(request)
    if isinstance(first, Outcome):
        return first
    gate = kubevirt if version_gate and request.operation == "CREATE" else None
    return _check(request.uid, first, request, config, kubevirt, gate)


def _triage(request: AdmissionRequest) -> Outcome | Target:
    """The answer when no feature needs judging (not ours, metadata-only updates, deletions,
    malformed requests), else the object whose features `_check()` judges."""
    uid = request.uid
    if request.problem:
        return Outcome(deny(uid, request.problem), "invalid")
    kind = _kind(request)
    if request.operation not in ("CREATE", "UPDATE"):
        return Outcome(allow(uid), "ignored")
    if kind not in ("VirtualMachineInstance", "VirtualMachine", "VirtualMachineInstanceReplicaSet",
                    "VirtualMachinePool"):
        return Outcome(allow(uid), "ignored")
    if not isinstance(request.object, dict):
        return Outcome(deny(uid, f"request.object must be a {kind} object"), "invalid")
    new = target(kind, request.object)
    assert new is not None

    if request.operation == "UPDATE":
        if get(request.object, "metadata", "deletionTimestamp"):
            return Outcome(allow(uid), "ignored")  # never hold up a deletion
        if not isinstance(request.old_object, dict):
            if not new.selected:  # nothing of ours (the API server always sends oldObject anyway)
                return Outcome(allow(uid), "ignored")
            return Outcome(deny(uid, f"request.oldObject must be a {kind} object on UPDATE"), "invalid")
        if kind == "VirtualMachineInstance":
            before, after = hypervisor(request.old_object), hypervisor(request.object)
            if before != after and VALUE in (before, after):
                return Outcome(deny_invalid(uid, [_backend_change(before, after)]), "denied")
        old = target(kind, request.old_object)
        assert old is not None
        if not new.selected:
            return Outcome(allow(uid), "ignored")
        if old.selected and _relevant(kind, request.old_object, old) == _relevant(kind, request.object, new):
            return Outcome(allow(uid), "ignored")  # metadata-only update: nothing for us to check
    elif not new.selected:
        return Outcome(allow(uid), "ignored")
    return new


def _asks_for_host_devices(t: Target) -> bool:
    devices = get(t.template, "spec", "domain", "devices")
    return any(isinstance(found := get(devices, key), list) and len(found) > 0 for key in ("hostDevices", "gpus"))


# request.resource.resource -> kind, for a request without request.kind (KubeVirt's own webhooks
# go by the resource: kubevirt pkg/util/webhooks/webhooks.go@d923fdb815cd, ValidateRequestResource)
_RESOURCE_KINDS = {
    "virtualmachineinstances": "VirtualMachineInstance", "virtualmachines": "VirtualMachine",
    "virtualmachineinstancereplicasets": "VirtualMachineInstanceReplicaSet",
    "virtualmachinepools": "VirtualMachinePool",
}


def _kind(request: AdmissionRequest) -> str:
    """request.kind, else the object's kind, else the kind of request.resource."""
    if request.kind:
        return request.kind
    kind = get(request.object, "kind")
    if isinstance(kind, str) and kind:
        return kind
    return _RESOURCE_KINDS.get(request.resource, "")


def _relevant(kind: str, obj: dict[str, Any], t: Target) -> Any:
    """What an UPDATE must change for the feature check to run again."""
    if kind == "VirtualMachineInstance":
        return obj.get("spec")
    return t.template


def _backend_change(before: str | None, after: str | None) -> Cause:
    def show(v: str | None) -> str:
        return "absent" if v is None else repr(v)
    return Cause("FieldValueInvalid",
                 f"{ANNOTATION_FIELD}: the hypervisor of an existing VirtualMachineInstance cannot change "
                 f"(was {show(before)}, now {show(after)}); delete and re-create the VMI instead",
                 ANNOTATION_FIELD)


def vmi_from_template(t: Target, namespace: str) -> dict[str, Any] | None:
    """The VMI an object's template would become (namespace from the request, as the API server sets it)."""
    if t.template is None:
        return None
    if t.kind == "VirtualMachineInstance":
        return t.template
    metadata = dict(object_at(t.template, "metadata"))
    if namespace and not metadata.get("namespace"):
        metadata["namespace"] = namespace
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": metadata, "spec": t.template.get("spec")}


def _check(uid: str, t: Target, request: AdmissionRequest, config: Config,
           kubevirt: KubeVirtStatus | None, gate: KubeVirtStatus | None) -> Outcome:
    """The translator's verdict on the object's VMI (knowing the host devices `kubevirt`
    permits), and the version gate on `gate` (None: no gate)."""
    warnings: list[str] = []
    causes: list[Cause] = []
    if t.on_owner:
        warnings.append(f"{ANNOTATION} in {t.owner_field} does not reach the {t.kind}'s VMIs: set it in "
                        f"{t.prefix}metadata.annotations to run them on Cloud Hypervisor")
    vmi = vmi_from_template(t, request.namespace)
    if vmi is None:
        where = t.prefix.rstrip(".")
        causes.append(Cause("FieldValueRequired", f"{where} is a required field", where))
    else:
        env = (LauncherEnv(permitted_host_devices=kubevirt.host_devices, eviction_strategy=kubevirt.eviction_strategy)
               if kubevirt is not None else None)
        verdict = check(vmi, env)
        for p in verdict.problems:
            if isinstance(p, NoMemoryRequested) and t.kind != "VirtualMachineInstance":
                continue  # a template's size may come from an instancetype: KubeVirt asks it of VMIs only
            causes.append(Cause(p.reason, prefix_paths(p.message, t.prefix), prefix_field(p.field, t.prefix)))
        warnings.extend(prefix_paths(w.text, t.prefix) for w in verdict.warnings)
    problem = version_problem(gate, config.kubevirt.version_range)
    if problem:
        field = (t.prefix if t.on_template else "") + ANNOTATION_FIELD
        causes.append(Cause("FieldValueNotSupported", f"{field}: {problem}", field))
    if causes:
        return Outcome(deny_invalid(uid, causes, warnings), "denied")
    return Outcome(allow(uid, warnings), "warned" if warnings else "allowed")
