"""What a feature module of the manager works with: `ManagerParts`, the manager's own objects.

A feature module is one imported on first use (`features`) that serves RPCs of its own through
the facade, such as live migration (`migration_source`, `migration_target`; docs/migration.md §3;
what the manager needs of a migration is `life.Migration`). It gets the domain record (the only
writer of what virt-handler sees), the VMM's life (the current VMM, starting and stopping one, the
migration in progress), the runner (the lock, and the background work and timers it owns), the
boot (the steps of a boot a migration target repeats), the guest services, and the supervision
(forgetting the VM). `DomainManager` makes them once and hands them to those RPCs; the feature
works with the objects themselves (no forwarding layer), under the same rules as they do.

Types only at run time: nothing here is imported by the objects it names.
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
class ManagerParts:
    """The domain manager's objects, as a feature module uses them (see the module docstring)."""

    settings: ManagerSettings
    record: DomainRecord
    life: VmmLife
    runner: Runner
    boot: Boot
    guest: GuestServices
    supervision: Supervision
