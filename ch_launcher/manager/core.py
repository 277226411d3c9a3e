"""`DomainManager`: its state, the commands, the Domain (see the package docstring).

The class is assembled from parts kept apart by concern, each mixed in: what the steps do to the
VMM (`manager.steps`), what the manager hears from it (`manager.observe`), changes to a running
VM (`manager.live`) and live migration (`manager.migrating`). Modules needed only by some VMs or
only after the first Sync are imported on first use through `manager.features`."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from ch_launcher import lifecycle
from ch_launcher.kubevirt.domain import (
    GracePeriod, GuestPanicInfo, LifeCycle, Reason, deleted_domain_view, domain_json, now_rfc3339,
)
from ch_launcher.lifecycle import ALIVE, Intent, Step, VmState
from ch_launcher.manager import features
from ch_launcher.manager.dirty import DirtyRateMeter
from ch_launcher.manager.guest import GuestServices
from ch_launcher.manager.live import LiveChanges, device_facts
from ch_launcher.manager.migrating import Migrating
from ch_launcher.manager.observe import VmmObservations
from ch_launcher.manager.outbox import Outbox
from ch_launcher.manager.runner import NotStarted, Runner, StillRunning
from ch_launcher.manager.settings import CommandFailed, EventSink, ManagerSettings, preload
from ch_launcher.manager.steps import VmSteps
from ch_launcher.manager.view import acpi_enabled, domain_view, no_guest_agent, vm_size, vm_uuid
from ch_launcher.manager.vmm import VmmHost

if TYPE_CHECKING:
    from ch_launcher.convert import LauncherOptions, Plan
    from ch_launcher.kubevirt.vmi import VirtualMachineInstance

log = logging.getLogger(__name__)
T = TypeVar("T")

STARTED_PHASES = ("Running", "Succeeded", "Failed")  # vmi.IsRunning() || vmi.IsFinal()


@dataclass
class _Vm:
    """The mutable facts behind the Domain."""

    state: VmState = VmState.UNDEFINED
    user_paused: bool = False
    down: Reason | None = None
    soft_reboot: bool = False           # the next guest poweroff boots the VM again
    rebooting: bool = False             # the guest shut down for a soft reboot; a fresh VM is on its way
    killing: bool = False               # the launcher is stopping the current VMM
    saw_shutdown: bool = False          # the current VMM announced vm:shutdown
    failure: str | None = None          # the current VMM stopped the VM on an internal failure (its log)
    crash_destroy: bool = False         # the launcher is stopping the VMM because the guest panicked
    panic_count: int = 0                # Status.PanicCount, kept for the launcher's life
    panic_info: GuestPanicInfo | None = None
    grace: GracePeriod = field(default_factory=GracePeriod)  # replaced, never mutated
    removing: set[str] = field(default_factory=set)  # disks detached, not yet ejected by the guest
    migration: Any = None               # kubevirt.migration.MigrationMetadata: the Domain's Migration
    migration_paused: bool = False      # paused by Cloud Hypervisor for a migration (Paused/Migration)


class DomainManager(VmSteps, VmmObservations, LiveChanges, Migrating):
    """Runs one VM. Create, `await start()`, then call `execute()`; `await close()` at the end."""

    def __init__(self, settings: ManagerSettings, sink: EventSink | None = None) -> None:
        self.settings = settings
        self._runner = Runner()
        self._ch = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ch-api")
        self._work = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="prepare")
        self._vm = _Vm()
        self._vmi: VirtualMachineInstance | None = None
        self._plan: Plan | None = None
        self._planned_vmi: VirtualMachineInstance | None = None  # the VMI the plan was made from
        self._options: LauncherOptions | None = None
        self._devices_seen: Any = None      # the VMI device facts the live devices were last synced to
        self._current_memory: int | None = None  # memory_actual_size after a memory resize
        self._swtpm: Any = None             # manager.tpm.Swtpm of a VM with a TPM
        self._host = VmmHost(settings, self._api, self._on_event, self._on_vmm_exit)
        self._guest = GuestServices(settings)
        self._dirty = DirtyRateMeter(self._running_vmm_pid)
        self._domain_json = ""
        self._announced = False             # an ADDED was sent for the current domain
        self._start_error: str | None = None  # a background start that failed, for the next Sync
        self._model_problem: str | None = None  # why virt-handler would not find the VMM (procmodel)
        self._outbox = Outbox(sink)
        self._changed = asyncio.Event()
        self.booted_once = asyncio.Event()   # a VM booted at least once ("domain defined")
        self.forgotten = asyncio.Event()     # the final deletion event has been queued
        self._closed = False
        # Events the answer to our own call has told of already: the VMM writes its events from a
        # thread of its own, so vm:paused may arrive after a later vm.resume has returned, and
        # must not take the state back (seen on the real v53.0; FAKE_CH_EVENT_DELAY).
        self._told: collections.Counter[str] = collections.Counter()
        self._seen: collections.Counter[str] = collections.Counter()  # events heard from the current VMM

    # --- queries (no lock, no I/O) -------------------------------------------------------------

    @property
    def domain_json(self) -> str:
        """The api.Domain JSON GetDomain answers; "" when there is no domain."""
        return self._domain_json

    @property
    def state(self) -> VmState:
        return self._vm.state

    @property
    def vmm_version(self) -> str | None:
        """The VMM's version from `vmm.ping` ("53.0.0"), once a VMM has answered."""
        return self._host.version

    @property
    def vmm_pid(self) -> int | None:
        return self._host.current.pid if self._host.current is not None else None

    def owned_pids(self) -> set[int]:
        """Children whose exit status the VMM supervisor collects itself (not to be reaped by others)."""
        pids = self._host.owned_pids()
        if self._swtpm is not None and self._swtpm.pid is not None:
            pids.add(self._swtpm.pid)
        return pids

    def guest_agent_unavailable(self, vmi: VirtualMachineInstance) -> str:
        """The in-band error of a guest-agent command (Freeze, Unfreeze) for `vmi`'s domain:
        there is never a connected agent (`view.no_guest_agent`)."""
        return no_guest_agent(self._vm.state, vmi.domain_name)

    async def domain_stats(self, timeout: float) -> str:
        """stats.DomainStats JSON of the running VM, or "" when there is none (contract §12).
        Counters the VMM cannot give within `timeout` are left out, never an error."""
        vmm, plan, vmi = self._host.current, self._plan, self._vmi
        if vmm is None or plan is None or vmi is None or self._vm.state not in ALIVE:
            return ""
        counters = None
        try:
            counters = await asyncio.wait_for(self._api(vmm.client.counters, timeout=timeout), timeout)
        except (features.api.ChApiError, TimeoutError) as e:
            log.info("vm.counters unavailable for stats: %s", e)
        vcpus, memory = vm_size(plan)
        stats = await asyncio.to_thread(functools.partial(
            features.stats.domain_stats, name=vmi.domain_name, uuid=vm_uuid(plan, vmi), counters=counters,
            vmm_pid=vmm.pid, disks=tuple(plan.disks), interfaces=tuple(plan.interfaces), vcpus=vcpus,
            memory_bytes=memory, migration=self.migration_job_info()))
        return json.dumps(stats, separators=(",", ":"))

    def _running_vmm_pid(self) -> int | None:
        vmm = self._host.current
        if vmm is None or self._vm.state not in ALIVE:
            return None
        return vmm.pid

    def _between_boots(self) -> bool:
        """A soft reboot is replacing the VMM: the domain stays Running (as libvirt's fake reboot
        keeps QEMU), but there is no guest RAM to look at until the fresh VM has booted."""
        vm = self._vm
        return vm.rebooting and not vm.killing and vm.state in (VmState.RUNNING, VmState.PAUSED)

    async def dirty_rate(self, timeout: float = 10.0) -> int:
        """The guest's dirty-page rate in MiB/s, measured over one second and kept for three
        (`manager.dirty`); during a soft reboot, of the fresh VM once it runs (waiting up to
        `timeout`). Raises CommandFailed when there is no running VM or its memory cannot be read."""
        await self.wait_until(lambda: not self._between_boots(), timeout)
        return await self._dirty.measure()

    async def wait_until(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
        """Wait (without polling) until `predicate()` holds after some change; False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not predicate():
            event = self._changed
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return False
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except TimeoutError:
                return predicate()
        return True

    # --- life of the manager -------------------------------------------------------------------

    async def start(self) -> None:
        """Start the event pump and, in the background, the VMM (so the first Sync finds it up).
        A VMM that cannot start is logged here and reported by the first Sync."""
        self._outbox.start()

        async def warm_up() -> None:
            await asyncio.to_thread(preload)
            await self._ensure_vmm_quietly()

        self._runner.background(self._runner.locked("start", warm_up))

    async def close(self) -> None:
        """Stop the VMM (if any), the console, DHCP and the pump; release everything. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self.close_migration()
        self._runner.cancel()
        self._vm.killing = True
        await self._host.close()
        await self._stop_swtpm()
        await self._guest.stop()
        await self._outbox.close()
        self._ch.shutdown(wait=False, cancel_futures=True)
        self._work.shutdown(wait=False, cancel_futures=True)

    # --- commands ------------------------------------------------------------------------------

    async def execute(self, intent: Intent, vmi: VirtualMachineInstance | None,
                      options: LauncherOptions | None = None, *, budget: float = 18.0) -> str:
        """Run `intent` and return a short description of what was done.

        Raises CommandFailed with the in-band message. Never takes longer than `budget` seconds:
        a command still waiting for the lock then is withdrawn (CommandFailed "busy"); one
        already running keeps running in the background, and a Sync then answers success (the
        boot goes on; its outcome arrives as Domain events, a failure also with the next Sync).
        """
        try:
            return await self._runner.run(intent.value, lambda: self._run(intent, vmi, options), budget,
                                          functools.partial(self._ended_late, intent))
        except NotStarted as busy:
            raise CommandFailed(f"the launcher is busy with {busy}; {intent.value} was not started, "
                                "try again") from None
        except StillRunning:
            if intent is Intent.SYNC:
                return "still starting the VM in the background"
            raise CommandFailed(f"{intent.value} is still in progress after {budget:.0f} s") from None

    def _ended_late(self, intent: Intent, error: BaseException | None) -> None:
        """A command that outlived its RPC has ended: remember a Sync's failure for the next Sync."""
        if isinstance(error, CommandFailed) and intent is Intent.SYNC:
            self._start_error = str(error)
            log.error("starting the VM failed in the background: %s", error)
        elif error is not None:
            log.error("%s failed in the background: %s", intent.value, error)
        self._bump()

    async def _run(self, intent: Intent, vmi: VirtualMachineInstance | None,
                   options: LauncherOptions | None) -> str:
        if vmi is not None and intent is Intent.SYNC:
            vmi = self._complete_metadata(vmi)
        if intent is Intent.SYNC and self._start_error is not None:
            error, self._start_error = self._start_error, None
            raise CommandFailed(error)  # reported once; the next Sync tries again
        if intent is Intent.SYNC:
            self._believe(await self._reread())  # a lost event must not outlive one reconcile
        started = vmi is not None and vmi.status.phase in STARTED_PHASES
        # A VM paused for a migration's switch-over is not the Sync's to resume.
        outcome = lifecycle.decide(intent, self._vm.state,
                                   user_paused=self._vm.user_paused or self._vm.migration_paused,
                                   vmi_started=started, acpi=acpi_enabled(vmi or self._vmi))
        if outcome.error:
            raise CommandFailed(outcome.error)
        for step in outcome.steps:
            await self._step(step, vmi, options)
        return ", ".join(s.value for s in outcome.steps) or "nothing to do"

    async def mark_for_graceful_shutdown(self) -> None:
        """SIGTERM: set GracePeriod.MarkedForGracefulShutdown (a MODIFIED event follows)."""
        self._vm.grace = replace(self._vm.grace, marked_for_graceful_shutdown=True)
        self._publish()

    # --- steps ---------------------------------------------------------------------------------

    async def _step(self, step: Step, vmi: VirtualMachineInstance | None, options: LauncherOptions | None) -> None:
        vm = self._vm
        log.debug("step %s in state %s", step.value, vm.state.value)
        if step is Step.REFRESH_GRACE:
            assert vmi is not None
            self._vmi = vmi
            vm.grace = replace(vm.grace, deletion_grace_period_seconds=vmi.grace_period_seconds)
            self._publish()
            if self._planned_vmi is not None and vm.state in (VmState.RUNNING, VmState.PAUSED):
                await self._sync_devices(vmi, options)
                if self._current_memory is not None and self._host.current is not None:
                    await self._refresh_memory(self._host.current)
        elif step is Step.TRANSLATE:
            assert vmi is not None
            self._options = options or features.convert.LauncherOptions()
            self._plan = await self._translate(vmi, self._options)
            self._planned_vmi = vmi
            self._devices_seen = device_facts(vmi)  # what the VM boots with: no device work yet
        elif step is Step.PREPARE:
            await self._prepare()
        elif step is Step.SPAWN:
            await self._ensure_vmm()
            await self._fit_vmm()
        elif step is Step.CREATE:
            await self._create()
        elif step is Step.BOOT:
            await self._boot()
        elif step is Step.REMEMBER_USER_PAUSE:
            vm.user_paused = True
        elif step is Step.FORGET_USER_PAUSE:
            vm.user_paused = False
        elif step is Step.PAUSE:
            await self._vm_call("pause", lambda c: c.pause(), VmState.PAUSED, undo=lambda: setattr(vm, "user_paused", False))
        elif step is Step.RESUME:
            await self._vm_call("resume", lambda c: c.resume(), VmState.RUNNING)
        elif step is Step.ARM_SOFT_REBOOT:
            vm.soft_reboot = True
        elif step is Step.DISARM_SOFT_REBOOT:
            vm.soft_reboot = False
        elif step is Step.POWER_BUTTON:
            await self._vm_call("power-button", lambda c: c.power_button(), None,
                                undo=lambda: setattr(vm, "soft_reboot", False))
        elif step is Step.STAMP_DELETION:
            if vm.grace.deletion_timestamp is None:
                vm.grace = replace(vm.grace, deletion_timestamp=now_rfc3339())
                self._publish()
        elif step is Step.REBOOT:
            await self._vm_call("reboot", lambda c: c.reboot(), VmState.RUNNING)
        elif step is Step.STOP_VMM:
            await self._stop_vmm()
        elif step is Step.FORGET_DOMAIN:
            await self._forget()

    # --- the Domain ----------------------------------------------------------------------------

    def _set_state(self, state: VmState, *, force: bool = False) -> None:
        self._vm.state = state
        self._publish(force=force)

    def _publish(self, *, force: bool = False) -> None:
        """Rebuild the Domain JSON; send it when it changed (or `force`: a VMM event)."""
        vm, vmi = self._vm, self._vmi
        status = lifecycle.domain_status(vm.state, user_paused=vm.user_paused, down=vm.down)
        if status == (LifeCycle.PAUSED, Reason.UNKNOWN) and vm.migration_paused:
            status = (LifeCycle.PAUSED, Reason.MIGRATION)
        text = "" if status is None or vmi is None or self._plan is None else domain_json(
            domain_view(vmi, self._plan, *status, grace=vm.grace, panic_count=vm.panic_count,
                        current_memory=self._current_memory, migration=vm.migration, panic_info=vm.panic_info))
        changed = text != self._domain_json
        self._domain_json = text
        if text and (changed or force):
            kind = "MODIFIED" if self._announced else "ADDED"
            self._announced = True
            self._outbox.put_domain(text, kind)
            log.info("domain %s: %s/%s", kind, status[0].value, status[1].value)  # type: ignore[index]
        self._bump()

    def _k8s_event(self, type_: str, reason: str, message: str) -> None:
        vmi = self._vmi
        if vmi is not None:
            self._outbox.put_k8s_event(type=type_, reason=reason, message=message, namespace=vmi.metadata.namespace,
                                       name=vmi.metadata.name, uid=vmi.metadata.uid)

    async def flush_events(self, timeout: float) -> bool:
        """Wait until every queued event went to virt-handler (or `timeout`); True if so."""
        return await self._outbox.flush(timeout)

    def _bump(self) -> None:
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    async def _forget(self) -> None:
        vmi = self._vmi
        await self._guest.stop()
        await self._stop_swtpm()
        self._vm = _Vm(grace=self._vm.grace, panic_count=self._vm.panic_count, panic_info=self._vm.panic_info,
                       migration=self._vm.migration)
        self._domain_json = ""
        self._announced = False
        if vmi is not None:
            view = deleted_domain_view(vmi.metadata.name, vmi.metadata.namespace, vmi.metadata.uid,
                                       now_rfc3339(), panic_count=self._vm.panic_count,
                                       panic_info=self._vm.panic_info)
            self._outbox.put_domain(domain_json(view), "MODIFIED")
        self.forgotten.set()
        self._bump()

    # --- helpers -------------------------------------------------------------------------------

    async def _api(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking VMM call in the one REST worker thread."""
        return await asyncio.get_running_loop().run_in_executor(self._ch, functools.partial(fn, *args, **kwargs))

    async def _in_worker(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._work, functools.partial(fn, *args))

    def _complete_metadata(self, vmi: VirtualMachineInstance) -> VirtualMachineInstance:
        """Fill a VMI's missing name/namespace/uid from the launcher's flags; the Domain needs them."""
        meta = vmi.metadata
        s = self.settings
        if meta.uid and meta.name and meta.namespace:
            return vmi
        meta = meta.model_copy(update={"name": meta.name or s.name, "namespace": meta.namespace or s.namespace,
                                       "uid": meta.uid or s.uid})
        if not (meta.uid and meta.name and meta.namespace):
            raise CommandFailed("the VMI has no metadata.name, metadata.namespace or metadata.uid, and the "
                                "launcher's --name/--namespace/--uid do not say either")
        return vmi.model_copy(update={"metadata": meta})
