"""Live migration's entry points on the domain manager (docs/migration.md §3): a part of
`DomainManager`, kept apart and small because most launchers never migrate. The work is done by
`manager.migration_source` (an outgoing migration) and `manager.migration_target` (an incoming
one), imported here on first use only, so a launcher that never migrates never loads them (nor
the relay, `ch_launcher.migration`).

Every entry point runs under the manager's lock like any command and raises CommandFailed with
the in-band message. While a migration object exists, the manager hands it the VMM's events and
its exit first (`_migration_event`, `_migration_vmm_exit`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ch_launcher.manager import features
from ch_launcher.manager.runner import NotStarted, StillRunning
from ch_launcher.manager.settings import CommandFailed

if TYPE_CHECKING:
    from ch_launcher.ch.events import Event
    from ch_launcher.convert import LauncherOptions
    from ch_launcher.kubevirt.vmi import VirtualMachineInstance

log = logging.getLogger(__name__)


class Migrating:
    """Mixed into DomainManager (which provides `_runner`, `_vm`, `_complete_metadata`, ...)."""

    _runner: Any
    _migration: Any = None  # migration_source.Outgoing or migration_target.Incoming, once one began

    async def _migration_command(self, name: str, work: Any, budget: float) -> str:
        try:
            return await self._runner.run(name, work, budget,
                                          lambda e: log.error("%s failed in the background: %s", name, e)
                                          if e is not None else None)
        except NotStarted as busy:
            raise CommandFailed(f"the launcher is busy with {busy}; {name} was not started, try again") from None
        except StillRunning:
            raise CommandFailed(f"{name} is still in progress after {budget:.0f} s") from None

    async def migrate(self, vmi: VirtualMachineInstance, options: bytes, *, budget: float = 18.0) -> str:
        """MigrateVirtualMachine: start sending this VM (`migration_source.migrate`)."""
        migration_source = features.migration_source
        return await self._migration_command(
            "MigrateVirtualMachine",
            lambda: migration_source.migrate(self, self._complete_metadata(vmi), options), budget)

    async def cancel_migration(self, vmi: VirtualMachineInstance, *, budget: float = 18.0) -> str:
        """CancelVirtualMachineMigration: abort an outgoing migration that can still be aborted."""
        migration_source = features.migration_source
        return await self._migration_command("CancelVirtualMachineMigration",
                                             lambda: migration_source.cancel(self, vmi), budget)

    async def prepare_migration_target(self, vmi: VirtualMachineInstance, options: LauncherOptions | None, *,
                                       budget: float = 18.0) -> str:
        """SyncMigrationTarget: prepare this pod and wait for the incoming migration."""
        migration_target = features.migration_target
        return await self._migration_command(
            "SyncMigrationTarget",
            lambda: migration_target.prepare(self, self._complete_metadata(vmi), options), budget)

    async def finalize_migration(self, vmi: VirtualMachineInstance, interface_migration: dict[str, str], *,
                                 budget: float = 18.0) -> str:
        """FinalizeVirtualMachineMigration: the target's part after the migration completed."""
        migration_target = features.migration_target
        return await self._migration_command(
            "FinalizeVirtualMachineMigration",
            lambda: migration_target.finalize(self, vmi, interface_migration), budget)

    def migration_job_info(self) -> dict[str, Any] | None:
        """`MigrateDomainJobInfo` of the outgoing migration in progress (None: none; the stats
        then carry zeros, never null)."""
        migration = self._migration
        return migration.job_info() if migration is not None else None

    def _migration_event(self, event: Event) -> bool:
        """A VMM event for the migration first; True when it was consumed."""
        migration = self._migration
        return migration is not None and migration.on_event(event)

    def _migration_vmm_exit(self, code: int | None) -> None:
        migration = self._migration
        if migration is not None:
            migration.on_vmm_exit(code)

    async def close_migration(self) -> None:
        migration = self._migration
        if migration is not None:
            await migration.close()
