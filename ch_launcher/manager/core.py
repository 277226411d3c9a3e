"""`DomainManager`: the commands, the steps, and the observations (see the package docstring)."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from ch_launcher import lifecycle
from ch_launcher.ch import versions
from ch_launcher.ch.events import Event
from ch_launcher.kubevirt.domain import (
    GracePeriod, GuestPanicInfo, LifeCycle, Reason, deleted_domain_view, domain_json, now_rfc3339,
)
from ch_launcher.kubevirt.log import log_subcomponent_line
from ch_launcher.lifecycle import Intent, Step, VmState
from ch_launcher.manager.dirty import DirtyRateMeter
from ch_launcher.manager.guest import GuestServices
from ch_launcher.manager.live import LiveChanges, device_facts
from ch_launcher.manager.migrating import Migrating
from ch_launcher.manager.outbox import Outbox
from ch_launcher.manager.pod import read_pod_facts, release_memory
from ch_launcher.manager.runner import NotStarted, Runner, StillRunning
from ch_launcher.manager.settings import CommandFailed, EventSink, ManagerSettings, preload
from ch_launcher.manager.view import (
    acpi_enabled, cause, describe_exit, domain_view, no_guest_agent, vm_size, vm_uuid,
)
from ch_launcher.manager.vmm import VmmHost

if TYPE_CHECKING:
    from ch_launcher.ch.process import VmmProcess
    from ch_launcher.convert import LauncherOptions, Plan
    from ch_launcher.kubevirt.vmi import VirtualMachineInstance

log = logging.getLogger(__name__)
T = TypeVar("T")

STARTED_PHASES = ("Running", "Succeeded", "Failed")  # vmi.IsRunning() || vmi.IsFinal()
_ALIVE = (VmState.RUNNING, VmState.PAUSED, VmState.PANICKED)  # a VMM runs the VM
_EVENT_OF_CALL = {"pause": "vm:paused", "resume": "vm:resumed"}  # the state-changing event of a call
RELEASE_WAIT = 5.0  # seconds a boot's release_memory() waits for its Domain event to reach virt-handler


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


class DomainManager(LiveChanges, Migrating):
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
        from ch_launcher.ch.api import ChApiError
        from ch_launcher.stats import domain_stats

        vmm, plan, vmi = self._host.current, self._plan, self._vmi
        if vmm is None or plan is None or vmi is None or self._vm.state not in (
                VmState.RUNNING, VmState.PAUSED, VmState.PANICKED):
            return ""
        counters = None
        try:
            counters = await asyncio.wait_for(self._api(vmm.client.counters, timeout=timeout), timeout)
        except (ChApiError, TimeoutError) as e:
            log.info("vm.counters unavailable for stats: %s", e)
        vcpus, memory = vm_size(plan)
        stats = await asyncio.to_thread(functools.partial(
            domain_stats, name=vmi.domain_name, uuid=vm_uuid(plan, vmi), counters=counters, vmm_pid=vmm.pid,
            disks=tuple(plan.disks), interfaces=tuple(plan.interfaces), vcpus=vcpus, memory_bytes=memory,
            migration=self.migration_job_info()))
        return json.dumps(stats, separators=(",", ":"))

    def _running_vmm_pid(self) -> int | None:
        vmm = self._host.current
        if vmm is None or self._vm.state not in (VmState.RUNNING, VmState.PAUSED, VmState.PANICKED):
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
            from ch_launcher.convert import LauncherOptions

            self._options = options or LauncherOptions()
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

    async def _translate(self, vmi: VirtualMachineInstance, options: LauncherOptions) -> Plan:
        from ch_launcher.convert import UnsupportedFeatures, translate

        env = self.settings.launcher_env(read_pod_facts())
        try:
            return await self._in_worker(translate, vmi, env, options)
        except UnsupportedFeatures as e:
            causes = "; ".join(cause(p.field, p.message) for p in e.problems)
            raise CommandFailed(f"the VMI cannot run on Cloud Hypervisor: {causes}") from None

    async def _prepare(self) -> None:
        await self._prepare_files()
        assert self._plan is not None and self._vmi is not None
        await self._guest.start(self._plan, self._vmi, self._options)
        if self._plan.tpm is not None:
            from ch_launcher.manager.tpm import Swtpm

            if self._swtpm is None:
                self._swtpm = Swtpm(self._plan.tpm)
            await self._swtpm.start()

    async def _prepare_files(self) -> None:
        """The plan's preparation steps (disks, ISOs, ...), before the VMM opens them."""
        from ch_launcher import prepare

        assert self._plan is not None
        try:
            await self._in_worker(functools.partial(prepare.execute, self._plan,
                                                    timeout=self.settings.prepare_timeout))
        except prepare.PreparationError as e:
            raise CommandFailed(f"preparing the VM failed: {cause(e.field, e.message)}") from None

    async def _stop_swtpm(self) -> None:
        swtpm, self._swtpm = self._swtpm, None
        if swtpm is not None:
            await swtpm.stop()

    async def _ensure_vmm(self) -> VmmProcess:
        from ch_launcher.ch.process import VmmStartError

        vmm = self._host.current
        if vmm is not None and vmm.poll() is None:
            return vmm
        if vmm is not None:
            await self._vmm_gone(vmm)
        try:
            vmm = await self._host.spawn()
        except VmmStartError as e:
            raise CommandFailed(f"cannot start cloud-hypervisor: {e}") from None
        self._vm.killing = self._vm.saw_shutdown = self._vm.crash_destroy = False
        self._vm.failure = None
        self._told.clear()
        self._seen.clear()
        try:
            version = await self._host.wait_ready(vmm)
        except VmmStartError as e:
            self._vm.killing = True
            await self._api(vmm.terminate, 1.0, 1.0)
            await self._vmm_gone(vmm)
            raise CommandFailed(f"cloud-hypervisor did not start: {e}") from None
        refusal = versions.refusal(version)
        if refusal is not None:
            self._vm.killing = True
            await self._api(vmm.terminate, 1.0, 1.0)
            await self._vmm_gone(vmm)
            raise CommandFailed(refusal)
        log.info("cloud-hypervisor %s is up (pid %d)", version, vmm.pid)
        self._check_process_model(vmm)
        self._bump()
        return vmm

    def _check_process_model(self, vmm: VmmProcess) -> None:
        spawning = self.settings.spawning
        if spawning is None:
            return  # no runtime process tree asked for: _fit_vmm says so to a VMI that needs it
        from ch_launcher.manager import procmodel

        self._model_problem = procmodel.model_problem(spawning, vmm.pid)
        if self._model_problem is None:
            log.info("process model: %s", procmodel.describe_model(spawning, vmm.pid))
        else:
            log.error("virt-handler will not find this pod's VMM: %s. VMIs with VFIO devices, dedicated or "
                      "realtime CPUs or memLock: Required cannot run here (%s)", self._model_problem, procmodel.DOC)

    async def _fit_vmm(self) -> None:
        """Before vm.create: the VMM must be where virt-handler looks for it and able to lock the
        memory the VM pins, if this VM needs either (HostTuning); else fail with the reason,
        leaving no VM behind. A VMM started before virt-handler raised the spawner's memlock
        limit is replaced by one that inherits it."""
        assert self._plan is not None and self._host.current is not None
        host = self._plan.host
        if not (host.finds_vmm or host.lock_memory or host.housekeeping_cpus):
            return  # nothing of the process model matters to this VMI
        from ch_launcher.manager import procmodel

        if self.settings.spawning is None:
            self._model_problem = procmodel.model_problem(None, self._host.current.pid)
        if host.finds_vmm and self._model_problem is not None:
            raise CommandFailed(f"virt-handler would not find this VMI's VMM and would fail its reconcile: "
                                f"{self._model_problem} ({procmodel.DOC})")
        if host.lock_memory:
            vmm = self._host.current
            if procmodel.lock_problem(vmm.pid, host.lock_memory) and procmodel.spawner_can_lock(
                    self.settings.spawning, host.lock_memory):
                log.info("the VMM (pid %d) started before virt-handler raised the memlock limit; starting one "
                         "that inherits it", vmm.pid)
                await self._stop_vmm()
                vmm = await self._ensure_vmm()
            problem = procmodel.lock_problem(vmm.pid, host.lock_memory)
            if problem is not None:
                raise CommandFailed(problem)
        if host.housekeeping_cpus:
            from ch_launcher.manager import tuning

            tuning.pin_housekeeping(self.settings.spawning, self._host.current.pid, host.housekeeping_cpus)

    async def _ensure_vmm_quietly(self) -> None:
        try:
            await self._ensure_vmm()
        except CommandFailed as e:
            log.error("%s", e)

    async def _create(self) -> None:
        """`vm.create`, replacing a config an earlier attempt left. A VMM that does not answer
        (hung, or gone between calls) is stopped, as `_boot` does, so that the next Sync starts
        a fresh one instead of asking the same stalled VMM again. Raises CommandFailed."""
        from ch_launcher.ch.api import ChApiError, Conflict, VmmUnavailable

        assert self._plan is not None and self._host.current is not None
        client = self._host.current.client
        for attempt in (1, 2):
            try:
                await self._api(client.create, self._plan.config)
                return
            except Conflict:
                if attempt == 2:
                    raise CommandFailed("cloud-hypervisor keeps a VM that cannot be replaced") from None
                await self._api(client.delete)  # a config left by an earlier attempt: replace it
            except VmmUnavailable as e:
                await self._stop_vmm()
                raise CommandFailed(f"cloud-hypervisor did not take the VM configuration: {e}") from None
            except ChApiError as e:
                raise CommandFailed(f"cloud-hypervisor refused the VM configuration: {e}") from None

    async def _boot(self) -> None:
        from ch_launcher.ch.api import ChApiError, VmmUnavailable

        assert self._host.current is not None and self._vmi is not None
        client = self._host.current.client
        # startStrategy Paused: virt-launcher starts the domain paused and records the pause as
        # the user's (kubevirt pkg/virt-launcher/virtwrap/manager.go@d923fdb815cd; libvirt then
        # reports Paused/User), so only `virtctl unpause` resumes it. Cloud Hypervisor cannot boot
        # paused: pause right after vm.boot, before the Domain is first announced.
        start_paused = not self.booted_once.is_set() and self._vmi.spec.startStrategy == "Paused"
        try:
            await self._api(client.boot, timeout=self.settings.boot_timeout)
            if start_paused:
                seen = dict(self._seen)
                await self._api(client.pause)
                self._told_by_answer("pause", seen)  # its vm:paused may come after an unpause
        except ChApiError as e:
            # Leave no half-made VM, so the next Sync starts clean: a VMM that did not answer is
            # stopped (the next Sync spawns another), otherwise its VM config is deleted.
            if isinstance(e, VmmUnavailable):
                await self._stop_vmm()
            else:
                with contextlib.suppress(ChApiError):
                    await self._api(client.delete)
            message = f"booting the VM failed: {e}"
            self._k8s_event("Warning", "BootFailed", message)
            raise CommandFailed(message) from None
        self._vm.down = None
        self._vm.user_paused = start_paused  # a pause of an earlier boot does not carry over
        for disk in list(self._vm.removing):  # a fresh VM from a config without the disk
            self._device_ejected(disk)
        self._set_state(VmState.PAUSED if start_paused else VmState.RUNNING, force=True)
        self.booted_once.set()
        self._guest.attach_console()
        host = self._plan.host if self._plan is not None else None
        if host is not None and (host.housekeeping_cpus or host.realtime_vcpus):
            from ch_launcher.manager import tuning

            tuning.after_boot(self.settings.spawning, self._host.current.pid, host)
        self._runner.background(self._release_memory_once_told())

    async def _release_memory_once_told(self) -> None:
        """`release_memory()` once virt-handler has heard of the boot (or RELEASE_WAIT has
        passed): it holds the event loop for ~100 ms and pages out what the delivery then
        needs, so done right after the boot it delayed the first Domain event and the Sync's
        answer by as much (bench/real_vmm.py)."""
        await self._outbox.flush(RELEASE_WAIT)
        release_memory()

    async def _vm_call(self, what: str, call: Callable[[Any], None], new_state: VmState | None,
                       undo: Callable[[], None] | None = None) -> None:
        """One state-changing call. When it fails or times out, what happened is read back from
        the VMM (`vm.info`) rather than assumed: a pause whose answer was lost but which took
        effect is a success (and stays the user's); a power button the VMM could no longer take
        because the guest is already powering off is a success too (the exit reports the rest).
        Otherwise CommandFailed with the reason."""
        from ch_launcher.ch.api import ChApiError, Conflict, VmmUnavailable, VmNotCreated

        vmm = self._host.current
        if vmm is None:
            raise CommandFailed(lifecycle.NOT_RUNNING)
        seen = dict(self._seen)
        try:
            await self._api(call, vmm.client)
        except ChApiError as e:
            if isinstance(e, Conflict) and e.already_in_state():
                if new_state is not None:
                    self._set_state(new_state)
                return
            observed = await self._reread()
            self._believe(observed)
            if new_state is not None and self._vm.state is new_state:
                log.warning("%s: %s; but the VMM says the VM is %s now: done", what, e, new_state.value)
                self._told_by_answer(what, seen)
                return
            if new_state is None and isinstance(e, VmmUnavailable) and e.exiting:
                log.info("%s: the VMM is exiting (%s); its exit will tell how the VM ended", what, e)
                return
            # Undo what the step presumed (the user's pause, an armed soft reboot) only when the
            # call is known not to have happened: a call that timed out may still take effect,
            # and its event then finds the user's intent in place.
            unknown = isinstance(e, VmmUnavailable) and e.timed_out and observed is None
            if undo is not None and not unknown:
                undo()
            if isinstance(e, VmNotCreated):
                raise CommandFailed(lifecycle.DOMAIN_NOT_FOUND) from None
            raise CommandFailed(f"{what} failed: {e}") from None
        if new_state is not None:
            self._told_by_answer(what, seen)
            self._set_state(new_state)

    def _told_by_answer(self, what: str, seen_before: dict[str, int]) -> None:
        """The answer to `what` has set the state: its event, unless already heard, is stale news."""
        event = _EVENT_OF_CALL.get(what)
        if event is not None and self._seen[event] == seen_before.get(event, 0):
            self._told[event] += 1

    async def _reread(self) -> str | None:
        """The current VMM's own word on its VM (Kata's habit: read vm.info, do not trust memory):
        its state ("Running", "Paused", "Created"), or None when there is no VM or no answer
        (no VMM, or it is gone or going: its exit handler reports that). Never raises."""
        from ch_launcher.ch.api import ChApiError

        vmm = self._host.current
        if vmm is None or vmm.poll() is not None or self._vm.state not in _ALIVE:
            return None
        try:
            info = await self._api(vmm.client.info)
        except ChApiError as e:
            log.info("re-reading the VM's state: %s", e)
            return None
        return info.state

    def _believe(self, ch_state: str | None) -> None:
        """Take the VMM's state over what we remembered when they differ (an event was lost, or
        a call's answer was): Running or Paused; a panicked guest still runs for CH, and the
        other states are its exit's to report."""
        vm = self._vm
        observed = {"Running": VmState.RUNNING, "Paused": VmState.PAUSED}.get(ch_state or "")
        if observed is None or vm.state not in (VmState.RUNNING, VmState.PAUSED) or observed is vm.state:
            return
        log.warning("the VMM says the VM is %s, the launcher thought %s (a lost event or answer): "
                    "taking the VMM's word", ch_state, vm.state.value)
        if observed is VmState.RUNNING:
            vm.user_paused = False  # whoever resumed it, it is not paused any more
        self._set_state(observed, force=True)

    async def _stop_vmm(self) -> None:
        vmm = self._host.current
        if vmm is None:
            return
        self._vm.killing = True
        await self._api(vmm.terminate, self.settings.stop_timeout, self.settings.stop_timeout)
        await self._vmm_gone(vmm)

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

    # --- observations --------------------------------------------------------------------------

    def _on_event(self, event: Event) -> None:
        vm = self._vm
        name = event.name
        log.info("cloud-hypervisor event %s%s", name, f" {json.dumps(event.properties)}" if event.properties else "")
        self._seen[name] += 1
        if self._migration_event(event):
            return
        if self._told[name]:
            self._told[name] -= 1
            return  # the answer to our call came first and said so: a late event changes nothing
        if name == "vm:shutdown":
            vm.saw_shutdown = True
            self._check_failure(self._host.current)
            if vm.soft_reboot and not vm.killing and vm.failure is None:
                vm.rebooting = True
                return  # the exit handler boots the VM again
        new = lifecycle.state_after_event(vm.state, name, event.properties)
        if new is VmState.DOWN:
            vm.down = lifecycle.down_reason(saw_shutdown=True, killing=vm.killing, state=vm.state,
                                            vmm_failed=vm.failure is not None, crash_destroy=vm.crash_destroy)
        if name == "vm:booted":
            return  # every boot is ours: _boot() publishes once vm.boot has returned
        if name == "guest:panic":
            self._guest_panicked(new)
            return
        if new is not None or name in lifecycle.NOTIFY_EVENTS:
            self._set_state(new or vm.state, force=name in lifecycle.NOTIFY_EVENTS)
        if name == "vm:rebooted":
            self._guest.attach_console()
            for disk in list(vm.removing):  # rebuilt from its config, which has no such disk
                self._device_ejected(disk)
        if name == "vm:device-removed" and event.properties:
            self._device_ejected(str(event.properties.get("id", "")))

    def _guest_panicked(self, new: VmState | None) -> None:
        """pvpanic, as virt-launcher reports a libvirt CRASHED event (kubevirt
        `pkg/virt-launcher/notify-client/client.go` `handleGuestPanicEvent`@d923fdb815cd):
        PanicCount + 1, GuestPanicInfo (no details: `Type: "unknown"`), a `GuestPanicked` Warning.
        A panic (`new` is PANICKED) is Crashed/Panicked, and then, as libvirt's on_crash=destroy
        stops QEMU, the VMM is stopped and the Domain reads Shutoff/Crashed. A kdump kernel taking
        over (`crash_loaded`) leaves the VM running."""
        vm = self._vm
        if vm.state not in (VmState.RUNNING, VmState.PAUSED):
            return  # a straggler, or a second report of the same panic (virt-launcher handles one)
        vm.panic_count += 1
        vm.panic_info = GuestPanicInfo()
        self._k8s_event("Warning", "GuestPanicked", "GuestPanicked (details unavailable)")
        if new is not VmState.PANICKED:
            self._publish(force=True)
            return
        log.error("the guest panicked; stopping cloud-hypervisor, as libvirt's on_crash=destroy stops QEMU")
        self._set_state(VmState.PANICKED, force=True)
        self._runner.background(self._runner.locked("on_crash=destroy", self._destroy_after_panic))

    async def _destroy_after_panic(self) -> None:
        vm = self._vm
        if vm.state is not VmState.PANICKED:
            return  # reset, killed or deleted meanwhile
        vm.soft_reboot = False
        vm.crash_destroy = True
        await self._stop_vmm()

    def _on_vmm_exit(self, vmm: VmmProcess) -> None:
        self._runner.background(self._vmm_gone(vmm))

    async def _vmm_gone(self, vmm: VmmProcess) -> None:
        """The VMM exited (or was stopped): reap it, read its last events, update the Domain.
        Idempotent per VMM."""
        code = vmm.poll()
        if code is None:  # another thread is reaping it (terminate): wait for that
            code = await asyncio.to_thread(vmm.wait, 30.0)
        if vmm is not self._host.current:
            return
        self._host.read_events()
        self._migration_vmm_exit(code)
        self._host.release(vmm)
        vm = self._vm
        how = describe_exit(code)
        self._check_failure(vmm)  # its vm:shutdown may have been lost
        if (vm.soft_reboot and vm.saw_shutdown and not vm.killing and vm.failure is None
                and vm.state in (VmState.RUNNING, VmState.PAUSED)):
            log.info("the guest shut down for a soft reboot; booting it again")
            vm.soft_reboot = False
            self._runner.background(self._runner.locked("SoftReboot", self._reboot_fresh))
            return
        if vm.state in (VmState.RUNNING, VmState.PAUSED, VmState.PANICKED):
            vm.down = lifecycle.down_reason(saw_shutdown=vm.saw_shutdown, killing=vm.killing, state=vm.state,
                                            exit_code=code, vmm_failed=vm.failure is not None,
                                            crash_destroy=vm.crash_destroy)
            self._set_state(VmState.DOWN, force=True)
            if vm.down in (Reason.CRASHED, Reason.PANICKED) and vm.failure is None and not vm.crash_destroy:
                message = f"cloud-hypervisor (pid {vmm.pid}) {how} while the VM was running"
                log.error("%s", message)
                for line in vmm.log_tail(5).splitlines():  # its last words, as virt-launcher logs QEMU's
                    log_subcomponent_line(log, "cloud-hypervisor", line)
                self._k8s_event("Warning", "VMMCrashed", message)
        elif vm.state is not VmState.DOWN and not vm.killing and not self._closed:
            # No VM ran on it (a VM that stopped has announced vm:shutdown and is DOWN already).
            log.warning("cloud-hypervisor (pid %d) %s with no VM running", vmm.pid, how)
        if vm.state is VmState.DOWN:
            log.info("VM is down: %s", vm.down.value if vm.down else "?")
        self._bump()

    def _check_failure(self, vmm: VmmProcess | None) -> None:
        """While the VM is up and not being stopped by us: did `vmm` stop it on an internal failure
        (a vCPU error, a thread that panicked)? CH then says `vm:shutdown` and exits 0 as after
        a guest poweroff; only its log tells (ch.vmmlog). Once per VMM: logged, and a Warning
        event as for a VMM crash."""
        vm = self._vm
        if vmm is None or vm.failure is not None or vm.killing or vm.state not in _ALIVE:
            return
        failure = vmm.failure()
        if failure is None:
            return
        vm.failure = failure
        message = f"cloud-hypervisor (pid {vmm.pid}) stopped the VM on an internal failure: {failure}"
        log.error("%s", message)
        self._k8s_event("Warning", "VMMCrashed", message)

    async def _reboot_fresh(self) -> None:
        try:
            await self._ensure_vmm()
            await self._create()
            await self._boot()
        except CommandFailed as e:
            log.error("soft reboot: %s", e)
            self._vm.down = Reason.CRASHED
            self._set_state(VmState.DOWN, force=True)
        finally:
            self._vm.rebooting = False
            self._bump()

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


