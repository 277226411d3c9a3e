"""The domain manager: one VM on one Cloud Hypervisor process, driven by virt-handler's commands.

`DomainManager.execute(intent, vmi, ...)` looks up the steps of `lifecycle.decide()` and runs
them under one asyncio lock (`runner.Runner`, which also keeps each command within its budget),
so commands never interleave. Blocking REST calls run in one worker
thread (CH serves one request at a time anyway); translation and preparation run in another.

`DomainManager` (`core`) is a facade over objects that each own their state (docs/architecture.md
draws them): the domain record (`record`), one session per VMM process (`vmm`), the VMM's life
(`life`), the plan (`planner`), the boot (`boot`), the supervision of the VMM (`supervision`), the
reconfiguration of a running VM (`reconfig`), the guest services (`guest`), the lifecycle commands
(`commands`); live migration (`migration_source`, `migration_target`) works with the same objects
(`parts.ManagerParts`). Work the manager starts by itself goes through the runner's
lock like the commands (`Runner.background`).

What the manager observes becomes the Domain that virt-handler sees:
- CH's event stream (a FIFO read with `add_reader`) and the VMM's exit (its pidfd, also with
  `add_reader`) move the `VmState` (`lifecycle.state_after_event`, `lifecycle.down_reason`);
- every change rebuilds the Domain JSON once; `domain_json` is what GetDomain answers (no lock,
  no I/O), and each change is sent through the `EventSink` (virt-handler's Notify) in order:
  ADDED for a freshly booted domain, MODIFIED afterwards, and a final MODIFIED with
  `ObjectMeta.deletionTimestamp` when the VM is forgotten (contract §2.5, §10.4).

Nothing here polls: while nothing happens the manager waits on file descriptors and events.

Failure behaviour: a command that cannot do what it was asked raises `CommandFailed` with the
text virt-handler shows (in-band `success=false`); anything else escaping is a bug. A VMM that
dies under a live VM becomes Shutoff/Crashed (plus a K8s Warning event) and the manager keeps
serving; the next Sync of a VMI that is not yet Running starts a new VMM.
"""

from ch_launcher.manager.core import DomainManager
from ch_launcher.manager.pod import read_pod_facts, release_memory
from ch_launcher.manager.settings import HEAVY_MODULES, CommandFailed, EventSink, ManagerSettings, preload

__all__ = ["HEAVY_MODULES", "CommandFailed", "DomainManager", "EventSink", "ManagerSettings", "preload",
           "read_pod_facts", "release_memory"]
