"""virt-handler's migration-source rules and virt-controller's migration-object rules, as they
decide from a source launcher's Domain whether a migration failed, is still running, or must be
started (again). Pure functions over the decoded objects, each transliterated from the Go it
names (`kubevirt/kubevirt @d923fdb815cd`), so that a launcher whose Domain virt-handler could
not match (a wrong UID, a missing field) fails a test instead of hanging a cluster:

- `pkg/virt-handler/migration-source.go`: `execute`, `isMigrationSource`, `sync`, `processVMI`,
  `migrateVMI`, `handleMigrationAbort`, `setMigrationProgressStatus`, `isMigrationDone`;
- `pkg/virt-handler/controller.go`: `isMigrationInProgress`;
- `pkg/virt-controller/watch/migration/migration.go`: `updateStatus` (a non-final migration whose
  VMI reports `failed` under its UID fails; a final one copies the VMI's migration state) and
  `processMigrationPhase` (`TargetReady` -> `Running` on `startTimestamp`, `Running` ->
  `Succeeded` on `completed`), and `markMigrationAbortInVmiStatus` (only in `Running`).

The Domain's `Spec.Metadata.KubeVirt.Migration` is read as Go decodes `api.MigrationMetadata`
(no json tags: Go field names; an absent field is its zero value; an unknown one is refused,
as the probe in ../shared/tools refuses unknown Domain fields).
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

# api.MigrationMetadata (pkg/virt-launcher/virtwrap/api/schema.go)
METADATA_FIELDS = ("UID", "StartTimestamp", "EndTimestamp", "Failed", "FailureReason", "AbortStatus", "Mode")
ABORT_HANDLED = ("Aborting", "Succeeded")  # handleMigrationAbort's abortHandled
PAUSED_IN_MIGRATION = ("Migration", "StartingUp", "Postcopy")  # isMigrationInProgress
FINAL_PHASES = ("Succeeded", "Failed")


class UnknownMetadataField(AssertionError):
    """The Domain's migration metadata has a field `api.MigrationMetadata` does not."""


def migration_metadata(domain: dict[str, Any] | None) -> dict[str, Any] | None:
    """`domain.Spec.Metadata.KubeVirt.Migration`, every field present (zero values for absent ones)."""
    if domain is None:
        return None
    found = (((domain.get("Spec") or {}).get("Metadata") or {}).get("KubeVirt") or {}).get("Migration")
    if found is None:
        return None
    unknown = set(found) - set(METADATA_FIELDS)
    if unknown:
        raise UnknownMetadataField(f"the Domain's migration metadata has fields api.MigrationMetadata does not: "
                                   f"{sorted(unknown)}")
    zero: dict[str, Any] = {"UID": "", "StartTimestamp": None, "EndTimestamp": None, "Failed": False,
                            "FailureReason": "", "AbortStatus": "", "Mode": ""}
    return {**zero, **{k: v for k, v in found.items() if v is not None}}


def domain_status(domain: dict[str, Any] | None) -> tuple[str, str]:
    status = (domain or {}).get("Status") or {}
    return status.get("Status", ""), status.get("Reason", "")


def domain_alive(domain: dict[str, Any] | None) -> bool:
    """`processVMI`: the domain exists and is not Shutoff, Crashed or ""."""
    return domain is not None and domain_status(domain)[0] not in ("Shutoff", "Crashed", "")


def is_migration_done(state: dict[str, Any] | None) -> bool:
    """`isMigrationDone`: no state, or ended and (completed or failed)."""
    return state is None or (state.get("endTimestamp") is not None
                             and bool(state.get("completed") or state.get("failed")))


def is_migration_in_progress(vmi: dict[str, Any], domain: dict[str, Any] | None) -> bool:
    """`isMigrationInProgress` (controller.go), for a VMI that is not a decentralized target."""
    state = vmi["status"].get("migrationState")
    if state is not None and state.get("startTimestamp") is not None and state.get("endTimestamp") is None:
        return True
    meta = migration_metadata(domain)
    if meta is not None and meta["StartTimestamp"] is not None and meta["EndTimestamp"] is None:
        return True
    status, reason = domain_status(domain)
    return status == "Paused" and reason in PAUSED_IN_MIGRATION


def is_migration_source(vmi: dict[str, Any], host: str) -> bool:
    """`isMigrationSource` for a migration that is not decentralized."""
    state = vmi["status"].get("migrationState")
    return state is not None and vmi["status"].get("nodeName") == host and state.get("sourceNode") == host


@dataclass
class K8sEvent:
    type: str
    reason: str
    message: str


def set_migration_progress_status(vmi: dict[str, Any], domain: dict[str, Any] | None, host: str) -> list[K8sEvent]:
    """`setMigrationProgressStatus`: copy the Domain's migration result into the VMI's
    `status.migrationState` when its UID is the VMI's `migrationUid`. Returns the events recorded."""
    meta = migration_metadata(domain)
    state = vmi["status"].get("migrationState")
    if meta is None or state is None or not is_migration_source(vmi, host):
        return []
    if meta["UID"] != state.get("migrationUid", ""):
        return []
    events = []
    if meta["StartTimestamp"] is not None:
        state["startTimestamp"] = meta["StartTimestamp"]
    state["failed"] = meta["Failed"]
    if meta["Failed"]:
        state["completed"] = True
        state["endTimestamp"] = meta["EndTimestamp"]
        state["abortStatus"] = meta["AbortStatus"]
        state["failureReason"] = meta["FailureReason"]
        events.append(K8sEvent("Warning", "Migrated", f"VirtualMachineInstance migration uid {meta['UID']} failed. "
                                                      f"reason:{meta['FailureReason']}"))
    state["mode"] = meta["Mode"]
    return events


