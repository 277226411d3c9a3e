"""What virt-handler's lifecycle commands do: `lifecycle.decide()`'s steps for the VM's state,
each done by the object that owns it (the record, the boot, the supervision, the
reconfiguration), and the state-changing calls to the VMM (pause, resume, power button,
reboot), whose outcome is read back from the VMM when one fails.

Every command runs under the manager's lock (`Runner.run`, from `DomainManager.execute`) and
raises CommandFailed with the in-band message; anything else escaping is a bug. A Sync whose
boot outlived its RPC reports its failure with the next Sync (`ended_late`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from ch_launcher import lifecycle
from ch_launcher.lifecycle import ALIVE, UP, Intent, Step, VmState
from ch_launcher.manager import features
from ch_launcher.manager.settings import CommandFailed
from ch_launcher.manager.view import acpi_enabled

if TYPE_CHECKING:
    from ch_launcher.ch.api import CloudHypervisorClient
    from ch_launcher.convert import LauncherOptions
    from ch_launcher.kubevirt.vmi import VirtualMachineInstance
    from ch_launcher.manager.boot import Boot
    from ch_launcher.manager.life import VmmLife
    from ch_launcher.manager.reconfig import Reconfiguration
    from ch_launcher.manager.record import DomainRecord
    from ch_launcher.manager.settings import ManagerSettings
    from ch_launcher.manager.supervision import Supervision

log = logging.getLogger(__name__)

STARTED_PHASES = ("Running", "Succeeded", "Failed")  # vmi.IsRunning() || vmi.IsFinal()


def complete_metadata(vmi: VirtualMachineInstance, settings: ManagerSettings) -> VirtualMachineInstance:
    """Fill a VMI's missing name/namespace/uid from the launcher's flags; the Domain needs them.
    Raises CommandFailed when neither says."""
    meta = vmi.metadata
    if meta.uid and meta.name and meta.namespace:
        return vmi
    meta = replace(meta, name=meta.name or settings.name, uid=meta.uid or settings.uid,
                   namespace=meta.namespace or settings.namespace)
    if not (meta.uid and meta.name and meta.namespace):
        raise CommandFailed("the VMI has no metadata.name, metadata.namespace or metadata.uid, and the "
                            "launcher's --name/--namespace/--uid do not say either")
    return replace(vmi, metadata=meta)


class Commands:
    """Runs one lifecycle command at a time (the caller holds the lock)."""

    def __init__(self, settings: ManagerSettings, record: DomainRecord, life: VmmLife, boot: Boot,
                 supervision: Supervision, reconfig: Reconfiguration) -> None:
        self.settings = settings
        self._record = record
        self._life = life
        self._boot = boot
        self._supervision = supervision
        self._reconfig = reconfig
        self._start_error: str | None = None  # a Sync that failed after its RPC had answered, for the next Sync

    async def run(self, intent: Intent, vmi: VirtualMachineInstance | None, options: LauncherOptions | None) -> str:
        """Run `intent`; a short description of what was done. Raises CommandFailed."""
        record = self._record
        if vmi is not None and intent is Intent.SYNC:
            vmi = complete_metadata(vmi, self.settings)
        if intent is Intent.SYNC and self._start_error is not None:
            error, self._start_error = self._start_error, None
            raise CommandFailed(error)  # reported once; the next Sync tries again
        if intent is Intent.SYNC:
            self.believe(await self.reread())  # a lost event must not outlive one reconcile
        started = vmi is not None and vmi.status.phase in STARTED_PHASES
        # A VM paused for a migration's switch-over is not the Sync's to resume.
        outcome = lifecycle.decide(intent, record.state, user_paused=record.user_paused or record.migration_paused,
                                   vmi_started=started, acpi=acpi_enabled(vmi or record.vmi))
        if outcome.error:
            raise CommandFailed(outcome.error)
        for step in outcome.steps:
            await self._step(step, vmi, options)
        return ", ".join(s.value for s in outcome.steps) or "nothing to do"

    def ended_late(self, intent: Intent, error: BaseException | None) -> None:
        """A command that outlived its RPC has ended: a Sync's failure is kept for the next Sync."""
        if isinstance(error, CommandFailed) and intent is Intent.SYNC:
            self._start_error = str(error)
            log.error("starting the VM failed in the background: %s", error)
        elif error is not None:
            log.error("%s failed in the background: %s", intent.value, error)
        self._record.bump()

    async def _step(self, step: Step, vmi: VirtualMachineInstance | None, options: LauncherOptions | None) -> None:
        record, boot = self._record, self._boot
        log.debug("step %s in state %s", step.value, record.state.value)
        if step is Step.REFRESH_GRACE:
            assert vmi is not None
            record.refresh(vmi)
            if record.plan is not None and record.state in UP:
                await self._reconfig.sync(vmi, options)
        elif step is Step.TRANSLATE:
            assert vmi is not None
            await boot.plan(vmi, options)
        elif step is Step.PREPARE:
            await boot.prepare()
        elif step is Step.SPAWN:
            await boot.ensure_vmm()
            await boot.fit_vmm()
        elif step is Step.CREATE:
            await boot.create()
        elif step is Step.BOOT:
            await boot.boot()
        elif step is Step.REMEMBER_USER_PAUSE:
            record.user_paused = True
        elif step is Step.FORGET_USER_PAUSE:
            record.user_paused = False
        elif step is Step.PAUSE:
            await self._vm_call("pause", lambda c: c.pause(), VmState.PAUSED,
                                undo=lambda: setattr(record, "user_paused", False))
        elif step is Step.RESUME:
            await self._vm_call("resume", lambda c: c.resume(), VmState.RUNNING)
        elif step is Step.ARM_SOFT_REBOOT:
            record.soft_reboot = True
        elif step is Step.DISARM_SOFT_REBOOT:
            record.soft_reboot = False
        elif step is Step.POWER_BUTTON:
            await self._vm_call("power-button", lambda c: c.power_button(), None,
                                undo=lambda: setattr(record, "soft_reboot", False))
        elif step is Step.STAMP_DELETION:
            record.stamp_deletion()
        elif step is Step.REBOOT:
            await self._vm_call("reboot", lambda c: c.reboot(), VmState.RUNNING)
        elif step is Step.STOP_VMM:
            await self._life.stop()
        elif step is Step.FORGET_DOMAIN:
            await self._supervision.forget()

    # --- the state-changing calls --------------------------------------------------------------

    async def _vm_call(self, what: str, call: Callable[[CloudHypervisorClient], object], new_state: VmState | None,
                       undo: Callable[[], None] | None = None) -> None:
        """One state-changing call. When it fails or times out, what happened is read back from
        the VMM (`vm.info`) rather than assumed: a pause whose answer was lost but which took
        effect is a success (and stays the user's); a power button the VMM could no longer take
        because the guest is already powering off is a success too (the exit reports the rest).
        Otherwise CommandFailed with the reason."""
        api = features.api
        record, session = self._record, self._life.current
        if session is None:
            raise CommandFailed(lifecycle.NOT_RUNNING)
        heard = session.events_heard()
        try:
            await session.call(call, session.client)
        except api.ChApiError as e:
            if isinstance(e, api.Conflict) and e.already_in_state():
                if new_state is not None:
                    record.set_state(new_state)
                return
            observed = await self.reread()
            self.believe(observed)
            if new_state is not None and record.state is new_state:
                log.warning("%s: %s; but the VMM says the VM is %s now: done", what, e, new_state.value)
                session.answered(what, heard)
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
            session.answered(what, heard)
            record.set_state(new_state)

    async def reread(self) -> str | None:
        """The current VMM's own word on its VM while one runs it (`VmmSession.reread`); None
        otherwise. Never raises."""
        session = self._life.current
        if session is None or self._record.state not in ALIVE:
            return None
        return await session.reread()

    def believe(self, ch_state: str | None) -> None:
        """Take the VMM's state over what we remembered when they differ (an event was lost, or
        a call's answer was): Running or Paused; a panicked guest still runs for CH, and the
        other states are its exit's to report."""
        record = self._record
        observed = {"Running": VmState.RUNNING, "Paused": VmState.PAUSED}.get(ch_state or "")
        if observed is None or record.state not in UP or observed is record.state:
            return
        log.warning("the VMM says the VM is %s, the launcher thought %s (a lost event or answer): "
                    "taking the VMM's word", ch_state, record.state.value)
        if observed is VmState.RUNNING:
            record.user_paused = False  # whoever resumed it, it is not paused any more
        record.set_state(observed, force=True)
