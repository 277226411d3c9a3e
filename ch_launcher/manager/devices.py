"""The devices of a running VM, as a later Sync changes them: disks of hotplugged volumes
(`hotplug`), interfaces (`nics`) and the size of PVC-backed disks (`expand`).

Imported on first use (a Sync whose VMI devices changed), never by a launcher that does not
need it. `sync` runs under the manager's lock, as part of its Sync, on the running VM as the
reconfiguration gives it (`LiveVm`, which `manager.reconfig.Reconfiguration` is).

Order, as virt-launcher's SyncVMI: disks are detached and attached, then interfaces attached
and detached (pkg/virt-launcher/virtwrap/manager.go and network/nichotplug.go@d923fdb815cd),
then disks resized. Each removal leaves the Domain only once the guest has ejected the device
(`vm:device-removed`, `Reconfiguration.device_ejected`).

Failure behaviour: a device Cloud Hypervisor refuses to add or remove fails the Sync with a
CommandFailed naming it (virt-handler retries); a refused resize is only logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from ch_launcher.ch.api import ChApiError
from ch_launcher.manager import expand, hotplug, nics
from ch_launcher.manager.settings import CommandFailed

if TYPE_CHECKING:
    from ch_launcher.convert import LauncherOptions, Plan
    from ch_launcher.kubevirt.vmi import VirtualMachineInstance
    from ch_launcher.manager.vmm import VmmSession

log = logging.getLogger(__name__)


class LiveVm(Protocol):
    """The running VM whose devices change: its plan (edited in place, then `publish`), its VMM
    (None: gone), the devices being removed, a translation of the new VMI, and DHCP."""

    removing: set[str]  # detached, not yet ejected by the guest

    @property
    def plan(self) -> Plan: ...

    @property
    def session(self) -> VmmSession | None: ...

    async def translate(self, vmi: VirtualMachineInstance, options: LauncherOptions | None) -> Plan: ...

    async def restart_dhcp(self, plan: Plan) -> None:
        """Serve `plan.dhcp` as it is now; raises CommandFailed."""

    def publish(self) -> None: ...


async def sync(live: LiveVm, vmi: VirtualMachineInstance, options: LauncherOptions | None) -> bool:
    """Bring the running VM's devices to what `vmi` asks. Returns False when something is still
    to do at a later Sync (a volume not mounted yet, a resize refused). Raises CommandFailed."""
    plan = live.plan
    wanted = await live.translate(nics.reachable(vmi, plan), options)
    disk_changes = hotplug.plan_changes(plan, wanted, live.removing)
    nic_changes = nics.plan_changes(plan, wanted, vmi, live.removing)
    settled = await _disks(live, plan, wanted, disk_changes)
    await _nics(live, plan, nic_changes)
    if not await _expand(live, plan, wanted):
        settled = False
    if disk_changes or nic_changes:
        live.publish()
    return settled


async def _disks(live: LiveVm, plan: Plan, wanted: Plan, changes: hotplug.DiskChanges) -> bool:
    vmm = live.session
    settled = True
    for name in changes.detach:
        if vmm is None:
            break
        await _remove(live, vmm, name, f"the disk of volume {name}")
        plan.config.disks = [d for d in plan.config.disks or () if d.id != name] or None
    for config, planned in changes.attach:
        if vmm is None:
            break
        if not await asyncio.to_thread(hotplug.ready_to_attach, config):
            log.info("the volume of disk %s is not ready in the pod yet (%s); trying again at the next Sync",
                     config.id, config.path)
            settled = False
            continue
        try:
            await vmm.call(vmm.client.add_disk, config)
        except ChApiError as e:
            raise CommandFailed(f"attaching the disk of volume {config.id} failed: {e}") from None
        view = replace(planned, target_dev=hotplug.free_target(plan.disks))
        plan.disks.append(view)
        plan.config.disks = [*(plan.config.disks or ()), config]
        plan.hotplug_disks.add(config.id or view.alias)
        if view.alias in wanted.disk_sizing:
            plan.disk_sizing[view.alias] = wanted.disk_sizing[view.alias]
        log.info("attached the disk of volume %s as %s", view.alias, view.target_dev)
    return settled


async def _nics(live: LiveVm, plan: Plan, changes: nics.NicChanges) -> None:
    vmm = live.session
    servers = [dhcp for _, _, dhcp in changes.attach
               if dhcp is not None and all(d.interface != dhcp.interface for d in plan.dhcp)]
    if servers:  # phase 2 first, as virt-launcher: the guest may ask as soon as it sees the NIC
        plan.dhcp.extend(servers)
        try:
            await live.restart_dhcp(plan)
        except CommandFailed:  # the NICs the VM has keep their leases; the Sync fails, to be retried
            plan.dhcp = [d for d in plan.dhcp if d not in servers]
            with contextlib.suppress(CommandFailed):
                await live.restart_dhcp(plan)
            raise
    for config, view, _ in changes.attach:
        if vmm is None:
            break
        try:
            await vmm.call(vmm.client.add_net, config)
        except ChApiError as e:
            raise CommandFailed(f"attaching interface {view.alias} (tap {config.tap}) failed: {e}") from None
        plan.interfaces.append(view)
        plan.config.net = [*(plan.config.net or ()), config]
        log.info("attached interface %s on tap %s with MAC %s", view.alias, config.tap, view.mac)
    for name in changes.detach:
        if vmm is None:
            break
        await _remove(live, vmm, name, f"interface {name}")
        plan.config.net = [n for n in plan.config.net or () if n.id != name] or None


async def _remove(live: LiveVm, vmm: VmmSession, name: str, what: str) -> None:
    """`vm.remove-device` of `name`, marked as being removed before the call: the real VMM
    writes `vm:device-removed` from the vCPU thread the guest ejects on, which may be before
    its answer (the tiny guest, like Linux, ejects at once). Marked only after the answer, a
    device the guest had already ejected would stay "being removed" forever, and a later Sync
    would never attach it again. Raises CommandFailed (the mark undone) when CH refuses."""
    live.removing.add(name)
    try:
        await vmm.call(vmm.client.remove_device, name)
    except ChApiError as e:
        live.removing.discard(name)
        raise CommandFailed(f"detaching {what} failed: {e}") from None
    if name in live.removing:
        log.info("detaching %s; it leaves the Domain once the guest ejects it", what)
    else:
        log.info("detached %s; the guest ejected it at once", what)


async def _expand(live: LiveVm, plan: Plan, wanted: Plan) -> bool:
    """Resize the disks whose claims grew (`expand`): `vm.resize-disk`. A resize Cloud
    Hypervisor refuses is logged, as virt-launcher logs a failed BlockResize, and the Sync goes
    on; False then (and when a size could not be read), so a later Sync tries again."""
    vmm = live.session
    settled = True
    for name, size in (await asyncio.to_thread(expand.resizes, plan, wanted)).items():
        if size is not None:
            if vmm is None:
                return False
            try:
                await vmm.call(vmm.client.resize_disk, name, size)
            except ChApiError as e:
                log.error("failed to expand disk %s to %d bytes: %s", name, size, e)
                settled = False
                continue
            log.info("expanded disk %s to %d bytes; the guest sees the new size", name, size)
        plan.disk_sizing[name] = wanted.disk_sizing[name]
    return settled and all(wanted.disk_sizing.get(n) == s for n, s in plan.disk_sizing.items()
                           if n in wanted.disk_sizing)
