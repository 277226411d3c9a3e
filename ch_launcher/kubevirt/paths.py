"""Where things live in a launcher pod by default: virt-launcher's flag defaults
(kubevirt cmd/virt-launcher/virt-launcher.go@d923fdb815cd, contract.md §7.5, §8) and the
launcher's own (docs/architecture.md "The processes"). `LauncherPaths` is the one declaration of
the launcher's directories: the command line (`cli.Settings`), the manager's settings and the
translator's environment (`convert.LauncherEnv`) are each a `LauncherPaths` with more; every path
derives from these or the flags.
"""

from dataclasses import dataclass, fields
from typing import Any

PRIVATE_DIR = "/var/run/kubevirt-private"
SHARE_DIR = "/var/run/kubevirt"
EPHEMERAL_DISK_DIR = "/var/run/kubevirt-ephemeral-disks"
CONTAINER_DISK_DIR = "/var/run/kubevirt/container-disks"
HOTPLUG_DISK_DIR = "/var/run/kubevirt/hotplug-disks"  # virt-launcher writes it with a trailing "/"
CH_BINARY = "/usr/bin/cloud-hypervisor"
KVM_DEVICE = "/dev/kvm"  # the kvm device plugin's device in the compute container
FIRMWARE_DIR = "/usr/share/cloud-hypervisor"  # hypervisor-fw (BIOS guests) and CLOUDHV.fd (EFI)
# swtpm state of a root VMI (status.runtimeUser 0): where virt-controller mounts the VM state
# PVC's `swtpm` subpath (kubevirt pkg/util/util.go@d923fdb815cd PathForSwtpm). Non-root VMIs use
# <private-dir>/libvirt/qemu/swtpm, which follows --private-dir.
ROOT_SWTPM_DIR = "/var/lib/libvirt/swtpm"
SWTPM_BINARY = "swtpm"  # Debian's swtpm, found on PATH (env CH_SWTPM overrides)


@dataclass(frozen=True)
class LauncherPaths:
    """The launcher's directories, from its flags (virt-launcher's, and `--private-dir`,
    `--firmware-dir`), with their defaults."""

    private_dir: str = PRIVATE_DIR
    share_dir: str = SHARE_DIR
    ephemeral_disk_dir: str = EPHEMERAL_DISK_DIR
    container_disk_dir: str = CONTAINER_DISK_DIR
    hotplug_disk_dir: str = HOTPLUG_DISK_DIR
    firmware_dir: str = FIRMWARE_DIR

    def directories(self) -> dict[str, Any]:
        """These directories by field name, to make another kind of `LauncherPaths` from them
        (`LauncherEnv(**paths.directories(), pod=...)`; typed Any as keyword arguments must be)."""
        return {f.name: getattr(self, f.name) for f in fields(LauncherPaths)}
