"""The launcher-pod mutator (`/mutate-pod`): virt-launcher's pod becomes ch-launcher's. Pure.

virt-controller renders the pod of every VMI with the stock launcher, sized for QEMU
(`contract.md` §9, §13). For a pod labelled `kubevirt.io=virt-launcher` whose annotations carry
the selection (virt-controller copies VMI annotations to the pod), the server reads the owning
VMI (I/O in `kube.py`) and `mutate_pod()` returns a JSONPatch that

- sets the `compute` container's image (and pull policy, if configured) from the config, never
  from the VMI, and its command to ch-launcher's, keeping virt-launcher's flags;
- replaces KubeVirt's overhead by ours in the memory request and limit and in the
  `kubevirt.io/memory-overhead-bytes` annotation (what KubeVirt added is read from that
  annotation; without it, estimated with KubeVirt's formula, erring small);
- drops virt-controller's `devices.kubevirt.io/vhost-net` request and limit from `compute` (it
  asks for one for QEMU's vhost backend of every virtio NIC; Cloud Hypervisor's virtio-net runs
  in the VMM and never opens `/dev/vhost-net`), so the pod also schedules on nodes without it,
  and mounts an empty directory at `/dev/vhost-net` in its place: virt-handler claims that path
  for uid 107 before the first Sync of a non-root VMI with a virtio NIC and fails the VMI
  ("Critical network error: failed to set up vhost-net device") where nothing is there. The
  directory has no `sizeLimit`: kubelet evicts a pod whose emptyDir uses more than its limit, and
  an empty directory already uses a filesystem block (4 KiB on ext4);
- records what changed in `kubevirt-ch.io/launcher-mutation` (JSON);
- drops the VMI's `kubevirt-ch.io/launcher-image` (`launcher_status.py`), which virt-controller
  copies to the pods it renders with the VMI's other annotations: it names the image of the VMI's
  current pod, not of this one (a migration target's).

The record makes the patch idempotent: a pod that carries it only gets its image and command
put back if another mutator changed them (reinvocationPolicy IfNeeded), never a second memory
adjustment. Migration-target pods are handled alike; other containers are never touched; the
temporary PVC-binding pod (`kubevirt.io/ephemeral-provisioning`) is left alone. Anything that
cannot be read or translated fails closed with a message naming the pod's VMI.
"""

from __future__ import annotations

import contextlib
import json
import posixpath
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from admission.cluster import KubeVirtStatus, version_problem
from admission.config import Config
from admission.overhead import CHSettings, ch_overhead, kubevirt_constants_for, kubevirt_overhead
from admission.review import AdmissionRequest, Cause, allow, deny, deny_invalid
from admission.rules import Outcome
from admission.selection import ANNOTATION, VALUE, annotations_of, get, hypervisor, object_at
from ch_launcher.convert import LauncherEnv, Plan, check
from ch_launcher.convert.runtime import runtime_processes_needed
from ch_launcher.kubevirt.quantity import format_bytes, quantity_bytes
from ch_launcher.kubevirt.vmi import InvalidVMI, parse_vmi

LAUNCHER_LABEL = "kubevirt.io"
LAUNCHER_LABEL_VALUE = "virt-launcher"
MIGRATION_LABEL = "kubevirt.io/migrationJobUID"
EPHEMERAL_ANNOTATION = "kubevirt.io/ephemeral-provisioning"
DOMAIN_ANNOTATION = "kubevirt.io/domain"
OVERHEAD_ANNOTATION = "kubevirt.io/memory-overhead-bytes"
RECORD_ANNOTATION = "kubevirt-ch.io/launcher-mutation"
IMAGE_ANNOTATION = "kubevirt-ch.io/launcher-image"  # launcher_status.IMAGE_ANNOTATION, on the VMI
COMPUTE = "compute"
VHOST_NET = "devices.kubevirt.io/vhost-net"  # virt-controller's services.VhostNetDevice
VHOST_NET_PATH = "/dev/vhost-net"  # what virt-handler's prepareNetwork chowns to 107
VHOST_NET_VOLUME = "kubevirt-ch-vhost-net"  # the empty directory standing at VHOST_NET_PATH
RUNTIME_PROCESSES_FLAG = "--kubevirt-runtime-processes"  # ch_launcher/cli.py
# What virt-controller renders as the compute command's first word (template.go@d923fdb815cd).
STOCK_COMMANDS = ("virt-launcher-monitor", "virt-launcher")
_INT64 = re.compile(r"[0-9]{1,19}")