@dataclass
class Reply:
    """A Cmd RPC's answer: `success`, `message`."""

    success: bool
    message: str


@dataclass
class SourceController:
    """virt-handler's migration-source controller for one VMI on `host`, over the VMI as the API
    server stores it (`vmi`: updated in place, as virt-handler's Update writes it).

    `migrate()` and `cancel()` are the launcher's MigrateVirtualMachine and
    CancelVirtualMachineMigration (they get the VMI virt-handler sends). Everything the
    controller did is kept: the RPCs it made, their answers, the events it recorded."""

    vmi: dict[str, Any]
    host: str
    migrate: Callable[[dict[str, Any]], Awaitable[Reply]]
    cancel: Callable[[dict[str, Any]], Awaitable[Reply]]
    calls: list[tuple[str, Reply]] = field(default_factory=list)
    events: list[K8sEvent] = field(default_factory=list)
    updates: int = 0

    @property
    def state(self) -> dict[str, Any] | None:
        state: dict[str, Any] | None = self.vmi["status"].get("migrationState")
        return state

    def migrate_calls(self) -> list[Reply]:
        return [reply for rpc, reply in self.calls if rpc == "MigrateVirtualMachine"]

    async def execute(self, domain: dict[str, Any] | None) -> str:
        """One `execute` of the VMI's key with `domain` as the informer holds it: what it did
        ("no migration", "done", "not the source", "synced", or "error: <msg>")."""
        if self.vmi["status"].get("phase") in FINAL_PHASES or self.state is None:
            return "no migration"
        if is_migration_done(self.state):
            return "done"  # StopSourceListener, nothing more
        if not is_migration_source(self.vmi, self.host):
            return "not the source"
        return await self._sync(domain)

    async def _sync(self, domain: dict[str, Any] | None) -> str:
        working = copy.deepcopy(self.vmi)
        old_status = copy.deepcopy(working["status"])
        error = await self._process_vmi(working, domain)
        if error:
            self.events.append(K8sEvent("Warning", "SyncFailed", error))
        self.events.extend(set_migration_progress_status(working, domain, self.host))
        if working["status"] != old_status:
            self.vmi.clear()
            self.vmi.update(working)  # the Update (PUT) of the whole VMI
            self.updates += 1
        return f"error: {error}" if error else "synced"

    async def _process_vmi(self, vmi: dict[str, Any], domain: dict[str, Any] | None) -> str:
        """`processVMI` -> `migrateVMI`; the error text virt-handler would get ("" for none)."""
        if not domain_alive(domain):
            return ""
        state = vmi["status"]["migrationState"]
        if state.get("abortRequested"):
            meta = migration_metadata(domain)
            if (meta is not None and meta["AbortStatus"] in ABORT_HANDLED) or state.get("abortStatus") in ABORT_HANDLED:
                return ""
            reply = await self.cancel(copy.deepcopy(vmi))
            self.calls.append(("CancelVirtualMachineMigration", reply))
            if not reply.success:
                return f'server error. command CancelMigration failed: "{reply.message}"'
            self.events.append(K8sEvent("Normal", "Migrating", "Aborting migration."))
            return ""
        if is_migration_in_progress(vmi, domain):
            return ""
        if not state.get("targetDirectMigrationNodePorts"):
            return ""  # waiting for the target to publish its ports (re-queued after 1 s)
        reply = await self.migrate(copy.deepcopy(vmi))
        self.calls.append(("MigrateVirtualMachine", reply))
        if not reply.success:
            return f'server error. command Migrate failed: "{reply.message}"'
        self.events.append(K8sEvent("Normal", "Migrating", "VirtualMachineInstance is migrating."))
        return ""


@dataclass
class MigrationObject:
    """A VirtualMachineInstanceMigration as virt-controller moves it on from `TargetReady`."""

    uid: str
    phase: str = "TargetReady"
    migration_state: dict[str, Any] | None = None
    events: list[K8sEvent] = field(default_factory=list)

    @property
    def final(self) -> bool:
        return self.phase in FINAL_PHASES

    def observe(self, vmi: dict[str, Any]) -> str:
        """One `updateStatus` with the VMI as stored; the phase after it."""
        state = vmi["status"].get("migrationState")
        if self.final:
            if state is not None and state.get("migrationUid") == self.uid:
                self.migration_state = copy.deepcopy(state)
            return self.phase
        if state is not None and state.get("migrationUid") == self.uid and state.get("failed"):
            self.phase = "Failed"
            self.events.append(K8sEvent("Warning", "FailedMigration", "source node reported migration failed"))
            return self.phase
        if self.phase == "TargetReady" and state is not None and state.get("startTimestamp") is not None:
            self.phase = "Running"
        elif self.phase == "Running" and state is not None and state.get("completed"):
            self.phase = "Succeeded"
        return self.phase

    def delete(self, vmi: dict[str, Any]) -> bool:
        """`virtctl migrate-cancel` after hand-off: `markMigrationAbortInVmiStatus`, which only
        the `Running` phase does. Whether the VMI now asks for the abort."""
        state = vmi["status"].get("migrationState")
        if self.phase != "Running" or state is None:
            return False
        state["abortRequested"] = True
        return True
