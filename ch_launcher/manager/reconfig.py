"""The reconfiguration of a running VM: what a Sync changes of its devices (volume and interface
hotplug, PVC expansion: `manager.devices`), vCPU and memory resize (`manager.resize`), and
devices leaving the VM once the guest has ejected them. The modules doing the work are imported
on first use, so a VM that never changes never loads them.

Runs under the manager's lock like every command (a Sync's step, the resize RPCs, or work it
starts through `Runner.background`: DHCP again after a NIC left); raises CommandFailed with the
in-band message. The plan (the record's) is edited in place and the
record publishes the Domain that shows it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from ch_launcher import lifecycle
from ch_launcher.lifecycle import UP, VmState
from ch_launcher.manager import features
from ch_launcher.manager.settings import CommandFailed

if TYPE_CHECKING:
    from ch_launcher.convert import LauncherOptions, Plan
    from ch_launcher.kubevirt.vmi import VirtualMachineInstance
    from ch_launcher.manager.guest import GuestServices
    from ch_launcher.manager.planner import Planner
    from ch_launcher.manager.record import DomainRecord
    from ch_launcher.manager.runner import Runner
    from ch_launcher.manager.vmm import VmmHost, VmmSession

log = logging.getLogger(__name__)


def device_facts(vmi: VirtualMachineInstance) -> tuple[object, ...]:
    """What a Sync's device work depends on: when it is what the VM was last brought to (at
    boot, or by the last Sync), there is nothing to do and nothing is imported."""
    return (vmi.spec.domain.devices.disks, vmi.spec.volumes, vmi.status.volumeStatus,
            vmi.spec.domain.devices.interfaces, vmi.spec.networks, vmi.status.interfaces)


class Reconfiguration:
    """Changes to the running VM: a change is the difference between the running plan and the new
    VMI's translation (`planner`)."""

    def __init__(self, record: DomainRecord, host: VmmHost, guest: GuestServices, runner: Runner,
                 planner: Planner) -> None:
        self._record = record
        self._host = host
        self._guest = guest
        self._runner = runner
        self._planner = planner
        self.removing: set[str] = set()   # devices detached, not yet ejected by the guest
        self._devices_seen: tuple[object, ...] | None = None  # the VMI device facts the VM was last brought to

    # --- what manager.devices works with (its LiveVm) --------------------------------------------

    @property
    def plan(self) -> Plan:
        plan = self._record.plan
        assert plan is not None
        return plan

    @property
    def session(self) -> VmmSession | None:
        return self._host.current

    async def translate(self, vmi: VirtualMachineInstance, options: LauncherOptions | None) -> Plan:
        return await self._planner.translate(vmi, options)

    async def restart_dhcp(self, plan: Plan) -> None:
        await self._guest.restart_dhcp(plan, self._record.vmi)

    def publish(self) -> None:
        self._record.publish()

    # --- a Sync --------------------------------------------------------------------------------

    def booting_with(self, vmi: VirtualMachineInstance) -> None:
        """The VM is made (booted or received) from `vmi`'s devices: no device work until they change."""
        self._devices_seen = device_facts(vmi)

    async def sync(self, vmi: VirtualMachineInstance, options: LauncherOptions | None) -> None:
        """A Sync of a running VM: hotplug and PVC expansion (`manager.devices`, imported here:
        only when the VMI's devices changed), and the guest's current memory after a resize."""
        devices = device_facts(vmi)
        if devices != self._devices_seen:
            settled = await features.devices.sync(self, vmi, options)
            self._devices_seen = devices if settled else None
        session = self._host.current
        if self._record.current_memory is not None and session is not None:
            await self.refresh_memory(session)

    # --- SyncVirtualMachineCPUs, SyncVirtualMachineMemory ----------------------------------------

    async def resize(self, what: str, vmi: VirtualMachineInstance, options: LauncherOptions | None) -> str:
        """Resize the running VM to what `vmi` asks: `what` is "vcpus" or "memory"."""
        api, resize = features.api, features.resize
        plan, session = self._record.plan, self._host.current
        if plan is None or session is None or self._record.state not in UP:
            raise CommandFailed(lifecycle.NOT_RUNNING)
        wanted = await self._planner.translate(vmi, options)
        if what == "vcpus":
            assert plan.config.cpus is not None
            count = resize.desired_vcpus(plan, wanted)
            before = plan.config.cpus.boot_vcpus
            for attempt in range(resize.VCPU_RETRIES + 1):
                try:
                    await session.call(session.client.resize, desired_vcpus=count)
                    break
                except api.Conflict as e:  # 429: the guest is still offlining vCPUs of an earlier resize
                    if e.status != 429 or attempt == resize.VCPU_RETRIES:
                        raise CommandFailed(f"failed to update vCPUs: {e}") from None
                    await asyncio.sleep(resize.VCPU_RETRY_DELAY)
                except api.ChApiError as e:
                    raise CommandFailed(f"failed to update vCPUs: {e}") from None
            plan.config.cpus.boot_vcpus = count
            self._record.publish()
            if count < before:
                await self._wait_for_vcpu_removal(session, count, before)
            return f"{count} vCPUs"
        ram = resize.desired_ram(plan, wanted)
        memory = plan.config.memory
        assert memory is not None
        if ram - memory.size != (memory.hotplugged_size or 0):
            try:
                await session.call(session.client.resize, desired_ram=ram)
            except api.ChApiError as e:
                raise CommandFailed(f"failed to update Guest Memory: {e}") from None
            memory.hotplugged_size = (ram - memory.size) or None
        self._runner.watch("memory resize", self._follow_memory(session))
        return f"{ram} bytes of memory"

    async def _wait_for_vcpu_removal(self, session: VmmSession, count: int, before: int) -> None:
        """Until the guest has offlined the removed vCPUs, as libvirt waits for a vCPU unplug
        (up to 5 s, then an error). Until then Cloud Hypervisor still counts them as present: a
        resize to `count` is refused with 429 while they are (and is a no-op once they are
        gone), which is how the end is seen; a resize to the count still present would be taken
        as nothing to do and leave the VM short once the removal completes. CommandFailed when
        the guest has not completed it in time: the removal stays pending."""
        api, resize = features.api, features.resize
        loop = asyncio.get_running_loop()
        deadline = loop.time() + resize.VCPU_REMOVAL_TIMEOUT
        while True:
            try:
                await session.call(session.client.resize, desired_vcpus=count)
                return
            except api.Conflict as e:
                if e.status != 429:
                    raise CommandFailed(f"failed to update vCPUs: {e}") from None
            except api.ChApiError as e:
                raise CommandFailed(f"failed to update vCPUs: {e}") from None
            if loop.time() >= deadline:
                raise CommandFailed(f"vCPU unplug request timed out: the guest has not offlined vCPUs {count} to "
                                    f"{before - 1} within {resize.VCPU_REMOVAL_TIMEOUT:.0f} s; the removal stays "
                                    "pending, and Cloud Hypervisor refuses other vCPU changes until the guest "
                                    "completes it")
            await asyncio.sleep(resize.VCPU_RETRY_DELAY * 5)

    async def _follow_memory(self, session: VmmSession, period: float = 0.5, rounds: int = 20) -> None:
        """Read `memory_actual_size` for a while after a memory resize: the guest's virtio-mem
        driver plugs at its own pace and the Domain's CurrentMemory (virt-handler's
        status.memory.guestCurrent) must follow. Each reading takes the lock; the waits between
        them do not. Bounded: also refreshed on every Sync."""
        for _ in range(rounds):
            if not await self._runner.locked("memory resize", lambda: self.refresh_memory(session)):
                return
            plan = self._record.plan
            memory = plan.config.memory if plan is not None else None
            if memory is not None and self._record.current_memory == memory.size + (memory.hotplugged_size or 0):
                return
            await asyncio.sleep(period)

    async def refresh_memory(self, session: VmmSession) -> bool:
        """Take `memory_actual_size` from vm.info into the Domain; False when the VMM is gone."""
        api = features.api
        if session is not self._host.current:
            return False
        try:
            info = await session.call(session.client.info)
        except api.ChApiError:
            return False
        if info.memory_actual_size is not None and info.memory_actual_size != self._record.current_memory:
            self._record.current_memory = info.memory_actual_size
            self._record.publish()
        return True

    # --- devices leaving -----------------------------------------------------------------------

    def device_ejected(self, name: str) -> None:
        """`vm:device-removed`, or a VM rebuilt from a config that no longer has the device (a
        disk or a NIC): it leaves the Domain."""
        plan = self._record.plan
        self.removing.discard(name)
        if plan is None:
            return
        before = (len(plan.disks), len(plan.interfaces))
        plan.disks = [d for d in plan.disks if d.alias != name]
        plan.hotplug_disks.discard(name)
        plan.disk_sizing.pop(name, None)
        plan.interfaces = [i for i in plan.interfaces if i.alias != name]
        plan.config.net = [n for n in plan.config.net or () if n.id != name] or None
        dhcp = [d for d in plan.dhcp if d.interface != name]
        if len(dhcp) != len(plan.dhcp):
            plan.dhcp = dhcp
            # no server on its bridge any more: after what holds the lock now, for the VM it is then
            self._runner.background("DHCP restart", lambda: self._restart_dhcp_quietly(plan))
        if (len(plan.disks), len(plan.interfaces)) != before:
            log.info("%s %s is gone from the VM", "the disk of volume" if len(plan.disks) != before[0]
                     else "interface", name)
            self._record.publish(force=True)

    def rebuilt(self) -> None:
        """A VM made afresh from its config (a boot, a guest reboot), which has no device being removed."""
        for name in list(self.removing):
            self.device_ejected(name)

    def forget(self) -> None:
        self.removing.clear()

    async def _restart_dhcp_quietly(self, plan: Plan) -> None:
        if self._record.plan is not plan or self._record.state is VmState.UNDEFINED:
            return  # the VM was forgotten, or made afresh, meanwhile: its servers are another's business
        try:
            await self._guest.restart_dhcp(plan, self._record.vmi)
        except CommandFailed as e:
            log.error("%s", e)