@dataclass(frozen=True)
class NeedsVMI:
    """The pod is ours and has not been mutated: read this VMI, then call `mutate_pod()`."""

    namespace: str
    name: str
    uid: str  # the ownerReference's uid ("" if the owner was found by annotation)


def pointer(*parts: str | int) -> str:
    """An RFC 6901 JSON Pointer (`~` -> `~0`, `/` -> `~1`)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _labels(pod: dict[str, Any]) -> dict[str, Any]:
    return object_at(pod, "metadata", "labels")


def _compute(pod: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    containers = get(pod, "spec", "containers")
    if not isinstance(containers, list):
        return None
    for i, c in enumerate(containers):
        if isinstance(c, dict) and c.get("name") == COMPUTE:
            return i, c
    return None


def plan(request: AdmissionRequest, config: Config) -> Outcome | NeedsVMI:
    """First step: decide without I/O. An Outcome is final; NeedsVMI asks the server to read the VMI."""
    uid = request.uid
    if request.problem:
        return Outcome(deny(uid, request.problem), "invalid")
    if request.operation != "CREATE" or request.kind not in ("Pod", ""):
        return Outcome(allow(uid), "ignored")
    pod = request.object
    if not isinstance(pod, dict):
        return Outcome(deny(uid, "request.object must be a Pod object"), "invalid")
    anns = annotations_of(pod)
    if _labels(pod).get(LAUNCHER_LABEL) != LAUNCHER_LABEL_VALUE or anns.get(ANNOTATION) != VALUE:
        return Outcome(allow(uid), "ignored")
    if anns.get(EPHEMERAL_ANNOTATION) == "true":
        return Outcome(allow(uid), "ignored")  # virt-controller's PVC-binding pod runs no launcher
    if RECORD_ANNOTATION in anns:
        return _reapply(uid, pod, config)

    namespace = request.namespace or _meta_str(pod, "namespace")
    if not namespace:
        return Outcome(deny(uid, "the launcher pod has no namespace (request.namespace is empty)"), "invalid")
    owner = _owner(pod)
    if owner is None:
        return Outcome(deny(uid, f"launcher pod in namespace {namespace} names no owning VirtualMachineInstance "
                                 f"(no ownerReference of kind VirtualMachineInstance, no {DOMAIN_ANNOTATION} "
                                 f"annotation): cannot choose its launcher"), "denied")
    return NeedsVMI(namespace, owner[0], owner[1])


def _meta_str(pod: dict[str, Any], key: str) -> str:
    value = get(pod, "metadata", key)
    return value if isinstance(value, str) else ""


def _owner(pod: dict[str, Any]) -> tuple[str, str] | None:
    refs = get(pod, "metadata", "ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if (isinstance(ref, dict) and ref.get("kind") == "VirtualMachineInstance"
                and str(ref.get("apiVersion", "")).startswith("kubevirt.io/")
                and isinstance(ref.get("name"), str) and ref["name"]):
            uid = ref.get("uid")
            return ref["name"], uid if isinstance(uid, str) else ""
    domain = annotations_of(pod).get(DOMAIN_ANNOTATION)
    if isinstance(domain, str) and domain:
        return domain, ""
    return None


def mutate_pod(request: AdmissionRequest, config: Config, needs: NeedsVMI, vmi: Any,
               vmi_error: str | None = None, kubevirt: KubeVirtStatus | None = None) -> Outcome:
    """Second step, once the server has read the VMI (`vmi`) or failed to (`vmi_error`)."""
    uid, pod = request.uid, request.object
    where = f"VirtualMachineInstance {needs.namespace}/{needs.name}"
    if vmi_error is not None:
        return Outcome(deny(uid, f"cannot choose the launcher: {vmi_error}", 500, "InternalError"), "denied")
    if not isinstance(vmi, dict):
        return Outcome(deny(uid, f"cannot choose the launcher: {where} is not an object", 500, "InternalError"),
                       "denied")
    found_uid = get(vmi, "metadata", "uid")
    if needs.uid and isinstance(found_uid, str) and found_uid and found_uid != needs.uid:
        return Outcome(deny(uid, f"{where} has uid {found_uid}, but the pod belongs to uid {needs.uid}: "
                                 f"the VMI was re-created; refusing a stale launcher pod", 409, "Conflict"), "denied")
    if hypervisor(vmi) != VALUE:
        return Outcome(deny(uid, f"the launcher pod selects Cloud Hypervisor ({ANNOTATION}: {VALUE}) but its {where} "
                                 f"does not; refusing to guess the backend", 400, "BadRequest"), "denied")

    problem = version_problem(kubevirt, config.kubevirt.version_range)
    if problem:
        return Outcome(deny(uid, f"{where}: {problem}", 403, "Forbidden"), "denied")
    verdict = check(vmi, LauncherEnv(permitted_host_devices=kubevirt.host_devices) if kubevirt is not None else None)
    warnings = [w.text for w in verdict.warnings]
    if verdict.problems:
        causes = [Cause(p.reason, f"{where}: {p.message}", p.field) for p in verdict.problems]
        return Outcome(deny_invalid(uid, causes, warnings), "denied")
    try:
        model = parse_vmi(vmi)
    except InvalidVMI as e:  # check() accepted it, so this cannot happen; fail closed all the same
        return Outcome(deny(uid, f"{where}: {e}"), "denied")

    found = _compute(pod)
    if found is None:
        return Outcome(deny(uid, f"the launcher pod of {where} has no '{COMPUTE}' container"), "denied")
    index, container = found
    try:
        ops, record = _launcher_ops(index, container, config, runtime_processes=runtime_processes_needed(model))
        assert verdict.plan is not None  # no problems: a plan
        memory_ops, memory_record, overhead = _memory_ops(index, container, pod, model, verdict.plan, config,
                                                          kubevirt)
        ops += memory_ops + _device_ops(index, container, pod, record)
    except _Refuse as e:
        return Outcome(deny(uid, f"the launcher pod of {where}: {e}"), "denied")
    record.update(memory_record)
    ops.append({"op": "replace" if OVERHEAD_ANNOTATION in annotations_of(pod) else "add",
                "path": pointer("metadata", "annotations", OVERHEAD_ANNOTATION), "value": str(overhead)})
    ops.append({"op": "add", "path": pointer("metadata", "annotations", RECORD_ANNOTATION),
                "value": json.dumps(record, sort_keys=True, separators=(",", ":"))})
    if IMAGE_ANNOTATION in annotations_of(pod):
        ops.append({"op": "remove", "path": pointer("metadata", "annotations", IMAGE_ANNOTATION)})
    audit = {"launcher-image": config.launcher.image}
    if MIGRATION_LABEL in _labels(pod):
        audit["migration-target"] = "true"
    return Outcome(allow(uid, warnings, ops, audit), "mutated")


class _Refuse(Exception):
    pass


def _launcher_ops(index: int, c: dict[str, Any], config: Config, *, runtime_processes: bool = False,
                  ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Image, pull policy and command of `compute`; virt-launcher's flags are kept. With
    `runtime_processes` (a VMI virt-handler's KVM runtime reaches into, docs/process-model.md)
    the launcher gets `--kubevirt-runtime-processes`."""
    ops: list[dict[str, Any]] = []
    record: dict[str, Any] = {}
    old_image = c.get("image")
    ops.append({"op": "replace" if "image" in c else "add", "path": pointer("spec", "containers", index, "image"),
                "value": config.launcher.image})
    record["image"] = {"from": old_image, "to": config.launcher.image}
    if config.launcher.imagePullPolicy:
        ops.append({"op": "replace" if "imagePullPolicy" in c else "add",
                    "path": pointer("spec", "containers", index, "imagePullPolicy"),
                    "value": config.launcher.imagePullPolicy})
    command = c.get("command")
    if not isinstance(command, list) or not command or not all(isinstance(w, str) for w in command):
        raise _Refuse(f"the '{COMPUTE}' container has no command to replace")
    if posixpath.basename(command[0]) not in STOCK_COMMANDS:
        raise _Refuse(f"the '{COMPUTE}' container runs {command[0]!r}, not virt-launcher; refusing to replace "
                      f"a command this add-on does not know")
    new_command = list(config.launcher.command) + ([RUNTIME_PROCESSES_FLAG] if runtime_processes else []) + command[1:]
    ops.append({"op": "replace", "path": pointer("spec", "containers", index, "command"), "value": new_command})
    record["command"] = {"from": command[0], "to": list(config.launcher.command)}
    return ops, record


