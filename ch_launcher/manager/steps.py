"""The steps the domain manager runs on the VMM (`lifecycle.Step`): translate the VMI, prepare its
files, spawn and fit the VMM, create and boot the VM, the state-changing calls (pause, resume,
power button, reboot) with what happened read back from the VMM when one fails, and stopping
the VMM. A part of `DomainManager`, kept apart by concern.

Each runs under the manager's lock (from `_run` or a background task the manager started);
raises CommandFailed with the in-band message and leaves no half-made VM behind.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ch_launcher import lifecycle
from ch_launcher.ch import versions
from ch_launcher.lifecycle import ALIVE, VmState
from ch_launcher.manager import features
from ch_launcher.manager.pod import read_pod_facts, release_memory
from ch_launcher.manager.settings import CommandFailed
from ch_launcher.manager.view import cause

if TYPE_CHECKING:
    from ch_launcher.ch.process import VmmProcess
    from ch_launcher.convert import LauncherOptions, Plan
    from ch_launcher.kubevirt.vmi import VirtualMachineInstance

log = logging.getLogger(__name__)

_EVENT_OF_CALL = {"pause": "vm:paused", "resume": "vm:resumed"}  # the state-changing event of a call
RELEASE_WAIT = 5.0  # seconds a boot's release_memory() waits for its Domain event to reach virt-handler


class VmSteps:
    """Mixed into DomainManager; uses its `settings`, `_vm`, `_vmi`, `_plan`, `_options`, `_host`,
    `_guest`, `_swtpm`, `_told`, `_seen`, `_model_problem`, `_outbox`, `_runner`, `booted_once`, `_api`,
    `_in_worker`, `_set_state`, `_k8s_event`, `_bump`, `_vmm_gone` and `_device_ejected`."""

    settings: Any
    _vm: Any
    _vmi: Any
    _plan: Any
    _options: Any
    _host: Any
    _guest: Any
    _swtpm: Any
    _told: Any
    _seen: Any
    _model_problem: str | None
    _outbox: Any
    _runner: Any
    booted_once: Any

    async def _translate(self, vmi: VirtualMachineInstance, options: LauncherOptions) -> Plan:
        env = self.settings.launcher_env(read_pod_facts())
        try:
            return await self._in_worker(features.convert.translate, vmi, env, options)
        except features.convert.UnsupportedFeatures as e:
            causes = "; ".join(cause(p.field, p.message) for p in e.problems)
            raise CommandFailed(f"the VMI cannot run on Cloud Hypervisor: {causes}") from None

    async def _prepare(self) -> None:
        await self._prepare_files()
        assert self._plan is not None and self._vmi is not None
        await self._guest.start(self._plan, self._vmi, self._options)
        if self._plan.tpm is not None:
            if self._swtpm is None:
                self._swtpm = features.tpm.Swtpm(self._plan.tpm)
            await self._swtpm.start()

    async def _prepare_files(self) -> None:
        """The plan's preparation steps (disks, ISOs, ...), before the VMM opens them."""
        prepare = features.prepare
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
        vmm = self._host.current
        if vmm is not None and vmm.poll() is None:
            return vmm
        if vmm is not None:
            await self._vmm_gone(vmm)
        try:
            vmm = await self._host.spawn()
        except features.process.VmmStartError as e:
            raise CommandFailed(f"cannot start cloud-hypervisor: {e}") from None
        self._vm.killing = self._vm.saw_shutdown = self._vm.crash_destroy = False
        self._vm.failure = None
        self._told.clear()
        self._seen.clear()
        try:
            version = await self._host.wait_ready(vmm)
        except features.process.VmmStartError as e:
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
        procmodel = features.procmodel
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
        procmodel = features.procmodel
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
            features.tuning.pin_housekeeping(self.settings.spawning, self._host.current.pid, host.housekeeping_cpus)

    async def _ensure_vmm_quietly(self) -> None:
        try:
            await self._ensure_vmm()
        except CommandFailed as e:
            log.error("%s", e)

    async def _create(self) -> None:
        """`vm.create`, replacing a config an earlier attempt left. A VMM that does not answer
        (hung, or gone between calls) is stopped, as `_boot` does, so that the next Sync starts
        a fresh one instead of asking the same stalled VMM again. Raises CommandFailed."""
        api = features.api
        assert self._plan is not None and self._host.current is not None
        client = self._host.current.client
        for attempt in (1, 2):
            try:
                await self._api(client.create, self._plan.config)
                return
            except api.Conflict:
                if attempt == 2:
                    raise CommandFailed("cloud-hypervisor keeps a VM that cannot be replaced") from None
                await self._api(client.delete)  # a config left by an earlier attempt: replace it
            except api.VmmUnavailable as e:
                await self._stop_vmm()
                raise CommandFailed(f"cloud-hypervisor did not take the VM configuration: {e}") from None
            except api.ChApiError as e:
                raise CommandFailed(f"cloud-hypervisor refused the VM configuration: {e}") from None

    async def _boot(self) -> None:
        api = features.api
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
        except api.ChApiError as e:
            # Leave no half-made VM, so the next Sync starts clean: a VMM that did not answer is
            # stopped (the next Sync spawns another), otherwise its VM config is deleted.
            if isinstance(e, api.VmmUnavailable):
                await self._stop_vmm()
            else:
                with contextlib.suppress(api.ChApiError):
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
            features.tuning.after_boot(self.settings.spawning, self._host.current.pid, host)
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
        api = features.api
        vmm = self._host.current
        if vmm is None:
            raise CommandFailed(lifecycle.NOT_RUNNING)
        seen = dict(self._seen)
        try:
            await self._api(call, vmm.client)
        except api.ChApiError as e:
            if isinstance(e, api.Conflict) and e.already_in_state():
                if new_state is not None:
                    self._set_state(new_state)
                return
            observed = await self._reread()
            self._believe(observed)
            if new_state is not None and self._vm.state is new_state:
                log.warning("%s: %s; but the VMM says the VM is %s now: done", what, e, new_state.value)
                self._told_by_answer(what, seen)
                return
            if new_state is None and isinstance(e, api.VmmUnavailable) and e.exiting:
                log.info("%s: the VMM is exiting (%s); its exit will tell how the VM ended", what, e)
                return
            # Undo what the step presumed (the user's pause, an armed soft reboot) only when the
            # call is known not to have happened: a call that timed out may still take effect,
            # and its event then finds the user's intent in place.
            unknown = isinstance(e, api.VmmUnavailable) and e.timed_out and observed is None
            if undo is not None and not unknown:
                undo()
            if isinstance(e, api.VmNotCreated):
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
        api = features.api
        vmm = self._host.current
        if vmm is None or vmm.poll() is not None or self._vm.state not in ALIVE:
            return None
        try:
            info = await self._api(vmm.client.info)
        except api.ChApiError as e:
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
