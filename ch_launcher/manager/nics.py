"""Interface hotplug on a running VM: which NICs a later Sync adds and removes, and how.

Imported on first use (a Sync whose interfaces changed), never by a launcher that does not need
it.

KubeVirt (`@d923fdb815cd`) hot-plugs a bridge (or managedTap plugin) interface on a secondary
Multus network in steps: the interface and its network join the VMI spec, virt-controller adds
the network to the launcher pod's Multus annotation and, once Multus has attached it, reports
the pod interface in `status.interfaces[]` with `infoSource` containing `multus-status`;
virt-handler then makes the in-pod bridge and tap (`tap<hash>`, owned by the launcher's user)
and the DHCP cache, as at start (phase 1: pkg/network/setup/netpod), and Syncs. virt-launcher
attaches every such interface the domain does not have yet (not absent, not SR-IOV), after
starting its DHCP server (`networksToHotplugWhoseInterfacesAreNotInTheDomain`,
`SetupPodNetworkPhase2`, pkg/virt-launcher/virtwrap/network/nichotplug.go). Here that is
`vm.add-net` with the tap's name: Cloud Hypervisor opens a named tap for a hot add exactly as for
`vm.create` (the same `open_tap` of `DeviceManager::make_virtio_net_device`; the tap fds that
`vm.add-net` also accepts by SCM_RIGHTS are optional, cloud-hypervisor
vmm/src/api/http/http_endpoint.rs@v53.0), and the VMM, running as the tap's owner, may open it.

Removal (`state: absent` in the spec, set through the VM): virt-launcher detaches an absent
interface that the domain has, but only one whose tap has the hashed name
(`hasDeviceWithHashedTapName`: interfaces of pods from before the hashed naming scheme are never
unplugged); here `vm.remove-device`. The interface stays in the Domain until the guest has
ejected it (`vm:device-removed`); then virt-handler sees it gone from the Domain, removes the
in-pod bridge and tap, virt-controller takes the network out of the pod, and the VM controller
drops the interface from the spec.

Interfaces not in the VM and not yet attached to the pod are pending: a Sync leaves them alone
(they would not translate, the pod has no link for them yet).

Failure behaviour: `plan_changes` raises CommandFailed naming the field when an interface that
cannot be hot-plugged here (not on a tap: vhost-user) was added.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ch_launcher.convert import podnet
from ch_launcher.manager.settings import CommandFailed

if TYPE_CHECKING:
    from ch_launcher.ch.vmconfig import NetConfig
    from ch_launcher.convert import Plan
    from ch_launcher.convert.plan import DhcpSpec
    from ch_launcher.kubevirt.domain import DomainInterface
    from ch_launcher.kubevirt.vmi import VirtualMachineInstance

log = logging.getLogger(__name__)

MULTUS_STATUS = "multus-status"  # pkg/network/vmispec InfoSourceMultusStatus


@dataclass
class NicChanges:
    """What to do to the running VM's NICs: (config, Domain view, DHCP server or None) to attach,
    interface names to detach."""

    attach: list[tuple[NetConfig, DomainInterface, DhcpSpec | None]] = field(default_factory=list)
    detach: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.attach or self.detach)


def in_pod(vmi: VirtualMachineInstance) -> set[str]:
    """Interfaces whose network Multus has attached to the pod (`status.interfaces[].infoSource`)."""
    return {s.name for s in vmi.status.interfaces if MULTUS_STATUS in s.infoSource.split(",")}


def reachable(vmi: VirtualMachineInstance, live: Plan) -> VirtualMachineInstance:
    """The VMI to translate for the running VM: interfaces neither in the VM nor attached to the
    pod are marked absent (pending), so that the translation skips them and keeps every other
    interface's index (virt-handler's bridge addresses count them)."""
    in_vm = {i.alias for i in live.interfaces}
    ready = in_pod(vmi)
    interfaces = vmi.spec.domain.devices.interfaces
    pending = [i.name for i in interfaces if i.state != "absent" and i.name not in in_vm
               and (i.name not in ready or i.sriov is not None)]
    if not pending:
        return vmi
    marked = [replace(i, state="absent") if i.name in pending else i for i in interfaces]
    devices = replace(vmi.spec.domain.devices, interfaces=marked)
    domain = replace(vmi.spec.domain, devices=devices)
    return replace(vmi, spec=replace(vmi.spec, domain=domain))


def plan_changes(live: Plan, wanted: Plan, vmi: VirtualMachineInstance, removing: set[str]) -> NicChanges:
    """The NIC hotplug that turns the running VM (`live`) into what `vmi` asks (`wanted`, its
    translation through `reachable`). `removing`: devices whose removal is under way."""
    changes = NicChanges()
    have = {i.alias for i in live.interfaces}
    configs = {n.id: n for n in wanted.config.net or ()}
    dhcp = {d.interface: d for d in wanted.dhcp}
    paths = {iface.name: f"spec.domain.devices.interfaces[{n}]"
             for n, iface in enumerate(vmi.spec.domain.devices.interfaces)}
    for view in wanted.interfaces:
        if view.alias in have or view.alias in removing:
            continue
        config = configs.get(view.alias)
        if config is None or not config.tap:
            path = paths.get(view.alias, "spec.domain.devices.interfaces")
            raise CommandFailed(f"{path}: interface '{view.alias}' cannot be hot-plugged on Cloud Hypervisor: "
                                "only interfaces on a tap virt-handler made (bridge binding, managedTap "
                                "plugins) can be added to a running VM")
        changes.attach.append((config, view, dhcp.get(view.alias)))
    specs = {i.name: i for i in vmi.spec.domain.devices.interfaces}
    networks = {n.name: n for n in vmi.spec.networks}
    for view in live.interfaces:
        spec = specs.get(view.alias)
        if view.alias in removing or spec is None or spec.state != "absent":
            continue
        network = networks.get(view.alias)
        hashed = podnet.tap_name(podnet.hashed_pod_interface(view.alias), network) if network else None
        if hashed is None or view.tap != hashed:
            log.info("interface %s is absent but keeps its tap %s (not named by the hashed scheme): it is not "
                     "hot-unplugged, as virt-launcher does", view.alias, view.tap or "-")
            continue
        changes.detach.append(view.alias)
    return changes