def _memory_ops(index: int, c: dict[str, Any], pod: dict[str, Any], vmi: Any, plan: Plan, config: Config,
                kubevirt: KubeVirtStatus | None) -> tuple[list[dict[str, Any]], dict[str, Any], int]:
    """Swap KubeVirt's overhead for ours in the memory request and limit (contract.md §13 rules)."""
    arch = vmi.spec.architecture or _node_arch(pod) or "amd64"
    bindings = kubevirt.bindings if kubevirt is not None else {}
    ours = ch_overhead(vmi, plan, settings=CHSettings.from_mib(config.overhead.launcherMiB, config.overhead.vmmMiB),
                       arch=arch, ratio=config.overhead.ratio, bindings=bindings).total
    theirs, source = _kubevirt_added(pod, vmi, arch, kubevirt)
    resources = object_at(c, "resources")
    memory = vmi.spec.domain.memory
    hugepages = memory is not None and memory.hugepages is not None
    # KubeVirt adds the overhead to the request unless overcommitGuestOverhead (with hugepages the
    # request *is* the overhead plus request - guest), and to the limit whenever there is one.
    in_request = hugepages or not vmi.spec.domain.resources.overcommitGuestOverhead
    ops: list[dict[str, Any]] = []
    record: dict[str, Any] = {"memoryOverheadBytes": {"kubevirt": theirs, "kubevirtSource": source,
                                                      "cloudHypervisor": ours}}
    for kind, applies in (("requests", in_request), ("limits", True)):
        values = object_at(resources, kind)
        if "memory" not in values or not applies:
            continue
        try:
            old = quantity_bytes(values["memory"])
        except ValueError as e:
            raise _Refuse(f"{kind}.memory of '{COMPUTE}' is not a quantity: {e}") from None
        if old < theirs:
            raise _Refuse(f"{kind}.memory of '{COMPUTE}' ({values['memory']}) is smaller than KubeVirt's "
                          f"overhead ({theirs} bytes, {source}); refusing to guess the guest's share")
        new = old - theirs + ours
        ops.append({"op": "replace", "path": pointer("spec", "containers", index, "resources", kind, "memory"),
                    "value": format_bytes(new)})
        record[f"{kind}.memory"] = {"from": str(values["memory"]), "to": format_bytes(new)}
    return ops, record, ours


