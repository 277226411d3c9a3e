"""The supervision of the VMM: what the manager hears from it and makes of it. CH's events, a
guest panic (and on_crash=destroy), the VMM's exit, an internal failure only its log tells, and
the soft reboot a guest poweroff becomes; and stopping the VMM, whose exit it then handles.

A live migration in progress hears the events and the exit first (`MigrationSlot`).

The handlers run on the event loop (events, exits) and never raise; what needs the manager's
lock (stopping the VMM after a panic, a soft reboot's fresh boot) runs as a locked background
task.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ch_launcher import lifecycle
from ch_launcher.kubevirt.domain import Reason
from ch_launcher.kubevirt.log import log_subcomponent_line
from ch_launcher.lifecycle import ALIVE, UP, VmState
from ch_launcher.manager.settings import CommandFailed
from ch_launcher.manager.view import describe_exit

if TYPE_CHECKING:
    from ch_launcher.ch.events import Event
    from ch_launcher.manager.guest import GuestServices
    from ch_launcher.manager.migration_port import Migration
    from ch_launcher.manager.reconfig import Reconfiguration
    from ch_launcher.manager.record import DomainRecord
    from ch_launcher.manager.runner import Runner
    from ch_launcher.manager.vmm import VmmHost, VmmSession

log = logging.getLogger(__name__)


class MigrationSlot:
    """The live migration of this VM, one at a time (`migration_source.Outgoing` or
    `migration_target.Incoming`, from the moment one begins): it hears the VMM's events and exit
    before the supervision does, and gives the stats their job info."""

    def __init__(self) -> None:
        self.current: Migration | None = None

    def begin(self, migration: Migration) -> None:
        self.current = migration

    def on_event(self, event: Event) -> bool:
        """True when the migration consumed the event."""
        return self.current is not None and self.current.on_event(event)

    def on_vmm_exit(self, code: int | None) -> None:
        if self.current is not None:
            self.current.on_vmm_exit(code)

    def job_info(self) -> dict[str, Any] | None:
        """`MigrateDomainJobInfo` of the outgoing migration in progress (None: none)."""
        return self.current.job_info() if self.current is not None else None

    async def close(self) -> None:
        if self.current is not None:
            await self.current.close()


class Supervision:
    """Keeps the record in step with the host's VMM. `boot_again` is the boot's fresh start
    of a soft reboot (`Boot.boot_again`), run under the lock."""

    def __init__(self, record: DomainRecord, host: VmmHost, guest: GuestServices, reconfig: Reconfiguration,
                 runner: Runner, migration: MigrationSlot, boot_again: Callable[[], Awaitable[None]]) -> None:
        self._record = record
        self._host = host
        self._guest = guest
        self._reconfig = reconfig
        self._runner = runner
        self._migration = migration
        self._boot_again = boot_again
        self.rebooting = False   # the guest shut down for a soft reboot; a fresh VM is on its way
        self._closing = False

    def between_boots(self) -> bool:
        """A soft reboot is replacing the VMM: the domain stays Running (as libvirt's fake reboot
        keeps QEMU), but there is no guest RAM to look at until the fresh VM has booted."""
        session = self._host.current
        killing = session is not None and session.killing
        return self.rebooting and not killing and self._record.state in UP

    def forget(self) -> None:
        self.rebooting = False

    def close(self) -> None:
        """The manager is closing: its VMM's exit is the launcher's doing, not news."""
        self._closing = True
        if self._host.current is not None:
            self._host.current.killing = True

    # --- events --------------------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        record, session = self._record, self._host.current
        name = event.name
        log.info("cloud-hypervisor event %s%s", name, f" {json.dumps(event.properties)}" if event.properties else "")
        if session is not None:
            session.heard(name)
        if self._migration.on_event(event):
            return
        if session is not None and session.stale(name):
            return  # the answer to our call came first and said so: a late event changes nothing
        killing = session is not None and session.killing
        failure = session.failure if session is not None else None
        crash_destroy = session is not None and session.crash_destroy
        if name == "vm:shutdown":
            if session is not None:
                session.saw_shutdown = True
                self._check_failure(session)
                failure = session.failure
            if record.soft_reboot and not killing and failure is None:
                self.rebooting = True
                return  # the exit handler boots the VM again
        new = lifecycle.state_after_event(record.state, name, event.properties)
        if name == "vm:booted":
            return  # every boot is ours: Boot.boot publishes once vm.boot has returned
        if name == "guest:panic":
            self._guest_panicked(new)
            return
        if new is not None or name in lifecycle.NOTIFY_EVENTS:
            down = record.down if new is not VmState.DOWN else lifecycle.down_reason(
                saw_shutdown=True, killing=killing, state=record.state, vmm_failed=failure is not None,
                crash_destroy=crash_destroy)
            record.set_state(new or record.state, down=down, force=name in lifecycle.NOTIFY_EVENTS)
        if name == "vm:rebooted":
            self._guest.attach_console()
            self._reconfig.rebuilt()  # rebuilt from its config, which has no disk being removed
        if name == "vm:device-removed" and event.properties:
            self._reconfig.device_ejected(str(event.properties.get("id", "")))

    def _guest_panicked(self, new: VmState | None) -> None:
        """pvpanic, as virt-launcher reports a libvirt CRASHED event (kubevirt
        `pkg/virt-launcher/notify-client/client.go` `handleGuestPanicEvent`@d923fdb815cd):
        PanicCount + 1, GuestPanicInfo (no details: `Type: "unknown"`), a `GuestPanicked` Warning.
        A panic (`new` is PANICKED) is Crashed/Panicked, and then, as libvirt's on_crash=destroy
        stops QEMU, the VMM is stopped and the Domain reads Shutoff/Crashed. A kdump kernel taking
        over (`crash_loaded`) leaves the VM running."""
        record = self._record
        if record.state not in UP:
            return  # a straggler, or a second report of the same panic (virt-launcher handles one)
        record.note_panic()
        record.k8s_event("Warning", "GuestPanicked", "GuestPanicked (details unavailable)")
        if new is not VmState.PANICKED:
            record.publish(force=True)
            return
        log.warning("the guest panicked; stopping cloud-hypervisor, as libvirt's on_crash=destroy stops QEMU")
        record.set_state(VmState.PANICKED, force=True)
        self._runner.background(self._runner.locked("on_crash=destroy", self._destroy_after_panic))

    async def _destroy_after_panic(self) -> None:
        if self._record.state is not VmState.PANICKED:
            return  # reset, killed or deleted meanwhile
        self._record.soft_reboot = False
        if self._host.current is not None:
            self._host.current.crash_destroy = True
        await self.stop_vmm()

    # --- the VMM's end -------------------------------------------------------------------------

    async def stop_vmm(self) -> None:
        """Stop the current VMM (vmm.shutdown, SIGTERM, SIGKILL) and handle its exit."""
        session = self._host.current
        if session is None:
            return
        session.killing = True
        timeout = self._host.settings.stop_timeout
        await session.terminate(timeout, timeout)
        await self.vmm_gone(session)

    def on_exit(self, session: VmmSession) -> None:
        self._runner.background(self.vmm_gone(session))

    async def vmm_gone(self, session: VmmSession) -> None:
        """The VMM exited (or was stopped): reap it, read its last events, update the Domain.
        Idempotent per VMM."""
        code = session.process.poll()
        if code is None:  # another thread is reaping it (terminate): wait for that
            code = await asyncio.to_thread(session.process.wait, 30.0)
        if session is not self._host.current:
            return
        self._host.read_events()
        self._migration.on_vmm_exit(code)
        self._host.release(session)
        record = self._record
        how = describe_exit(code)
        self._check_failure(session)  # its vm:shutdown may have been lost
        # exit 0 is an orderly shutdown even when CH's event thread had no time to write vm:shutdown
        guest_shut_down = session.saw_shutdown or code == 0
        if (record.soft_reboot and guest_shut_down and not session.killing and session.failure is None
                and record.state in UP):
            log.info("the guest shut down for a soft reboot; booting it again")
            record.soft_reboot = False
            self._runner.background(self._runner.locked("SoftReboot", self._reboot_fresh))
            return
        if record.state in ALIVE:
            down = lifecycle.down_reason(saw_shutdown=session.saw_shutdown, killing=session.killing,
                                         state=record.state, exit_code=code, vmm_failed=session.failure is not None,
                                         crash_destroy=session.crash_destroy)
            record.set_state(VmState.DOWN, down=down, force=True)
            if down in (Reason.CRASHED, Reason.PANICKED) and session.failure is None and not session.crash_destroy:
                message = f"cloud-hypervisor (pid {session.pid}) {how} while the VM was running"
                log.error("%s", message)
                for line in session.process.log_tail(5).splitlines():  # its last words, as virt-launcher logs QEMU's
                    log_subcomponent_line(log, "cloud-hypervisor", line)
                record.k8s_event("Warning", "VMMCrashed", message)
        elif record.state is not VmState.DOWN and not session.killing and not self._closing:
            # No VM ran on it (a VM that stopped has announced vm:shutdown and is DOWN already).
            log.warning("cloud-hypervisor (pid %d) %s with no VM running", session.pid, how)
        if record.state is VmState.DOWN:
            log.info("VM is down: %s", record.down.value if record.down else "?")
        record.bump()

    def _check_failure(self, session: VmmSession) -> None:
        """While the VM is up and not being stopped by us: did the VMM stop it on an internal
        failure (a vCPU error, a thread that panicked)? CH then says `vm:shutdown` and exits 0 as
        after a guest poweroff; only its log tells (ch.vmmlog). Once per VMM: logged, and a
        Warning event as for a VMM crash."""
        if session.failure is not None or session.killing or self._record.state not in ALIVE:
            return
        failure = session.process.failure()
        if failure is None:
            return
        session.failure = failure
        message = f"cloud-hypervisor (pid {session.pid}) stopped the VM on an internal failure: {failure}"
        log.error("%s", message)
        self._record.k8s_event("Warning", "VMMCrashed", message)

    async def _reboot_fresh(self) -> None:
        try:
            await self._boot_again()
        except CommandFailed as e:
            log.error("soft reboot: %s", e)
            self._record.set_state(VmState.DOWN, down=Reason.CRASHED, force=True)
        finally:
            self.rebooting = False
            self._record.bump()
