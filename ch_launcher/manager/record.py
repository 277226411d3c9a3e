"""The domain record: the VM as virt-handler sees it, and the one writer of what it sees.

virt-handler knows the VM as one Domain (what GetDomain answers) and the events that carried
each change of it (Notify). Both come from here. The record holds the facts the Domain is drawn
from: the VM's state and why it is down, the intents that colour it (the user's pause, an armed
soft reboot), the grace-period, panic and migration metadata, and the VMI and plan it describes.
Every change that can show goes through `set_state` or `publish`, which rebuild the Domain JSON
once and hand it to the sink (virt-handler's Notify client, which queues it and returns at once;
the order and retries of delivery are its own, `notify.py`): ADDED for a freshly booted domain,
MODIFIED afterwards, and a final MODIFIED with `ObjectMeta.deletionTimestamp` when the VM is
forgotten (contract §2.5, §10.4). `wait_until` waits, without polling, for a change that makes a predicate hold.
While a VM runs here, the record also keeps the launcher's epitaph up to date: the Domain, as
Shutoff/Crashed, that the monitor sends virt-handler should the launcher die (`ch_launcher.epitaph`).

Who writes what: the state, through `set_state`, whoever observes it change (the commands, the
boot, the supervision of the VMM, a migration); `user_paused` and `soft_reboot`, the commands
and what they started; `migration` and `migration_paused`, the migration source or target;
`current_memory`, the reconfiguration; the guest agent's view (`set_guest_agent`), the guest
agent. None of them sends anything itself.

Failure behaviour: nothing here raises on a change; a sink or an epitaph that fails is logged, and
the events after it still go.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from ch_launcher import lifecycle
from ch_launcher.kubevirt.domain import (
    GracePeriod,
    GuestAgentView,
    GuestPanicInfo,
    LifeCycle,
    Reason,
    deleted_domain_view,
    domain_json,
    now_rfc3339,
)
from ch_launcher.lifecycle import VmState
from ch_launcher.manager.view import domain_view

if TYPE_CHECKING:
    from ch_launcher.convert import Plan
    from ch_launcher.epitaph import EpitaphFile
    from ch_launcher.kubevirt.migration import MigrationMetadata
    from ch_launcher.kubevirt.vmi import VirtualMachineInstance
    from ch_launcher.manager.settings import EventSink

log = logging.getLogger(__name__)


class DomainRecord:
    """The facts behind the Domain, the Domain JSON, and the events that tell virt-handler."""

    def __init__(self, sink: EventSink | None, epitaph: EpitaphFile | None = None) -> None:
        self._state = VmState.UNDEFINED
        self._down: Reason | None = None
        self.user_paused = False            # paused through PauseVirtualMachine: Paused/User, never resumed by a Sync
        self.soft_reboot = False            # the next guest poweroff boots the VM again
        self.migration: MigrationMetadata | None = None  # the Domain's Migration metadata
        self.migration_paused = False       # paused by Cloud Hypervisor for a migration (Paused/Migration)
        self.current_memory: int | None = None  # memory_actual_size after a memory resize
        self._grace = GracePeriod()         # replaced, never mutated
        self._panic_count = 0               # Status.PanicCount, kept for the launcher's life
        self._panic_info: GuestPanicInfo | None = None
        self._agent = GuestAgentView()       # the guest agent as the Domain shows it (for a VM with a channel)
        self._vmi: VirtualMachineInstance | None = None
        self._plan: Plan | None = None
        self._domain_json = ""
        self._announced = False             # an ADDED was sent for the current domain
        self._sink = sink
        self._epitaph = epitaph
        self._changed = asyncio.Event()
        self.booted_once = asyncio.Event()  # a VM booted (or arrived) at least once: "domain defined"
        self.forgotten = asyncio.Event()    # the final deletion event has been queued

    # --- what the Domain is drawn from (read) ----------------------------------------------------

    @property
    def state(self) -> VmState:
        return self._state

    @property
    def down(self) -> Reason | None:
        """Why a DOWN VM is down (None in any other state)."""
        return self._down

    @property
    def grace(self) -> GracePeriod:
        return self._grace

    @property
    def vmi(self) -> VirtualMachineInstance | None:
        """The VMI the Domain describes (the last one a Sync or a migration target brought)."""
        return self._vmi

    @property
    def plan(self) -> Plan | None:
        """The plan the VM was made from; changes to the running VM edit it, then `publish`."""
        return self._plan

    @property
    def domain_json(self) -> str:
        """The api.Domain JSON GetDomain answers; "" when there is no domain."""
        return self._domain_json

    # --- changes ---------------------------------------------------------------------------------

    def set_state(self, state: VmState, *, down: Reason | None = None, force: bool = False,
                  publish: bool = True) -> None:
        """The VM is in `state` now (`down`: why, for DOWN). Publishes unless `publish` is False
        (for a caller that forgets the domain next, so no in-between Domain is ever sent)."""
        self._state = state
        self._down = down if state is VmState.DOWN else None
        if publish:
            self.publish(force=force)
        else:
            self._write_epitaph()

    def refresh(self, vmi: VirtualMachineInstance) -> None:
        """A Sync's VMI: the Domain describes it and takes its DeletionGracePeriodSeconds."""
        self._vmi = vmi
        self._grace = replace(self._grace, deletion_grace_period_seconds=vmi.grace_period_seconds)
        self.publish()

    def set_vmi(self, vmi: VirtualMachineInstance) -> None:
        """The VMI a migration target receives (published with the domain it arrives with)."""
        self._vmi = vmi

    def set_plan(self, plan: Plan) -> None:
        self._plan = plan

    def stamp_deletion(self) -> None:
        """GracePeriod.DeletionTimestamp, the first time only."""
        if self._grace.deletion_timestamp is None:
            self._grace = replace(self._grace, deletion_timestamp=now_rfc3339())
            self.publish()

    def mark_for_graceful_shutdown(self) -> None:
        """SIGTERM: GracePeriod.MarkedForGracefulShutdown (a MODIFIED event follows)."""
        self._grace = replace(self._grace, marked_for_graceful_shutdown=True)
        self.publish()

    def note_panic(self) -> None:
        """The guest panicked: PanicCount + 1 and GuestPanicInfo (shown by the next publish)."""
        self._panic_count += 1
        self._panic_info = GuestPanicInfo()

    def set_guest_agent(self, view: GuestAgentView) -> None:
        """What the guest agent tells now (its channel's state, the guest's OS, interfaces and
        freeze status, the access credentials' result); published when the Domain changes."""
        if view != self._agent:
            self._agent = view
            self.publish()

    def publish(self, *, force: bool = False) -> None:
        """Rebuild the Domain JSON; send it when it changed (or `force`: a VMM event)."""
        status = lifecycle.domain_status(self._state, user_paused=self.user_paused, down=self._down)
        if status == (LifeCycle.PAUSED, Reason.UNKNOWN) and self.migration_paused:
            status = (LifeCycle.PAUSED, Reason.MIGRATION)
        text = "" if status is None else self._domain_as(status)
        changed = text != self._domain_json
        self._domain_json = text
        if status is not None and text and (changed or force):
            kind = "MODIFIED" if self._announced else "ADDED"
            self._announced = True
            self._send_domain(text, kind)
            log.info("domain %s: %s/%s", kind, status[0].value, status[1].value)
        self._write_epitaph()
        self.bump()

    def _domain_as(self, status: tuple[LifeCycle, Reason]) -> str:
        """The Domain JSON in `status`; "" while there is no VMI or plan to draw it from."""
        vmi, plan = self._vmi, self._plan
        if vmi is None or plan is None:
            return ""
        return domain_json(domain_view(vmi, plan, *status, grace=self._grace, panic_count=self._panic_count,
                                       current_memory=self.current_memory, migration=self.migration,
                                       panic_info=self._panic_info,
                                       agent=self._agent if plan.guest_agent is not None else None))

    def _write_epitaph(self) -> None:
        """The Domain to send if the launcher died now: this one crashed, while the VM runs here
        (not while it is still arriving, or leaving, by a migration); none otherwise."""
        if self._epitaph is None:
            return
        runs_here = self._state in lifecycle.ALIVE and not self.migration_paused
        crashed = lifecycle.domain_status(VmState.DOWN, user_paused=False, down=Reason.CRASHED)
        try:
            self._epitaph.write(self._domain_as(crashed) if runs_here and crashed is not None else "")
        except OSError as e:
            log.warning("cannot write the launcher's epitaph (%s): %s", self._epitaph.path, e.strerror or e)

    def k8s_event(self, type_: str, reason: str, message: str) -> None:
        """A Kubernetes event about the VMI (none before a VMI is known)."""
        vmi = self._vmi
        if vmi is None or self._sink is None:
            return
        try:
            self._sink.send_k8s_event(type=type_, reason=reason, message=message, namespace=vmi.metadata.namespace,
                                      name=vmi.metadata.name, uid=vmi.metadata.uid)
        except Exception:  # a broken sink must not stop the VM's events
            log.exception("could not queue a Kubernetes event for virt-handler")

    def forget(self) -> None:
        """The VM is gone: back to no domain (the grace, panic and migration metadata stay), and
        the final MODIFIED with deletionTimestamp, if there was a VMI to name."""
        vmi = self._vmi
        self._state, self._down = VmState.UNDEFINED, None
        self.user_paused = self.soft_reboot = self.migration_paused = False
        self._agent = GuestAgentView()
        self._domain_json = ""
        self._announced = False
        if vmi is not None:
            view = deleted_domain_view(vmi.metadata.name, vmi.metadata.namespace, vmi.metadata.uid,
                                       now_rfc3339(), panic_count=self._panic_count, panic_info=self._panic_info)
            self._send_domain(domain_json(view), "MODIFIED")
        self._write_epitaph()
        self.forgotten.set()
        self.bump()

    # --- waiting ---------------------------------------------------------------------------------

    def bump(self) -> None:
        """Something changed: wake every `wait_until` to look again."""
        event, self._changed = self._changed, asyncio.Event()
        event.set()

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

    # --- delivery --------------------------------------------------------------------------------

    def _send_domain(self, text: str, kind: str) -> None:
        if self._sink is None:
            return
        try:
            self._sink.send_domain(text, kind)
        except Exception:  # a broken sink must not stop the VM's events
            log.exception("could not queue a domain event for virt-handler")

    async def flush(self, timeout: float) -> bool:
        """Wait until every event sent so far went to virt-handler (or `timeout`); True if so."""
        return True if self._sink is None else await self._sink.flush(timeout)
