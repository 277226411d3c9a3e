"""The source side of a live migration (docs/migration.md §3.2, §3.3, §5): MigrateVirtualMachine,
CancelVirtualMachineMigration, and what the VMM's events mean while it sends.

Imported on first use by `manager.core` (the RPCs), never by a launcher that does not migrate. It
works with the manager's own objects (`parts.ManagerParts`). Everything here runs on
the manager's event loop; the relay's thread reports through `call_soon_threadsafe`. The VMM's
events are observations, applied at once; the migration's own work (the send, settling a failure,
stopping a VMM whose VM moved, the progress check) runs under the manager's lock, started through
the runner, which also owns its timers.

What the Domain says, in order (as the Go launcher, `live-migration-source.go@d923fdb815cd`):
metadata `{UID, StartTimestamp, Mode: PreCopy}` once accepted; `Paused`/`Migration` while Cloud
Hypervisor has paused the VM for the switch-over; then either `Shutoff`/`Migrated` with
`EndTimestamp` (one event), or, once the VM runs again, `Failed`, `FailureReason` and
`EndTimestamp`. A VMI the translator does not let migrate, a VMM that cannot, or options that
cannot be honoured fail the *migration* (metadata), not the RPC: retrying the RPC could not help.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ch_launcher.ch.api import ChApiError
from ch_launcher.convert.migration import blockers_text
from ch_launcher.kubevirt import migration as km
from ch_launcher.kubevirt.domain import Reason, now_rfc3339
from ch_launcher.lifecycle import ALIVE, NOT_RUNNING, UP, VmState
from ch_launcher.manager.settings import CommandFailed
from ch_launcher.migration.relay import Relay

if TYPE_CHECKING:
    from ch_launcher.ch.events import Event
    from ch_launcher.kubevirt.vmi import VirtualMachineInstance
    from ch_launcher.manager.parts import ManagerParts
    from ch_launcher.manager.record import DomainRecord

log = logging.getLogger(__name__)

MIN_VERSION = 53  # v53's send-migration returns at once; before, it blocks the whole API
FAILURE_LINE = re.compile(r"Migration failed: (.*)")
REASON_WAIT = 2.0   # s: the VMM thread logs "Migration failed: ..." just after the worker's event
RESUME_WAIT = 10.0  # s: a VM the migration paused is resumed right after the failure
FINISH_WAIT = 5.0   # s: the VMM's migration-finished follows the stream's completion
WORK = "migration-source"  # what holds the manager's lock while this side's work runs


async def migrate(parts: ManagerParts, vmi: VirtualMachineInstance, options_json: bytes) -> str:
    """Accept a migration (metadata published) and start it in the background; raises
    CommandFailed for a request that cannot be a migration at all, among them one without a
    migration UID: virt-handler reads a result only under the UID it knows, so a result under ""
    would never be read and the migration would hang (Go accepts "", but Go cannot misread its
    own VMI)."""
    options = _decode(options_json)
    if vmi.status.migrationState is None:
        raise CommandFailed("cannot migrate VMI until migrationState is ready")
    uid = km.migration_uid(vmi)
    if not uid:
        raise CommandFailed("cannot migrate VMI without a migration UID: status.migrationState.migrationUid "
                            "(sourceState.migrationUID for a decentralized migration) is empty, so virt-handler "
                            "could never match this migration's result")
    record = parts.record
    meta = record.migration
    if meta is not None and meta.uid == uid:
        if not meta.ended:
            return "the migration is already in progress"
        raise CommandFailed(meta.already_executed())
    previous = parts.life.migration
    if previous is not None and not previous.ended:
        raise CommandFailed(f"migration {previous.uid} is still in progress")
    record.migration = km.MigrationMetadata(uid=uid, start=now_rfc3339())
    outgoing = Outgoing(parts, vmi, options, uid)
    parts.life.migration = outgoing  # it hears the VMM first from now on
    record.publish()
    parts.runner.background(WORK, outgoing.run)
    return "migration started"


async def cancel(parts: ManagerParts, vmi: VirtualMachineInstance) -> str:
    """`cancelMigration`: ignored unless a migration runs and no abort is under way."""
    meta = parts.record.migration
    outgoing = parts.life.migration
    if (meta is None or meta.ended or meta.failed or meta.start is None or not isinstance(outgoing, Outgoing)
            or outgoing.ended):
        log.info("cancel migration ignored: vmi is not migrating")
        return "not migrating"
    if meta.abort_status in (km.ABORT_IN_PROGRESS, km.ABORT_SUCCEEDED):
        return f"abort already {meta.abort_status.lower()}"
    outgoing.abort(km.ABORTED_REASON)
    return "abort requested"


def _decode(options_json: bytes) -> km.MigrationOptions:
    try:
        return km.MigrationOptions.decode(options_json)
    except km.InvalidOptions as e:
        raise CommandFailed(str(e)) from None


class Outgoing:
    """One outgoing migration: its relay, the VMM's send, and the end it comes to."""

    def __init__(self, parts: ManagerParts, vmi: VirtualMachineInstance, options: km.MigrationOptions,
                 uid: str) -> None:
        self.parts = parts
        self.record: DomainRecord = parts.record
        self.vmi = vmi
        self.options = options
        self.uid = uid
        self.relay: Relay | None = None
        self.ended = False
        self.sending = False        # the VMM accepted vm.send-migration
        self.failing = False        # vm:migration-failed seen, result being settled
        self.memory_total = 0
        self._progress_timer: asyncio.TimerHandle | None = None
        self._finish_timer: asyncio.TimerHandle | None = None

    # --- start -----------------------------------------------------------------------------------

    async def run(self) -> None:
        """The checks that fail the migration at once, then the relay and vm.send-migration. Runs
        after the start was published, as the Go launcher's `migrate` runs after
        `initializeMigrationMetadata`: virt-handler should see the migration in progress before it
        ends. (A Domain that arrives already ended makes virt-handler's next sync call Migrate once
        more, `isMigrationInProgress` being false, and record the "already executed" answer as a
        SyncFailed warning: its informer may still skip the start, as with Go.)"""
        parts = self.parts
        plan, vmm = self.record.plan, parts.life.current
        if plan is not None and plan.migration_blockers:
            self.fail(blockers_text(plan.migration_blockers))
            return
        if vmm is None or plan is None or self.record.state not in UP:
            self.fail(NOT_RUNNING)
            return
        version = parts.life.version or ""
        try:
            major = int(version.split(".")[0])
        except ValueError:
            major = 0
        if major < MIN_VERSION:
            self.fail(f"live migration needs cloud-hypervisor v{MIN_VERSION} or newer (its send-migration "
                      f"runs in the background); this VMM is {version or 'unknown'}")
            return
        proxy = km.proxy_socket(parts.settings.share_dir, self.vmi.metadata.uid)
        if not os.path.exists(proxy):  # noqa: ASYNC240 - one stat of a local socket path
            self.fail(f"virt-handler's migration proxy socket {proxy} does not exist")
            return
        for note in self.options.degradations():
            log.warning("migration %s degraded: %s", self.uid, note)
        if self.options.degradations():
            self.record.k8s_event("Normal", "MigrationDegraded", "Cloud Hypervisor cannot honour every migration "
                                  "option: " + "; ".join(self.options.degradations()))
        if self.options.unsafe_migration:
            log.info("UnsafeMigration is set: Cloud Hypervisor has no migration safety checks to disable")
        api_socket = parts.settings.vmm_paths[0]
        listen = os.path.join(os.path.dirname(api_socket), "migration-out.sock")
        loop = asyncio.get_running_loop()
        relay = Relay(listen, proxy, name="send", bandwidth=self.options.bandwidth,
                      on_end=self._from_relay_thread(loop))
        try:
            relay.start()
        except OSError as e:
            self.fail(f"cannot listen on {listen} for the VMM's migration stream: {e.strerror or e}")
            return
        self.relay = relay
        self.memory_total = plan.config.memory.size if plan.config.memory else 0
        body = self.options.send_migration_data(f"unix:{listen}", km.data_size_gb(self.vmi))
        try:
            await vmm.call(vmm.client.send_migration, body["destination_url"], downtime_ms=body.get("downtime_ms"),
                           timeout_s=body.get("timeout_s"), connections=body["connections"],
                           timeout_strategy=body["timeout_strategy"])
        except ChApiError as e:
            relay.close()
            self.fail(f"cloud-hypervisor refused to send the VM: {e}")
            return
        self.sending = True
        log.info("Initiating live migration %s to %s (%s)", self.uid, proxy,
                 ", ".join(f"{k}={v}" for k, v in body.items() if k != "destination_url"))
        self._arm_progress_timer()

    # --- what happens --------------------------------------------------------------------------

    def on_event(self, event: Event) -> bool:
        """The VMM's events while sending; False lets the manager handle them as usual."""
        if self.ended:
            return False
        record = self.record
        name = event.name
        if name == "vm:paused" and self.sending:
            record.migration_paused = True  # the switch-over: Paused/Migration, not Paused/Unknown
            return False
        if name == "vm:resumed":
            record.migration_paused = False
            if self.failing:
                record.bump()
            return False
        if name == "vm:migration-memory-iteration":
            p = self.relay.progress() if self.relay is not None else None
            log.info("migration %s: iteration %s done, %d MiB sent", self.uid, (event.properties or {}).get("id"),
                     (p.memory_bytes if p else 0) >> 20)
            return True
        if name == "vm:migration-finished":
            self.succeeded()
            return True
        if name == "vm:migration-failed":
            self.failing = True
            self.parts.runner.watch("migration failure", self._settle_failure())
            return True
        return name in ("vm:migration-started", "vm:snapshotting", "vm:snapshotted")

    def on_vmm_exit(self, code: int | None) -> None:
        """The VMM exited before the migration ended: the VM moved if the target acknowledged
        `Complete`, else it is lost with the VMM (the manager reports Shutoff/Crashed)."""
        if self.ended:
            return
        if self.relay is not None and self.relay.progress().complete_acked:
            self.succeeded()
            return
        how = "was killed" if code is not None and code < 0 else f"exited with code {code}"
        self.finish(failed=True, reason=f"Live migration failed: cloud-hypervisor {how} during the migration",
                    publish=False)

    def _from_relay_thread(self, loop: asyncio.AbstractEventLoop) -> Callable[[str, str], None]:
        """The relay's `on_end`, called in its thread: `_relay_ended` on the event loop."""
        def on_end(outcome: str, detail: str) -> None:
            loop.call_soon_threadsafe(self._relay_ended, outcome, detail)

        return on_end

    def _relay_ended(self, outcome: str, detail: str) -> None:
        log.info("migration %s: the stream ended: %s (%s)", self.uid, outcome, detail)
        if outcome == "completed" and not self.ended:
            # The target runs the VM. The VMM's own `migration-finished` follows; if it never
            # comes (its read of the last answer failed), the VM must not run twice.
            self._finish_timer = self.parts.runner.later(FINISH_WAIT, WORK, self._committed_without_finish)

    async def _committed_without_finish(self) -> None:
        if not self.ended and not self.failing:
            log.error("migration %s: the target resumed the VM but the source VMM did not finish; stopping it",
                      self.uid)
            await self._moved_anyway()

    # --- ends ----------------------------------------------------------------------------------

    def succeeded(self) -> None:
        """The VM runs on the target: Shutoff/Migrated and EndTimestamp in one event."""
        record = self.record
        self.finish(failed=False, publish=False)
        record.migration_paused = False
        if record.state in ALIVE:
            record.set_state(VmState.DOWN, down=Reason.MIGRATED, force=True)
        else:
            record.publish(force=True)
        log.info("Live migration %s succeeded.", self.uid)

    async def _moved_anyway(self) -> None:
        """The target runs the VM although this VMM did not say so: this copy is stopped (under
        the lock, like any stop of the VMM), so that the VM never runs twice."""
        if not self.ended:
            self.succeeded()
        await self.parts.life.stop()

    async def _settle_failure(self) -> None:
        """After `vm:migration-failed`: if the target acknowledged Complete, the VM moved after all
        (stop this copy); else wait until the VMM resumed a VM it had paused, read its reason. The
        waits hold no lock; the outcome is settled under it."""
        record = self.record
        if self.relay is not None and self.relay.progress().complete_acked:
            await self.parts.runner.locked(WORK, self._moved_anyway)
            return
        if record.migration_paused:
            await record.wait_until(lambda: not record.migration_paused or record.state is not VmState.PAUSED,
                                    RESUME_WAIT)
        reason = await self._vmm_reason()

        async def failed() -> None:
            self.finish(failed=True, reason=f"Live migration failed: {reason}" if reason else "Live migration failed.")

        await self.parts.runner.locked(WORK, failed)

    async def _vmm_reason(self) -> str:
        """The VMM's `Migration failed: <chain>` from its log (written just after the event)."""
        path = self.parts.settings.vmm_paths[2]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + REASON_WAIT
        while True:
            found = await asyncio.to_thread(_last_failure, path)
            if found or loop.time() >= deadline:
                return found
            await asyncio.sleep(0.05)

    def fail(self, reason: str) -> None:
        log.error("Live migration %s failed: %s", self.uid, reason)
        self.finish(failed=True, reason=reason)

    def abort(self, reason: str) -> None:
        """Cut the stream unless `Complete` has gone through (then the abort fails and the
        migration completes). Publishes Aborting, then Succeeded or Failed."""
        record = self.record
        self._set_abort_status(km.ABORT_IN_PROGRESS)
        record.publish()
        relay = self.relay
        if not self.sending and not self.ended:
            # Not started yet (checks still running): nothing went to the target.
            self._set_abort_status(km.ABORT_SUCCEEDED)
            self.finish(failed=True, reason=reason)
            return
        if relay is not None and relay.cut():
            self._set_abort_status(km.ABORT_SUCCEEDED)
            log.info("Live migration %s abort succeeded", self.uid)
        else:
            self._set_abort_status(km.ABORT_FAILED)
            log.warning("Live migration %s: too late to abort (the target has the VM)", self.uid)
        record.publish()

    def _metadata(self) -> km.MigrationMetadata:
        meta = self.record.migration
        assert meta is not None  # set when the migration was accepted, never taken away
        return meta

    def _set_abort_status(self, status: str) -> None:
        self.record.migration = replace(self._metadata(), abort_status=status)

    def finish(self, *, failed: bool, reason: str = "", publish: bool = True) -> None:
        """`setMigrationResult` (once)."""
        if self.ended:
            return
        self.ended = True
        for timer in (self._progress_timer, self._finish_timer):
            if timer is not None:
                timer.cancel()
        record = self.record
        record.migration = self._metadata().finished(now_rfc3339(), failed=failed, reason=reason)
        if self.relay is not None:
            self.relay.close()
        if publish:
            record.publish(force=True)

    async def close(self) -> None:
        if self.relay is not None:
            self.relay.close()

    # --- progress ------------------------------------------------------------------------------

    def _arm_progress_timer(self) -> None:
        timeout = self.options.progress_timeout
        if timeout <= 0 or self.ended:
            return
        self._progress_timer = self.parts.runner.later(timeout, WORK, self._check_progress)

    async def _check_progress(self) -> None:
        """`ProgressTimeout`: no byte for that long aborts (as the Go monitor's `isMigrationProgressing`)."""
        if self.ended or self.relay is None:
            return
        p = self.relay.progress()
        loop = asyncio.get_running_loop()
        idle = loop.time() - p.last_progress if p.last_progress else None
        if p.complete_forwarded:
            return
        if idle is None or idle >= self.options.progress_timeout:
            log.warning("Aborting migration %s: stuck for %d seconds", self.uid, self.options.progress_timeout)
            if self._metadata().abort_status not in (km.ABORT_IN_PROGRESS, km.ABORT_SUCCEEDED):
                self.abort(km.ABORTED_REASON)
            return
        self._progress_timer = self.parts.runner.later(self.options.progress_timeout - idle, WORK,
                                                       self._check_progress)

    def job_info(self) -> dict[str, Any]:
        """`MigrateDomainJobInfo` from the relay's counters."""
        p = self.relay.progress() if self.relay is not None and not self.ended else None
        if p is None:
            return {"DataTotalSet": False, "DataTotal": 0, "DataProcessedSet": False, "DataProcessed": 0,
                    "MemoryBpsSet": False, "MemoryBps": 0, "DataRemainingSet": False, "DataRemaining": 0,
                    "MemDirtyRateSet": False, "MemDirtyRate": 0}
        total = self.memory_total
        first = p.iterations == 0  # during the first (full) iteration the rest is known
        return {"DataTotalSet": total > 0, "DataTotal": total,
                "DataProcessedSet": True, "DataProcessed": p.memory_bytes,
                "MemoryBpsSet": True, "MemoryBps": int(p.bytes_per_second),
                "DataRemainingSet": first and total > 0,
                "DataRemaining": max(0, total - p.memory_bytes) if first else 0,
                "MemDirtyRateSet": False, "MemDirtyRate": 0}


def _last_failure(path: str) -> str:
    """The last `Migration failed: ...` of the VMM's log, without a trailing backtrace."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - (256 << 10)))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    found = ""
    for match in FAILURE_LINE.finditer(text):
        found = match.group(1).strip()
    return found.split("\n\nStack backtrace:")[0].strip()
