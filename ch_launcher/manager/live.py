"""What changes on a running VM: volume and interface hotplug and PVC expansion (`devices`, with
`hotplug`, `nics`, `expand`), vCPU and memory resize (`resize`). A part of `DomainManager`, kept
apart because it is only needed when a VM changes; the modules doing the work are imported on
first use.

Runs under the manager's lock like every command (the methods are called from `_run` steps or
through `Runner.run`); raises CommandFailed with the in-band message.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from ch_launcher import lifecycle
from ch_launcher.lifecycle import VmState
from ch_launcher.manager import features
from ch_launcher.manager.runner import NotStarted, StillRunning
from ch_launcher.manager.settings import CommandFailed

if TYPE_CHECKING:
    from ch_launcher.ch.process import VmmProcess
    from ch_launcher.convert import LauncherOptions
    from ch_launcher.kubevirt.vmi import VirtualMachineInstance

log = logging.getLogger(__name__)


def device_facts(vmi: VirtualMachineInstance) -> tuple[Any, ...]:
    """What a Sync's device work depends on: when it is what the VM was last brought to (at
    boot, or by the last Sync), there is nothing to do and nothing is imported."""
    return (vmi.spec.domain.devices.disks, vmi.spec.volumes, vmi.status.volumeStatus,
            vmi.spec.domain.devices.interfaces, vmi.spec.networks, vmi.status.interfaces)


class LiveChanges:
    """Mixed into DomainManager; uses its `_plan`, `_vmi`, `_host`, `_vm`, `_runner`, `_guest`,
    `_api`, `_translate`, `_publish`, `_complete_metadata` and `_options`."""

    _plan: Any
    _vmi: Any
    _host: Any
    _vm: Any
    _runner: Any
    _guest: Any
    _options: Any
    _devices_seen: Any
    _current_memory: int | None

    async def resize(self, what: str, vmi: VirtualMachineInstance, options: LauncherOptions | None = None, *,
                     budget: float = 18.0) -> str:
        """SyncVirtualMachineCPUs (`what` = "vcpus") or SyncVirtualMachineMemory ("memory"):
        resize the running VM to what `vmi` asks (`manager.resize`). Raises CommandFailed."""
        name = "SyncVirtualMachineCPUs" if what == "vcpus" else "SyncVirtualMachineMemory"
        try:
            return await self._runner.run(name, lambda: self._resize(what, self._complete_metadata(vmi), options),
                                          budget, lambda e: log.error("%s failed in the background: %s", name, e)
                                          if e is not None else None)
        except NotStarted as busy:
            raise CommandFailed(f"the launcher is busy with {busy}; {name} was not started, try again") from None
        except StillRunning:
            raise CommandFailed(f"{name} is still in progress after {budget:.0f} s") from None

    async def _resize(self, what: str, vmi: VirtualMachineInstance, options: LauncherOptions | None) -> str:
        api, resize = features.api, features.resize
        plan, vmm = self._plan, self._host.current
        if plan is None or vmm is None or self._vm.state not in (VmState.RUNNING, VmState.PAUSED):
            raise CommandFailed(lifecycle.NOT_RUNNING)
        wanted = await self._translate(vmi, options or self._options or self._default_options())
        if what == "vcpus":
            assert plan.config.cpus is not None
            count = resize.desired_vcpus(plan, wanted)
            before = plan.config.cpus.boot_vcpus
            for attempt in range(resize.VCPU_RETRIES + 1):
                try:
                    await self._api(vmm.client.resize, desired_vcpus=count)
                    break
                except api.Conflict as e:  # 429: the guest is still offlining vCPUs of an earlier resize
                    if e.status != 429 or attempt == resize.VCPU_RETRIES:
                        raise CommandFailed(f"failed to update vCPUs: {e}") from None
                    await asyncio.sleep(resize.VCPU_RETRY_DELAY)
                except api.ChApiError as e:
                    raise CommandFailed(f"failed to update vCPUs: {e}") from None
            plan.config.cpus.boot_vcpus = count
            self._publish()
            if count < before:
                await self._wait_for_vcpu_removal(vmm, count, before)
            return f"{count} vCPUs"
        ram = resize.desired_ram(plan, wanted)
        memory = plan.config.memory
        assert memory is not None
        if ram - memory.size != (memory.hotplugged_size or 0):
            try:
                await self._api(vmm.client.resize, desired_ram=ram)
            except api.ChApiError as e:
                raise CommandFailed(f"failed to update Guest Memory: {e}") from None
            memory.hotplugged_size = (ram - memory.size) or None
        self._runner.background(self._follow_memory(vmm))
        return f"{ram} bytes of memory"

    async def _wait_for_vcpu_removal(self, vmm: VmmProcess, count: int, before: int) -> None:
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
                await self._api(vmm.client.resize, desired_vcpus=count)
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

    async def _follow_memory(self, vmm: VmmProcess, period: float = 0.5, rounds: int = 20) -> None:
        """Read `memory_actual_size` for a while after a memory resize: the guest's virtio-mem
        driver plugs at its own pace and the Domain's CurrentMemory (virt-handler's
        status.memory.guestCurrent) must follow. Bounded: also refreshed on every Sync."""
        for _ in range(rounds):
            if not await self._refresh_memory(vmm):
                return
            plan = self._plan
            memory = plan.config.memory if plan is not None else None
            if memory is not None and self._current_memory == memory.size + (memory.hotplugged_size or 0):
                return
            await asyncio.sleep(period)

    async def _refresh_memory(self, vmm: VmmProcess) -> bool:
        """Take `memory_actual_size` from vm.info into the Domain; False when the VMM is gone."""
        api = features.api
        if vmm is not self._host.current:
            return False
        try:
            info = await self._api(vmm.client.info)
        except api.ChApiError:
            return False
        if info.memory_actual_size is not None and info.memory_actual_size != self._current_memory:
            self._current_memory = info.memory_actual_size
            self._publish()
        return True

    async def _sync_devices(self, vmi: VirtualMachineInstance, options: LauncherOptions | None) -> None:
        """A Sync of a running VM: hotplug and PVC expansion (`manager.devices`, imported here:
        only when the VMI's devices changed)."""
        devices = device_facts(vmi)
        if devices == self._devices_seen:
            return
        live_devices = features.devices
        settled = await live_devices.sync(self, vmi, options or self._options or self._default_options())
        self._devices_seen = devices if settled else None

    def _device_ejected(self, name: str) -> None:
        """`vm:device-removed`, or a VM rebuilt from a config that no longer has the device (a
        disk or a NIC): it leaves the Domain."""
        plan = self._plan
        self._vm.removing.discard(name)
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
            self._runner.background(self._restart_dhcp_quietly(plan))  # no server on its bridge any more
        if (len(plan.disks), len(plan.interfaces)) != before:
            log.info("%s %s is gone from the VM", "the disk of volume" if len(plan.disks) != before[0]
                     else "interface", name)
            self._publish(force=True)

    async def _restart_dhcp_quietly(self, plan: Any) -> None:
        try:
            await self._guest.restart_dhcp(plan, self._vmi)
        except CommandFailed as e:
            log.error("%s", e)

    def _default_options(self) -> LauncherOptions:
        return features.convert.LauncherOptions()

