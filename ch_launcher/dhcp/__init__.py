"""DHCP for the guest, as virt-launcher serves it on the in-pod bridge (masquerade and bridge).

API for the launcher: `start_dhcp(plan, env) -> DhcpHandle` once the plan is known and before
the guest boots; `handle.stop()` when the VM is gone. Failures raise `DhcpError` naming the
interface's field and the cause. Layout: `packet` (DHCPv4 wire format), `lease` (what the guest
is offered, from the plan, resolv.conf and virt-handler's cache), `server` (socket and thread).
"""

from ch_launcher.dhcp.server import DhcpError, DhcpHandle, answer, start_dhcp

__all__ = ["DhcpError", "DhcpHandle", "answer", "start_dhcp"]
