"""Volume hotplug on a running VM: what a later Sync attaches and detaches, and how.

Imported on first use (a VMI whose Sync changes devices), never by a launcher that does not
need it.

virt-launcher's `syncDisks` (kubevirt `pkg/virt-launcher/virtwrap/manager.go@d923fdb815cd`)
compares the disks of hotplugged volumes in the freshly converted domain with the running one:
a new one whose file opens is attached (`checkIfDiskReadyToUse`: a file must open read-write,
a device node read-only; one that does not open yet is skipped and tried at the next Sync), one
gone from the VMI is detached. Disks present at boot never change. Here the VMI is translated
again (the same pure translator) and the difference becomes `vm.add-disk` /
`vm.remove-device`.

What the Domain shows follows what virt-handler needs: an attached disk appears with its
`Alias` (the disk name), `Target.Device` (the name the guest gives it: Linux's virtio-blk takes
the lowest free `vdX`) and `Source`; virt-handler then marks the volume Ready. A detached disk
stays in the Domain until Cloud Hypervisor reports `vm:device-removed` (the guest has ejected
it, cloud-hypervisor `vmm/src/device_manager.rs@v53.0` `eject_device`), because until then the
VMM still has the image open and virt-handler must not unmount it; libvirt keeps a device in
the domain XML until `DEVICE_DELETED` the same way. A guest that never ejects keeps it there.

Failure behaviour: `plan_changes` raises CommandFailed naming the field when a disk that is not
a hotplugged volume appeared or vanished (the VMI spec does not change otherwise).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ch_launcher.convert.storage import device_name
from ch_launcher.manager.settings import CommandFailed

if TYPE_CHECKING:
    from ch_launcher.ch.vmconfig import DiskConfig
    from ch_launcher.convert import Plan
    from ch_launcher.kubevirt.domain import DomainDisk


@dataclass
class DiskChanges:
    """What to do to the running VM: disks to attach (config, Domain view), names to detach."""

    attach: list[tuple[DiskConfig, DomainDisk]] = field(default_factory=list)
    detach: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.attach or self.detach)


def plan_changes(live: Plan, wanted: Plan, removing: set[str]) -> DiskChanges:
    """The hotplug work that turns the running VM (`live`, what the Domain shows) into `wanted`
    (the new VMI's plan). `removing`: disks whose removal is under way (neither re-attached nor
    detached again until the guest has ejected them)."""
    cold_live = [d.alias for d in live.disks if d.alias not in live.hotplug_disks]
    cold_wanted = [d.alias for d in wanted.disks if d.alias not in wanted.hotplug_disks]
    if sorted(cold_live) != sorted(cold_wanted):
        added = sorted(set(cold_wanted) - set(cold_live))
        gone = sorted(set(cold_live) - set(cold_wanted))
        change = ", ".join(filter(None, (f"added {added}" if added else "", f"removed {gone}" if gone else "")))
        raise CommandFailed(f"spec.domain.devices.disks changed on a running VM ({change}): only disks of "
                            "hotpluggable volumes can be attached or detached while it runs")
    changes = DiskChanges()
    configs = {d.id: d for d in wanted.config.disks or ()}
    views = {d.alias: d for d in wanted.disks}
    for name in sorted(wanted.hotplug_disks - live.hotplug_disks - removing):
        if name in configs and name in views:
            changes.attach.append((configs[name], views[name]))
    changes.detach = sorted(live.hotplug_disks - wanted.hotplug_disks - removing)
    return changes


def ready_to_attach(config: DiskConfig) -> bool:
    """virt-launcher's `checkIfDiskReadyToUse`: the volume is there and opens (a device node
    read-only, a file read-write, or read-only for a read-only disk)."""
    path = config.path or ""
    try:
        st = os.stat(path)
    except OSError:
        return False
    flags = os.O_RDONLY if stat.S_ISBLK(st.st_mode) or config.readonly else os.O_RDWR
    try:
        os.close(os.open(path, flags | os.O_CLOEXEC))
    except OSError:
        return False
    return True


def free_target(disks: list[DomainDisk]) -> str:
    """The lowest `vdX` no disk of the VM uses: the name Linux gives a newly found virtio disk."""
    used = {d.target_dev for d in disks}
    n = 0
    while device_name(n) in used:
        n += 1
    return device_name(n)