def _device_ops(index: int, c: dict[str, Any], pod: dict[str, Any], record: dict[str, Any]) -> list[dict[str, Any]]:
    """Replace the vhost-net device of `compute` by an empty directory at its path (noted in
    `record`: `removedResources`, `placeholders`). Refuses a pod that already has a volume of
    the placeholder's name or a mount at that path (no guessing whose it is)."""
    found = c.get("resources")
    resources: dict[str, Any] = found if isinstance(found, dict) else {}
    kinds = [kind for kind in ("requests", "limits")
             if isinstance(resources.get(kind), dict) and VHOST_NET in resources[kind]]
    if not kinds:
        return []
    volumes = get(pod, "spec", "volumes")
    volumes = volumes if isinstance(volumes, list) else None
    mounts = c.get("volumeMounts")
    mounts = mounts if isinstance(mounts, list) else None
    if any(isinstance(v, dict) and v.get("name") == VHOST_NET_VOLUME for v in volumes or []):
        raise _Refuse(f"it already has a volume named {VHOST_NET_VOLUME!r}")
    if any(isinstance(m, dict) and m.get("mountPath") == VHOST_NET_PATH for m in mounts or []):
        raise _Refuse(f"'{COMPUTE}' already mounts something at {VHOST_NET_PATH}")
    ops: list[dict[str, Any]] = [
        {"op": "remove", "path": pointer("spec", "containers", index, "resources", kind, VHOST_NET)} for kind in kinds]
    volume: dict[str, Any] = {"name": VHOST_NET_VOLUME, "emptyDir": {}}
    mount: dict[str, Any] = {"name": VHOST_NET_VOLUME, "mountPath": VHOST_NET_PATH}
    ops.append({"op": "add", "path": pointer("spec", "volumes", "-"), "value": volume} if volumes is not None
               else {"op": "add", "path": pointer("spec", "volumes"), "value": [volume]})
    ops.append({"op": "add", "path": pointer("spec", "containers", index, "volumeMounts", "-"), "value": mount}
               if mounts is not None
               else {"op": "add", "path": pointer("spec", "containers", index, "volumeMounts"), "value": [mount]})
    record["removedResources"] = [VHOST_NET]
    record["placeholders"] = [VHOST_NET_PATH]
    return ops


