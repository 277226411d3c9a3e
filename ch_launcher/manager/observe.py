"""What the domain manager hears from the VMM and what it makes of it: CH's events, a guest panic
(and on_crash=destroy), the VMM's exit, an internal failure only its log tells, and the soft
reboot a guest poweroff becomes. A part of `DomainManager`, kept apart by concern.

The handlers run on the event loop (events, exits) and never raise; what needs the manager's
lock (stopping the VMM after a panic, a soft reboot) runs as a locked background task.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

from ch_launcher import lifecycle
from ch_launcher.kubevirt.domain import GuestPanicInfo, Reason
from ch_launcher.kubevirt.log import log_subcomponent_line
from ch_launcher.lifecycle import ALIVE, VmState
from ch_launcher.manager.settings import CommandFailed
from ch_launcher.manager.view import describe_exit

if TYPE_CHECKING:
    from ch_launcher.ch.events import Event
    from ch_launcher.ch.process import VmmProcess

log = logging.getLogger(__name__)


class VmmObservations:
    """Mixed into DomainManager; uses its `_vm`, `_host`, `_guest`, `_runner`, `_told`, `_seen`,
    `_closed`, the steps (`_ensure_vmm`, `_create`, `_boot`, `_stop_vmm`), `_set_state`,
    `_publish`, `_k8s_event`, `_bump`, `_device_ejected` and the migration hooks."""

    _vm: Any
    _host: Any
    _guest: Any
    _runner: Any
    _told: Any
    _seen: Any
    _closed: bool

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
        if vm.state in ALIVE:
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
        if vmm is None or vm.failure is not None or vm.killing or vm.state not in ALIVE:
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
