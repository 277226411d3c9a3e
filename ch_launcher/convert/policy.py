"""What the rest of KubeVirt requires of the launcher pod, checked last (pure).

Some VMI features are served not by the launcher's Cmd API but by virt-handler or by executables
in the compute container. A VMI that uses one must be refused here, or virt-handler would fail
its reconcile (or the feature would silently not work) after admission. Read upstream at
`kubevirt/kubevirt @d923fdb815cd`:

- `pkg/hypervisor/kvm/runtime.go` (`AdjustResources`, `HandleHousekeeping`): for VMIs with VFIO
  devices, realtime, SEV or `memLock: Required`, and for dedicated CPUs, virt-handler looks for a
  `virtqemud` child of the launcher and a `qemu-system*` child of the launcher's parent. The
  launcher's process model provides both (docs/process-model.md, `convert/runtime.py`), and the
  launcher fails the Sync with the reason when its pod does not; nothing to refuse here. (SEV is
  refused by `compute`: no confidential-guest support in this backend.)
- probes (`pkg/virt-controller/services/rendercontainer.go`, `cmd/virt-probe`): `exec` and
  `guestAgentPing` probes run `virt-probe`, which calls the launcher's `Exec`/`GuestPing`: served
  through the guest agent on vsock (`convert/agent.py` warns that the guest must run it). HTTP
  and TCP probes are run by the kubelet against the pod.
- hook sidecars (`hooks.kubevirt.io/hookSidecars`): they rewrite libvirt domain XML, which this
  launcher has none of.
- `evictionStrategy: LiveMigrate` or `LiveMigrateIfPossible` for a VMI Cloud Hypervisor cannot
  migrate (`convert/migration.py`): virt-handler marks a VMI migratable from its spec alone
  (`pkg/virt-handler/vm.go`: `calculateLiveMigrationCondition`), so an eviction would turn into
  a migration that fails at once, retried while the drain blocks. Migratable VMIs are admitted;
  `None` and `External` always are. Both migrating strategies block a drain here: virt-handler
  calls these VMIs `LiveMigratable`, so virt-api's eviction webhook triggers an evacuation whose
  migrations the add-on refuses. virt-api writes the KubeVirt CR's default
  (`spec.configuration.evictionStrategy`) into every new VMI without a strategy of its own
  (`pkg/defaults/defaults.go`: `setDefaultEvictionStrategy`), before the webhooks judge it, but
  not into the templates of VMs, replica sets and pools. So where the default is known
  (`LauncherEnv.eviction_strategy`, at admission): a refused strategy equal to it is said to be
  the cluster's, and a template without a strategy is warned that its VMIs will be refused.
- Velero backup hooks (`pkg/storage/pod/annotations/generator.go`) run `/usr/bin/virt-freezer`
  in the compute container on every launcher pod; it asks `GetGuestInfo` and freezes the guest's
  filesystems through the agent when there is one (else it exits 0 and the backup is
  crash-consistent). Nothing to refuse (the image must ship virt-freezer: ch_launcher/freezer.py).

- `startStrategy: Paused`: KubeVirt starts such a VMI paused (Paused/User until `virtctl
  unpause`). Cloud Hypervisor cannot boot paused, so the launcher pauses the VM right after
  `vm.boot`, before announcing it: admitted with a warning that the guest's first instructions
  run before the pause.

"""

from __future__ import annotations

from ch_launcher.ch.vmconfig import VmConfig
from ch_launcher.convert.context import Translation
from ch_launcher.convert.migration import blockers_text

# One PCI segment has 32 device slots and slot 0 is the host bridge (cloud-hypervisor
# vmm/src/pci_segment.rs@v53.0); the launcher uses one segment (no `platform.num_pci_segments`).
PCI_SLOTS = 31
HOOK_SIDECARS_ANNOTATION = "hooks.kubevirt.io/hookSidecars"
MIGRATING_STRATEGIES = ("LiveMigrate", "LiveMigrateIfPossible")  # an eviction becomes a migration


def configure_policy(t: Translation) -> None:
    """Refuse what virt-handler or the pod's tooling would fail on; never touches the config."""
    refuse = _Refusals(t)
    spec = t.vmi.spec
    if HOOK_SIDECARS_ANNOTATION in t.vmi.metadata.annotations:
        refuse(f"metadata.annotations[{HOOK_SIDECARS_ANNOTATION}]",
                "hook sidecars rewrite libvirt domain XML, which the Cloud Hypervisor launcher does not use")
    if spec.startStrategy == "Paused":
        t.warn("spec.startStrategy", "Paused: Cloud Hypervisor cannot boot paused; the VM is paused right "
               "after boot")
    default = t.env.eviction_strategy
    if spec.evictionStrategy in MIGRATING_STRATEGIES and t.migration_blockers:
        # (no "spec." in the text: an owner's paths are prefixed with its template's)
        origin = (" (the cluster's default, the KubeVirt CR's configuration.evictionStrategy, which virt-api sets in "
                  "every VMI without its own)" if spec.evictionStrategy == default else "")
        refuse("spec.evictionStrategy", f"{spec.evictionStrategy}{origin}: Cloud Hypervisor cannot live-migrate this "
                f"VMI ({blockers_text(t.migration_blockers)}), so a node drain would block on migrations that fail; "
                "use None or External, or make the VMI migratable")
    elif spec.evictionStrategy is None and default in MIGRATING_STRATEGIES and t.migration_blockers:
        t.warn("spec.evictionStrategy", f"spec.evictionStrategy is not set, so virt-api will set the cluster's "
               f"default {default} (the KubeVirt CR's configuration.evictionStrategy) in the VMI, which is then "
               f"refused: Cloud Hypervisor cannot live-migrate it ({blockers_text(t.migration_blockers)}), so a node "
               "drain would block on it; set None (the VM stops on a drain) or External, or make the VMI migratable")


def pci_devices_of(c: VmConfig) -> int:
    """PCI devices a VmConfig asks for: every virtio device and every VFIO device."""
    count = sum(len(x or ()) for x in (c.disks, c.net, c.fs, c.devices))
    count += sum(1 for x in (c.rng, c.balloon, c.vsock) if x is not None)
    count += 1 if c.console is not None and c.console.mode != "Off" else 0
    count += sum(1 for flag in (c.watchdog, c.pvpanic, c.iommu) if flag)
    return count


def configure_pci_budget(t: Translation) -> None:
    """A VMI with more devices than one PCI segment holds fails at vm.boot; refuse it here."""
    count = pci_devices_of(t.config)
    if count > PCI_SLOTS:
        t.unsupported("spec.domain.devices", f"spec.domain.devices needs {count} PCI devices (disks, interfaces, "
                      f"filesystems and other devices together); Cloud Hypervisor offers {PCI_SLOTS} on its PCI "
                      "segment", "FieldValueInvalid")


class _Refusals:
    """Refuse each field once: a field an earlier configurator already refused (itself, or a
    field below it) is not refused again. Linear in the number of problems (a VMI with
    thousands of GPUs must still be answered inside the webhook's timeout)."""

    def __init__(self, t: Translation) -> None:
        self.t = t
        self.covered: set[str] = set()
        for p in t.problems:
            self._cover(p.field)

    def _cover(self, field: str) -> None:
        self.covered.add(field)
        for i, ch in enumerate(field):
            if ch == ".":
                self.covered.add(field[:i])  # "a.b[1].c" also covers "a.b[1]" and "a"

    def __call__(self, field: str, why: str) -> None:
        if field in self.covered:
            return
        self.t.unsupported(field, f"{field} is not supported: {why}")
        self._cover(field)
