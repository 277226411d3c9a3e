"""The supervision of the VMM: what the manager hears from it and makes of it. CH's events, a
guest panic (and on_crash=destroy), the VMM's exit, an internal failure only its log tells, and
the soft reboot a guest poweroff becomes; and forgetting the VM.

It is the host's listener (`VmmHost.listen`). A live migration in progress hears the events first
(`VmmLife.migration`), and the exit too (`VmmLife.gone`).

The event handler runs on the event loop and never raises: an event is an observation, applied at
once. Everything that awaits (handling an exit, stopping the VMM after a panic, a soft reboot's
fresh boot) is work, and goes through the manager's lock (`Runner.background`).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from ch_launcher import lifecycle
from ch_launcher.kubevirt.domain import Reason
from ch_launcher.lifecycle import UP, VmState
from ch_launcher.manager.settings import CommandFailed

if TYPE_CHECKING:
    from ch_launcher.ch.events import Event
    from ch_launcher.manager.boot import Boot
    from ch_launcher.manager.guest import GuestServices
    from ch_launcher.manager.life import VmmLife
    from ch_launcher.manager.reconfig import Reconfiguration
    from ch_launcher.manager.record import DomainRecord
    from ch_launcher.manager.runner import Runner
    from ch_launcher.manager.vmm import VmmHost, VmmSession

log = logging.getLogger(__name__)


class Supervision:
    """Keeps the record in step with the host's VMM (its listener), and boots the VM again for a
    soft reboot (`Boot.boot_again`), under the lock."""

    def __init__(self, record: DomainRecord, host: VmmHost, life: VmmLife, boot: Boot, guest: GuestServices,
                 reconfig: Reconfiguration, runner: Runner) -> None:
        self._record = record
        self._host = host
        self._life = life
        self._boot = boot
        self._guest = guest
        self._reconfig = reconfig
        self._runner = runner
        self.rebooting = False   # the guest shut down for a soft reboot; a fresh VM is on its way
        host.listen(self)

    def between_boots(self) -> bool:
        """A soft reboot is replacing the VMM: the domain stays Running (as libvirt's fake reboot
        keeps QEMU), but there is no guest RAM to look at until the fresh VM has booted."""
        session = self._host.current
        killing = session is not None and session.killing
        return self.rebooting and not killing and self._record.state in UP

    async def forget(self) -> None:
        """The VM is gone: its guest services and swtpm stop, and the domain is withdrawn."""
        await self._guest.stop()
        await self._boot.stop_swtpm()
        self._reconfig.forget()
        self.rebooting = False
        self._record.forget()

    # --- events --------------------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        record, session = self._record, self._host.current
        name = event.name
        log.info("cloud-hypervisor event %s%s", name, f" {json.dumps(event.properties)}" if event.properties else "")
        if session is not None:
            session.heard(name)
        if name in ("virtio-device:activated", "virtio-device:reset") and event.properties:
            self._guest.vsock_event(str(event.properties.get("id", "")), name == "virtio-device:activated")
        elif name in ("vm:booted", "vm:rebooted"):
            self._guest.vm_started()
        migration = self._life.migration
        if migration is not None and migration.on_event(event):
            return
        if session is not None and session.stale(name):
            return  # the answer to our call came first and said so: a late event changes nothing
        killing = session is not None and session.killing
        failure = session.failure if session is not None else None
        crash_destroy = session is not None and session.crash_destroy
        if name == "vm:shutdown":
            if session is not None:
                session.saw_shutdown = True
                self._life.check_failure(session)
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
        self._runner.background("on_crash=destroy", self._destroy_after_panic)

    async def _destroy_after_panic(self) -> None:
        if self._record.state is not VmState.PANICKED:
            return  # reset, killed or deleted meanwhile
        self._record.soft_reboot = False
        if self._host.current is not None:
            self._host.current.crash_destroy = True
        await self._life.stop()

    # --- the VMM's end -------------------------------------------------------------------------

    def on_exit(self, session: VmmSession) -> None:
        self._runner.background("VMM exit", lambda: self._vmm_exited(session))

    async def _vmm_exited(self, session: VmmSession) -> None:
        if await self._life.gone(session):
            await self._reboot_fresh()

    async def _reboot_fresh(self) -> None:
        try:
            await self._boot.boot_again()
        except CommandFailed as e:
            log.error("soft reboot: %s", e)
            self._record.set_state(VmState.DOWN, down=Reason.CRASHED, force=True)
        finally:
            self.rebooting = False
            self._record.bump()
