"""The migration webhook (`/validate-migration`): a VirtualMachineInstanceMigration of a Cloud
Hypervisor VMI that Cloud Hypervisor cannot migrate is refused when it is created, in virt-api's
own words. Pure: the server reads the VMI (`wants_vmi`), this module decides (`decide`).

Why here: virt-handler computes a VMI's `LiveMigratable` condition for QEMU alone, and a
containerDisk only makes it plan a block migration, so KubeVirt calls such a VMI migratable and
no launcher can say otherwise (docs/migration.md §4). virt-api refuses the migration of a VMI
whose condition is False (`kubevirt pkg/virt-api/webhooks/validating-webhook/admitters/
migration-create-admitter.go@d923fdb815cd`: `isMigratable`, `ToAdmissionResponseError`: code
400, no causes); this webhook says the same, with the same text, for what the translator finds
(`ch_launcher/convert/migration.py`): `Cannot migrate VMI, Reason: <reason>, Message: <message>`.
That covers `kubectl create` of a VMIM, `virtctl migrate` (virt-api creates the VMIM), and the
VMIMs KubeVirt's evacuation and workload-update controllers create (which then record
`FailedCreateVirtualMachineInstanceMigration` on the VMI instead of starting a target pod).

What is left alone (allowed untouched): anything but CREATE; a VMIM that only receives a
decentralized migration (`spec.receive` without `spec.sendTo`: its VMI is the waiting target;
the source side is judged where it is created); a VMI that is not annotated, or does not exist
(virt-api answers that), or is already final. A VMI the server could not read is allowed too
(`unknown`): the webhook's failurePolicy is Ignore, the source launcher's Failed result is the
backstop, and the server says why in its log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from admission.review import AdmissionRequest, allow, deny
from admission.rules import Outcome
from admission.selection import VALUE, get, hypervisor
from ch_launcher.convert import check

KIND = "VirtualMachineInstanceMigration"
RESOURCE = "virtualmachineinstancemigrations"
FINAL_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True)
class VMIName:
    """The VMI a migration names: the server reads it (`KubeClient.get_vmi`) and calls `decide`."""

    namespace: str
    name: str


def wants_vmi(request: AdmissionRequest) -> Outcome | VMIName:
    """The answer when nothing needs judging, else the VMI to read."""
    uid = request.uid
    if request.problem:
        return Outcome(deny(uid, request.problem), "invalid")
    kind = request.kind or (KIND if request.resource == RESOURCE else "")
    if request.operation != "CREATE" or kind != KIND:
        return Outcome(allow(uid), "ignored")
    obj = request.object
    if not isinstance(obj, dict):
        return Outcome(deny(uid, f"request.object must be a {KIND} object"), "invalid")
    spec = get(obj, "spec")
    name = get(spec, "vmiName")
    if not isinstance(name, str) or not name:
        return Outcome(allow(uid), "ignored")  # virt-api refuses it: "vmiName is missing"
    if get(spec, "receive") is not None and get(spec, "sendTo") is None:
        return Outcome(allow(uid), "ignored")  # the receiving side of a decentralized migration
    namespace = request.namespace or get(obj, "metadata", "namespace")
    return VMIName(namespace if isinstance(namespace, str) else "", name)


def decide(request: AdmissionRequest, vmi: Any) -> Outcome:
    """The answer for a migration of `vmi` (the VMI as the API server stores it; None: it does not
    exist). Never raises."""
    uid = request.uid
    if not isinstance(vmi, dict) or hypervisor(vmi) != VALUE:
        return Outcome(allow(uid), "ignored")
    if get(vmi, "status", "phase") in FINAL_PHASES:
        return Outcome(allow(uid), "ignored")  # virt-api: "Cannot migrate VMI in finalized state."
    blockers = check(vmi).migration_blockers
    if not blockers:
        return Outcome(allow(uid), "allowed")
    return Outcome(deny(uid, refusal(blockers)), "denied")


def unreadable(request: AdmissionRequest) -> Outcome:
    """The answer when the VMI could not be read (the server logs why)."""
    return Outcome(allow(request.uid), "unknown")


def refusal(blockers: list[tuple[str, str]]) -> str:
    """virt-api's `Cannot migrate VMI, Reason: %s, Message: %s`: the first reason, its messages,
    then any other reason with its own (`Reason: messages`), as the launcher's failure reason
    lists them."""
    grouped: dict[str, list[str]] = {}
    for reason, message in blockers:
        grouped.setdefault(reason, []).append(message)
    (first, messages), *rest = grouped.items()
    text = ", ".join(messages) + "".join(f"; {reason}: {', '.join(more)}" for reason, more in rest)
    return f"Cannot migrate VMI, Reason: {first}, Message: {text}"
