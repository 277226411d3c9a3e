"""Which VMIs Cloud Hypervisor can live-migrate, pure (docs/migration.md §4).

virt-handler marks a VMI `LiveMigratable` from its spec alone, for QEMU (`kubevirt
pkg/virt-handler/vm.go@d923fdb815cd`: `calculateLiveMigrationCondition`, `checkVolumesForMigration`).
What Cloud Hypervisor cannot move on top of that is recorded here as `(reason, message)` pairs in
`Translation.migration_blockers`, with the reason strings of KubeVirt's condition
(`staging/src/kubevirt.io/api/core/v1/types.go`), so users read the words they know. Nothing is
refused here: a VMI that cannot migrate still runs. The migration webhook refuses the creation
of a migration of such a VMI in virt-api's words (`admission/migrations.py`); one that starts
anyway is failed at once by the source launcher with `<reason>: <message>`; the VMI webhook
refuses `evictionStrategy: LiveMigrate` for it (`policy.py`).

The rules:
- **Disks.** QEMU copies disks KubeVirt cannot share (containerDisk, emptyDisk, ephemeral,
  non-shared hostDisk) during the migration ("block migration"); Cloud Hypervisor v53 has no
  storage migration, and a target starting from a fresh overlay under a running guest would
  corrupt its file system. A read-only disk is fine (the target pod has the same image), and so
  are the generated read-only volumes (cloud-init, configMap, secret, serviceAccount,
  downwardAPI), which the target pod rebuilds as KubeVirt does. PVCs and DataVolumes must be
  shared (ReadWriteMany), as KubeVirt requires; where the VMI's status does not say (at
  admission), virt-handler's own rule decides.
- **virtiofs.** The vhost-user-fs backend's state does not move with Cloud Hypervisor's migration.
- **vhost-user interfaces** (a backend outside the VMM) likewise; `bridge` on the pod network
  also blocks (KubeVirt's rule: the pod's address does not move, unless the VMI carries
  `kubevirt.io/allow-pod-bridge-network-live-migration`, with any value:
  `pkg/network/vmispec/interface.go`: `VerifyVMIMigratable` checks its presence).
- **Hotplugged volumes:** the target pod's attachment pods are not reproduced by this launcher.
- **TPM:** swtpm's state is not part of Cloud Hypervisor's migration stream.
"""

from __future__ import annotations

from ch_launcher.convert.context import Translation

DISKS = "DisksNotLiveMigratable"
INTERFACE = "InterfaceNotLiveMigratable"
VIRTIOFS = "VirtIOFSNotLiveMigratable"
HOTPLUG = "HotplugNotLiveMigratable"
NOT_MIGRATABLE = "NotMigratable"
ALLOW_POD_BRIDGE = "kubevirt.io/allow-pod-bridge-network-live-migration"
SHARED_ACCESS_MODES = ("ReadWriteMany",)
_LOCAL = ("containerDisk", "emptyDisk", "ephemeral")


def configure_migration(t: Translation) -> None:
    """Record why Cloud Hypervisor could not live-migrate this VMI (never refuses anything)."""
    vmi = t.vmi
    spec = vmi.spec
    readonly = {d.name for d in spec.domain.devices.disks
                if (d.disk is not None and d.disk.readonly) or (d.lun is not None and d.lun.readonly)
                or (d.cdrom is not None and d.cdrom.readonly is not False)}
    statuses = {s.name: s for s in vmi.status.volumeStatus}
    for volume in spec.volumes:
        kinds = set(volume.source_kinds)
        if kinds & set(_LOCAL) and volume.name not in readonly:
            kind = next(k for k in _LOCAL if k in kinds)
            t.migration_blockers.append((DISKS, (f"volume {volume.name!r} ({kind}) is local to the pod and writable: "
                                                 "Cloud Hypervisor cannot copy disks during a migration")))
        elif volume.hostDisk is not None and not volume.hostDisk.shared and volume.name not in readonly:
            t.migration_blockers.append((DISKS, (f"volume {volume.name!r} is a hostDisk that is not shared: "
                                                 "Cloud Hypervisor cannot copy disks during a migration")))
        claim = volume.persistentVolumeClaim or volume.dataVolume
        if claim is not None:
            status = statuses.get(volume.name)
            info = status.persistentVolumeClaimInfo if status is not None else None
            if info is not None and info.accessModes and not set(info.accessModes) & set(SHARED_ACCESS_MODES):
                name = getattr(claim, "claimName", None) or getattr(claim, "name", volume.name)
                t.migration_blockers.append((DISKS, (f"PVC {name} is not shared: live migration requires that "
                                                     "all PVCs be shared (ReadWriteMany)")))
    for disk in sorted(t.hotplug_disks):
        t.migration_blockers.append((HOTPLUG, f"disk {disk!r} is on a hotplugged volume"))
    for fs in spec.domain.devices.filesystems:
        t.migration_blockers.append((VIRTIOFS, (f"filesystem {fs.name!r} is shared with virtiofs, whose "
                                                "backend state Cloud Hypervisor does not migrate")))
    for net in t.config.net or ():
        if net.vhost_user:
            t.migration_blockers.append((INTERFACE, (f"interface {net.id!r} is vhost-user: its backend's state "
                                                     "does not move with the VM")))
    pod_networks = {n.name for n in spec.networks if n.pod is not None}
    allowed = ALLOW_POD_BRIDGE in vmi.metadata.annotations  # its presence, whatever its value (as KubeVirt)
    for iface in spec.domain.devices.interfaces:
        if iface.bridge is not None and iface.name in pod_networks and not allowed:
            t.migration_blockers.append((INTERFACE, (f"interface {iface.name!r} uses bridge binding on the pod "
                                                     "network")))
    tpm = spec.domain.devices.tpm
    if tpm is not None and tpm.enabled is not False:
        t.migration_blockers.append((NOT_MIGRATABLE, ("the TPM's state (swtpm) is not part of Cloud Hypervisor's "
                                                      "migration")))


def blockers_text(blockers: list[tuple[str, str]]) -> str:
    """`Reason: message; Reason: message`, each reason once with its messages joined."""
    grouped: dict[str, list[str]] = {}
    for reason, message in blockers:
        grouped.setdefault(reason, []).append(message)
    return "; ".join(f"{reason}: {', '.join(messages)}" for reason, messages in grouped.items())
