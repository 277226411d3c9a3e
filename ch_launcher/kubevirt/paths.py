"""Where things live in a launcher pod by default: virt-launcher's flag defaults
(kubevirt cmd/virt-launcher/virt-launcher.go@d923fdb815cd, contract.md §7.5, §8) and the
launcher's own (docs/architecture.md "The processes"). One copy, used by the command line, the
manager's settings and the translator's environment; every path derives from these or the flags.
"""

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
