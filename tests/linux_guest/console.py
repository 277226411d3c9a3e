"""What the Linux guest's init (rootfs/etc/kch/) prints on its serial console, for tests to read.

Every boot prints, in order: `BOOT <kernel release>`; the cloud-init NoCloud lines when the VM
has a `cidata` disk (`CLOUD_INIT instance-id <id>`, `CLOUD_INIT local-hostname <name>`, one
`USER_DATA <line>` per line of user-data, `HOSTNAME <name>` when it named the guest); one
`DHCP <nic> <ip>/<prefix> router=... dns=... mtu=... domain=... search=... hostname=...
server=... lease=...` per NIC whose DHCP client got a lease (`DHCP-leasefail <nic>` otherwise);
then `READY cpus=<online cpus>`, and a root shell whose prompt is `<hostname>:<dir># `.
Afterwards: `POWER_BUTTON` when the ACPI power button is pressed (then a clean poweroff),
`GOING_DOWN` at every clean shutdown or reboot, `CPU_ONLINE <n>` for a hot-added vCPU it onlined,
`MEMORY_ONLINE memory<n>` for a hot-added memory block the kernel onlined.
"""

from __future__ import annotations

import re

BOOT = "KCH-LINUX-BOOT"
CLOUD_INIT = "KCH-LINUX-CLOUD-INIT"
USER_DATA = "KCH-LINUX-USER-DATA"
HOSTNAME = "KCH-LINUX-HOSTNAME"
DHCP = "KCH-LINUX-DHCP"
READY = "KCH-LINUX-READY"
POWER_BUTTON = "KCH-LINUX-POWER-BUTTON"
GOING_DOWN = "KCH-LINUX-GOING-DOWN"
CPU_ONLINE = "KCH-LINUX-CPU-ONLINE"
MEMORY_ONLINE = "KCH-LINUX-MEMORY-ONLINE"
PANIC = "Kernel panic - not syncing"  # the kernel's own line

_DHCP_LINE = re.compile(rf"^{DHCP} (\S+) (\S+) (.*?)\r?$", re.MULTILINE)


def prompt(hostname: str, directory: str = "/") -> str:
    """The shell's prompt (`PS1='\\h:\\w# '` of rootfs/etc/profile)."""
    return f"{hostname}:{directory}# "


def dhcp_leases(text: str) -> dict[str, dict[str, str]]:
    """The DHCP lines of a console text by NIC: {"eth0": {"address": "10.0.2.2/24", "router": ...}}
    (the last lease of each NIC)."""
    leases: dict[str, dict[str, str]] = {}
    for nic, address, rest in _DHCP_LINE.findall(text):
        fields = dict(re.findall(r"(\w+)=(\S*)", rest))
        leases[nic] = {"address": address, **fields}
    return leases