def _kubevirt_added(pod: dict[str, Any], vmi: Any, arch: str, kubevirt: KubeVirtStatus | None) -> tuple[int, str]:
    """What virt-controller added for QEMU: its annotation, else KubeVirt's formula (erring small)."""
    value = annotations_of(pod).get(OVERHEAD_ANNOTATION)
    # virt-controller writes an int64 in ASCII digits; anything else (str.isdigit() also accepts
    # '²', which int() refuses) means the annotation is not KubeVirt's, so estimate instead.
    if isinstance(value, str) and _INT64.fullmatch(value.strip()):
        return int(value.strip()), "annotation"
    version = kubevirt.version if kubevirt is not None else None
    constants = kubevirt_constants_for(version)
    ratio = Decimal(1)
    if kubevirt is not None and kubevirt.ratio:
        with contextlib.suppress(InvalidOperation):
            ratio = Decimal(kubevirt.ratio)
    estimate = kubevirt_overhead(vmi, constants=constants, arch=arch, ratio=ratio,
                                 bindings=kubevirt.bindings if kubevirt is not None else {})
    return estimate.total, f"estimated with KubeVirt {constants.name} constants"


def _node_arch(pod: dict[str, Any]) -> str:
    arch = get(pod, "spec", "nodeSelector", "kubernetes.io/arch")
    return arch if isinstance(arch, str) else ""


def _reapply(uid: str, pod: dict[str, Any], config: Config) -> Outcome:
    """A pod we already mutated: put image and command back if someone changed them, nothing else."""
    found = _compute(pod)
    if found is None:
        return Outcome(allow(uid), "ignored")
    index, c = found
    ops: list[dict[str, Any]] = []
    if c.get("image") != config.launcher.image:
        ops.append({"op": "replace" if "image" in c else "add", "path": pointer("spec", "containers", index, "image"),
                    "value": config.launcher.image})
    if config.launcher.imagePullPolicy and c.get("imagePullPolicy") != config.launcher.imagePullPolicy:
        ops.append({"op": "replace" if "imagePullPolicy" in c else "add",
                    "path": pointer("spec", "containers", index, "imagePullPolicy"),
                    "value": config.launcher.imagePullPolicy})
    command = c.get("command")
    want = list(config.launcher.command)
    if (isinstance(command, list) and command and command[:len(want)] != want
            and posixpath.basename(str(command[0])) in STOCK_COMMANDS):
        # only virt-launcher's own command is put back; a command someone else chose is theirs
        ops.append({"op": "replace", "path": pointer("spec", "containers", index, "command"),
                    "value": want + command[1:]})
    if not ops:
        return Outcome(allow(uid), "unchanged")
    return Outcome(allow(uid, patch=ops, audit={"launcher-image": config.launcher.image}), "mutated")
