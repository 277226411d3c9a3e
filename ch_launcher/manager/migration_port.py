"""What a live migration works with (docs/migration.md §3); what the manager needs of a migration
is `life.Migration`.

`MigrationParts` are the manager's own objects a migration works with: the domain record (the
only writer of what virt-handler sees), the VMM's life (the current VMM, starting and stopping
one, the migration in progress), the runner (the lock, and the background work and timers it
owns), the boot (the few steps of a boot a migration target repeats), the guest services, and
the supervision (forgetting the VM). `DomainManager` makes them once and hands them to the
migration RPCs.

Types only at run time: the modules of live migration are imported on first use (`features`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ch_launcher.manager.boot import Boot
    from ch_launcher.manager.guest import GuestServices
    from ch_launcher.manager.life import VmmLife
    from ch_launcher.manager.record import DomainRecord
    from ch_launcher.manager.runner import Runner
    from ch_launcher.manager.settings import ManagerSettings
    from ch_launcher.manager.supervision import Supervision


@dataclass(frozen=True)
class MigrationParts:
    """The domain manager's objects, as a live migration uses them (see the module docstring)."""

    settings: ManagerSettings
    record: DomainRecord
    life: VmmLife
    runner: Runner
    boot: Boot
    guest: GuestServices
    supervision: Supervision
