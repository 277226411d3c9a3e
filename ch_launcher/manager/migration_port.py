"""What a live migration and the domain manager see of each other (docs/migration.md §3).

`Migration` is what the manager needs of an outgoing (`migration_source.Outgoing`) or incoming
(`migration_target.Incoming`) migration: the VMM's events and exit first, its job info, closing.
`MigrationHost` is what they need of the manager: the domain record (the only writer of what
virt-handler sees), the current VMM session, the lock's background tasks, and the few steps of
a boot a migration target repeats. `DomainManager` hands them one; they see nothing else of it.

Types only: nothing imports this module at run time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ch_launcher.ch.events import Event
    from ch_launcher.convert import LauncherOptions
    from ch_launcher.kubevirt.vmi import VirtualMachineInstance
    from ch_launcher.manager.record import DomainRecord
    from ch_launcher.manager.runner import Runner
    from ch_launcher.manager.settings import ManagerSettings
    from ch_launcher.manager.vmm import VmmSession


class Migration(Protocol):
    """A migration of this VM, from the moment it begins (`MigrationHost.begin`)."""

    uid: str
    ended: bool

    def on_event(self, event: Event) -> bool:
        """A VMM event, before the manager sees it; True when the migration consumed it."""

    def on_vmm_exit(self, code: int | None) -> None:
        """The VMM exited (`code`: its status), before the manager handles the exit."""

    def job_info(self) -> dict[str, Any] | None:
        """`MigrateDomainJobInfo` while sending; None when there is no job to report."""

    async def close(self) -> None:
        """The manager is closing: end what the migration still runs."""


class MigrationHost(Protocol):
    """The domain manager as a migration sees it."""

    @property
    def settings(self) -> ManagerSettings: ...

    @property
    def record(self) -> DomainRecord: ...

    @property
    def runner(self) -> Runner:
        """For background tasks (owned by the manager: cancelled when it closes) and the lock."""

    @property
    def session(self) -> VmmSession | None:
        """The current VMM (None: none runs)."""

    @property
    def vmm_version(self) -> str | None: ...

    @property
    def migration(self) -> Migration | None:
        """The migration that began last (it may have ended)."""

    def begin(self, migration: Migration) -> None:
        """`migration` is this VM's migration from now on: it hears the VMM first."""

    async def plan(self, vmi: VirtualMachineInstance, options: LauncherOptions | None) -> None:
        """Take `vmi` as the domain's and translate it as a boot does (the plan, its devices).
        Raises CommandFailed."""

    async def prepare_files(self) -> None:
        """The plan's files, as a boot prepares them. Raises CommandFailed."""

    async def ensure_vmm(self) -> VmmSession:
        """A running, answering VMM. Raises CommandFailed."""

    async def stop_vmm(self) -> None:
        """Stop the current VMM; its exit is handled as any."""

    async def start_guest_services(self) -> None:
        """The console and DHCP of the plan, as a boot starts them. Raises CommandFailed."""

    def attach_console(self) -> None:
        """Connect the console to the VMM (in the background)."""

    async def forget(self) -> None:
        """The VM is gone from this pod: withdraw the domain (final deletion event)."""
