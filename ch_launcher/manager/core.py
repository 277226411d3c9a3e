"""`DomainManager`: the domain manager as the command server sees it (see the package docstring).

A facade over the objects that do the work, each owning its state and given its collaborators
when it is made, bottom-up: the domain record (`record.DomainRecord`: what virt-handler sees), the
VMM host and its sessions (`vmm`), the guest services (`guest`), the reconfiguration of a running
VM (`reconfig`), the VMM's life (`life`), the boot (`boot`), the supervision of the VMM
(`supervision`) and the lifecycle commands (`commands`). Live migration (`migration_source`,
`migration_target`) works with the same objects (`parts.ManagerParts`). Modules needed
only by some VMs or only after the first Sync are imported on first use through `manager.features`.

Every command goes through one wrapper (`_command`): the manager's lock, the RPC's budget, and
the in-band failures for a launcher that is busy or a command that is still running.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ch_launcher import epitaph
from ch_launcher.epitaph import EpitaphFile
from ch_launcher.kubevirt.guest_info import GuestAgentData
from ch_launcher.lifecycle import ALIVE, Intent, VmState
from ch_launcher.manager import features
from ch_launcher.manager.boot import Boot
from ch_launcher.manager.commands import Commands, complete_metadata
from ch_launcher.manager.dirty import DirtyRateMeter
from ch_launcher.manager.guest import GuestServices
from ch_launcher.manager.life import VmmLife
from ch_launcher.manager.parts import ManagerParts
from ch_launcher.manager.planner import Planner
from ch_launcher.manager.reconfig import Reconfiguration
from ch_launcher.manager.record import DomainRecord
from ch_launcher.manager.runner import NotStarted, Runner, StillRunning
from ch_launcher.manager.settings import CommandFailed, EventSink, ManagerSettings, preload
from ch_launcher.manager.supervision import Supervision
from ch_launcher.manager.view import no_guest_agent, vm_size, vm_uuid
from ch_launcher.manager.vmm import VmmHost

if TYPE_CHECKING:
    from ch_launcher.convert import LauncherOptions
    from ch_launcher.kubevirt.vmi import VirtualMachineInstance
    from ch_launcher.manager.agent import GuestAgent

log = logging.getLogger(__name__)
PAUSE_PROBES = "kubevirt.io/pause-guest-agent-probes"  # v1.PauseGuestAgentProbesAnnotation


class DomainManager:
    """Runs one VM. Create, `await start()`, then call `execute()`; `await close()` at the end."""

    def __init__(self, settings: ManagerSettings, sink: EventSink | None = None) -> None:
        self.settings = settings
        self._closed = False
        self._runner = Runner()
        self._record = DomainRecord(sink, EpitaphFile(epitaph.path_in(settings.private_dir)))
        self._guest = GuestServices(settings, self._record, self._runner)
        self._host = VmmHost(settings)
        self._planner = Planner(settings)
        self._reconfig = Reconfiguration(self._record, self._host, self._guest, self._runner, self._planner)
        self._life = VmmLife(settings, self._record, self._host)
        self._boot = Boot(settings, self._record, self._life, self._planner, self._guest, self._reconfig, self._runner)
        self._supervision = Supervision(self._record, self._host, self._life, self._boot, self._guest, self._reconfig,
                                        self._runner)  # the host's listener from now on
        self._commands = Commands(settings, self._record, self._life, self._boot, self._supervision, self._reconfig)
        self._parts = ManagerParts(settings, self._record, self._life, self._runner, self._boot,
                                               self._guest, self._supervision)
        self._dirty = DirtyRateMeter(self._running_vmm_pid)

    # --- queries (no lock, no I/O) -------------------------------------------------------------

    @property
    def domain_json(self) -> str:
        """The api.Domain JSON GetDomain answers; "" when there is no domain."""
        return self._record.domain_json

    @property
    def state(self) -> VmState:
        return self._record.state

    @property
    def booted_once(self) -> asyncio.Event:
        """Set once a VM booted (or arrived by migration): "domain defined"."""
        return self._record.booted_once

    @property
    def forgotten(self) -> asyncio.Event:
        """Set once the final deletion event has been queued."""
        return self._record.forgotten

    @property
    def vmm_version(self) -> str | None:
        """The VMM's version from `vmm.ping` ("53.0.0"), once a VMM has answered."""
        return self._host.version

    @property
    def vmm_pid(self) -> int | None:
        return self._host.current.pid if self._host.current is not None else None

    # --- the guest agent (manager.agent) ---------------------------------------------------------

    def guest_agent_data(self) -> GuestAgentData:
        """What the guest agent last told (empty before it was reached): GetGuestInfo, GetUsers
        and GetFilesystems answer from it, as virt-launcher answers from its agent poller's store."""
        agent = self._guest.agent
        return agent.data if agent is not None else GuestAgentData()

    def _agent(self, domain_name: str) -> GuestAgent:
        agent = self._guest.agent
        if agent is None:
            raise CommandFailed(no_guest_agent(self._record.state, domain_name))
        return agent

    async def guest_ping(self, domain_name: str, timeout: float) -> None:
        """GuestPing (virt-probe's guestAgentPing probes), as virt-launcher's GuestPing
        (pkg/virt-launcher/virtwrap/manager.go@d923fdb815cd): skipped while the VMI's
        `kubevirt.io/pause-guest-agent-probes` annotation is true; an agent that cannot be reached
        during a migration or in a VM paused on purpose is no failure. A failure raises
        CommandFailed and sends the Warning event `GuestAgentPingFailed`."""
        vmi = self._record.vmi
        if vmi is not None and vmi.metadata.annotations.get(PAUSE_PROBES, "").lower() in ("1", "t", "true"):
            return
        try:
            await self._agent(domain_name).ping(domain_name, timeout)
            return
        except (CommandFailed, features.agent.AgentUnavailable) as e:
            failure = str(e)
        if self._life.migration is not None or self._record.state is VmState.PAUSED:
            log.debug("GuestPing failed while the VM is %s: %s", "migrating" if self._life.migration else "paused",
                      failure)
            return
        name = vmi.metadata.name if vmi is not None else self.settings.name
        self._record.k8s_event("Warning", "GuestAgentPingFailed", f"GuestAgentPing probe failed for VMI {name}")
        raise CommandFailed(failure)

    async def guest_exec(self, domain_name: str, command: str, args: list[str],
                         timeout_seconds: int) -> tuple[int, str]:
        """Exec (virt-probe's exec probes): the command's exit code and output. Raises
        CommandFailed when it could not be run or did not end within `timeout_seconds`."""
        try:
            done = await self._agent(domain_name).exec(domain_name, command, args, timeout_seconds)
        except features.agent.AgentUnavailable as e:
            raise CommandFailed(str(e)) from None
        return done.exit_code, done.stdout

    async def freeze(self, vmi: VirtualMachineInstance, unfreeze_timeout: float, *, budget: float) -> str:
        """FreezeVirtualMachine: the guest's filesystems frozen through the agent, thawed again
        after `unfreeze_timeout` seconds unless thawed before. Raises CommandFailed."""
        if self._life.migration is not None:
            raise CommandFailed("failed to freeze VMI, VMI is currently during migration")
        try:
            await asyncio.wait_for(self._agent(vmi.domain_name).freeze(vmi.domain_name, unfreeze_timeout, budget),
                                   budget)
        except features.agent.AgentUnavailable as e:
            raise CommandFailed(str(e)) from None
        except TimeoutError:
            raise CommandFailed(f"the guest agent did not freeze the filesystems within {budget:.0f} s") from None
        return "frozen"

    async def unfreeze(self, vmi: VirtualMachineInstance, *, budget: float) -> str:
        """UnfreezeVirtualMachine: the guest's filesystems thawed through the agent. Raises CommandFailed."""
        try:
            await asyncio.wait_for(self._agent(vmi.domain_name).thaw(vmi.domain_name), budget)
        except features.agent.AgentUnavailable as e:
            raise CommandFailed(str(e)) from None
        except TimeoutError:
            raise CommandFailed(f"the guest agent did not thaw the filesystems within {budget:.0f} s") from None
        return "thawed"

    def migration_job_info(self) -> dict[str, Any] | None:
        """`MigrateDomainJobInfo` of the outgoing migration in progress (None: none; the stats
        then carry zeros, never null)."""
        migration = self._life.migration
        return migration.job_info() if migration is not None else None

    async def domain_stats(self, timeout: float) -> str:
        """stats.DomainStats JSON of the running VM, or "" when there is none (contract §12).
        Counters the VMM cannot give within `timeout` are left out, never an error."""
        session, plan, vmi = self._host.current, self._record.plan, self._record.vmi
        if session is None or plan is None or vmi is None or self._record.state not in ALIVE:
            return ""
        counters = None
        try:
            counters = await asyncio.wait_for(session.call(session.client.counters, timeout=timeout), timeout)
        except (features.api.ChApiError, TimeoutError) as e:
            log.info("vm.counters unavailable for stats: %s", e)
        vcpus, memory = vm_size(plan)
        stats = await asyncio.to_thread(functools.partial(
            features.stats.domain_stats, name=vmi.domain_name, uuid=vm_uuid(plan, vmi), counters=counters,
            vmm_pid=session.pid, disks=tuple(plan.disks), interfaces=tuple(plan.interfaces), vcpus=vcpus,
            memory_bytes=memory, migration=self.migration_job_info()))
        return json.dumps(stats, separators=(",", ":"))

    def _running_vmm_pid(self) -> int | None:
        session = self._host.current
        return session.pid if session is not None and self._record.state in ALIVE else None

    async def dirty_rate(self, timeout: float = 10.0) -> int:
        """The guest's dirty-page rate in MiB/s, measured over one second and kept for three
        (`manager.dirty`); during a soft reboot, of the fresh VM once it runs (waiting up to
        `timeout`). Raises CommandFailed when there is no running VM or its memory cannot be read."""
        await self.wait_until(lambda: not self._supervision.between_boots(), timeout)
        return await self._dirty.measure()

    async def wait_until(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
        """Wait (without polling) until `predicate()` holds after some change; False on timeout."""
        return await self._record.wait_until(predicate, timeout)

    async def flush_events(self, timeout: float) -> bool:
        """Wait until every queued event went to virt-handler (or `timeout`); True if so."""
        return await self._record.flush(timeout)

    # --- life of the manager -------------------------------------------------------------------

    async def start(self) -> None:
        """Start, in the background, the VMM (so the first Sync finds it up). A VMM that cannot
        start is logged here and reported by the first Sync."""

        async def warm_up() -> None:
            await asyncio.to_thread(preload)
            await self._boot.ensure_vmm_quietly()

        self._runner.background("start", warm_up)

    async def close(self) -> None:
        """Stop the VMM (if any), the console, DHCP and the pump; release everything. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._life.close()
        if self._life.migration is not None:
            await self._life.migration.close()
        self._runner.cancel()
        await self._host.close()
        await self._boot.stop_swtpm()
        await self._guest.stop()
        self._planner.close()

    # --- commands ------------------------------------------------------------------------------

    async def execute(self, intent: Intent, vmi: VirtualMachineInstance | None,
                      options: LauncherOptions | None = None, *, budget: float = 18.0) -> str:
        """Run `intent` and return a short description of what was done.

        Raises CommandFailed with the in-band message. Never takes longer than `budget` seconds:
        a command still waiting for the lock then is withdrawn (CommandFailed "busy"); one
        already running keeps running in the background, and a Sync then answers success (the
        boot goes on; its outcome arrives as Domain events, a failure also with the next Sync).
        """
        return await self._command(intent.value, lambda: self._commands.run(intent, vmi, options), budget,
                                   on_late_end=functools.partial(self._commands.ended_late, intent),
                                   still_running="still starting the VM in the background"
                                   if intent is Intent.SYNC else None)

    async def mark_for_graceful_shutdown(self) -> None:
        """SIGTERM: set GracePeriod.MarkedForGracefulShutdown (a MODIFIED event follows)."""
        self._record.mark_for_graceful_shutdown()

    async def resize(self, what: str, vmi: VirtualMachineInstance, options: LauncherOptions | None = None, *,
                     budget: float = 18.0) -> str:
        """SyncVirtualMachineCPUs (`what` = "vcpus") or SyncVirtualMachineMemory ("memory"):
        resize the running VM to what `vmi` asks (`manager.resize`). Raises CommandFailed."""
        name = "SyncVirtualMachineCPUs" if what == "vcpus" else "SyncVirtualMachineMemory"
        return await self._command(
            name, lambda: self._reconfig.resize(what, complete_metadata(vmi, self.settings), options), budget)

    async def migrate(self, vmi: VirtualMachineInstance, options: bytes, *, budget: float = 18.0) -> str:
        """MigrateVirtualMachine: start sending this VM (`migration_source.migrate`)."""
        source = features.migration_source
        return await self._command("MigrateVirtualMachine", lambda: source.migrate(
            self._parts, complete_metadata(vmi, self.settings), options), budget)

    async def cancel_migration(self, vmi: VirtualMachineInstance, *, budget: float = 18.0) -> str:
        """CancelVirtualMachineMigration: abort an outgoing migration that can still be aborted."""
        source = features.migration_source
        return await self._command("CancelVirtualMachineMigration",
                                   lambda: source.cancel(self._parts, vmi), budget)

    async def prepare_migration_target(self, vmi: VirtualMachineInstance, options: LauncherOptions | None, *,
                                       budget: float = 18.0) -> str:
        """SyncMigrationTarget: prepare this pod and wait for the incoming migration."""
        target = features.migration_target
        return await self._command("SyncMigrationTarget", lambda: target.prepare(
            self._parts, complete_metadata(vmi, self.settings), options), budget)

    async def finalize_migration(self, vmi: VirtualMachineInstance, interface_migration: dict[str, str], *,
                                 budget: float = 18.0) -> str:
        """FinalizeVirtualMachineMigration: the target's part after the migration completed."""
        target = features.migration_target
        return await self._command("FinalizeVirtualMachineMigration",
                                   lambda: target.finalize(self._parts, vmi, interface_migration), budget)

    async def _command(self, name: str, work: Callable[[], Awaitable[str]], budget: float, *,
                       on_late_end: Callable[[BaseException | None], None] | None = None,
                       still_running: str | None = None) -> str:
        """`work` under the manager's lock within `budget` (`Runner.run`). Raises CommandFailed
        when the lock stayed taken (nothing was done) or when the work is still running at the
        end of the budget, unless `still_running` is the answer for that (the work goes on; its
        end goes to `on_late_end`, by default logged if it failed)."""
        def logged(error: BaseException | None) -> None:
            if error is not None:
                log.error("%s failed in the background: %s", name, error)

        try:
            return await self._runner.run(name, work, budget, on_late_end or logged)
        except NotStarted as busy:
            raise CommandFailed(f"the launcher is busy with {busy}; {name} was not started, try again") from None
        except StillRunning:
            if still_running is not None:
                return still_running
            raise CommandFailed(f"{name} is still in progress after {budget:.0f} s") from None
