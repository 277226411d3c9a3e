"""vhost-user-net: an interface whose binding plugin hands the pod a vhost-user socket, pure.

The userspace-dataplane design (kubevirt/enhancements `veps/sig-network/307-vhostuser-binding-plugin
/vep.md`, kubevirt/community PR #294): the VMI asks for `binding: {name: vhostuser}` on a Multus
network whose CNI (e.g. userspace CNI with OVS-DPDK or VPP) and device plugin give the pod a
vhost-user socket, and describe it in Multus `device-info` (`type: vhost-user`, `vhost-user:
{mode, path}`). With `downwardAPI: device-info` on the binding in the KubeVirt CR, virt-controller
mounts that description into the compute container (`netinfo`). Upstream a hook sidecar turns it
into libvirt XML; here the translator turns it into Cloud Hypervisor's own vhost-user-net device,
so the binding needs no `sidecarImage` (docs/vhost-user.md shows the CR).

`mode` is the VM's role ("client": the switch created the socket and the VMM connects to it;
"server": the VMM creates it and the switch connects), which is exactly Cloud Hypervisor's
`vhost_mode`. A client-mode socket must exist before boot: a `WaitForSocket` step waits for it
(bounded, clear error). vhost-user needs guest memory the backend can map: shared or hugepages.
"""

from __future__ import annotations

from ch_launcher.ch.vmconfig import NetConfig, VhostMode
from ch_launcher.convert import podnet
from ch_launcher.convert.context import Translation
from ch_launcher.convert.netinfo import DeviceInfo
from ch_launcher.convert.plan import WaitForSocket
from ch_launcher.kubevirt.domain_view import DomainInterface
from ch_launcher.kubevirt.vmi import Interface

VHOSTUSER_BINDING = "vhostuser"  # the binding name of VEP 307 (used at admission, where no pod exists)
ADMISSION_SOCKET_DIR = "/var/run/kubevirt/vhostuser"  # VEP 307's stable per-interface socket path
SOCKET_WAIT_SECONDS = 30.0
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes including the terminating NUL
_MODES: dict[str, VhostMode] = {"client": "Client", "server": "Server"}


def vhost_user_interface(t: Translation, path: str, iface: Interface, info: DeviceInfo | None,
                         pairs: int) -> None:
    """Add a vhost-user-net NetConfig for `iface`; `info` is None at admission (placeholder socket)."""
    mode: VhostMode
    if info is None:
        socket, mode = f"{ADMISSION_SOCKET_DIR}/{iface.name}", "Client"
    else:
        where = f"{path}: device-info of network '{iface.name}'"
        mode_value = _MODES.get(info.vhost_user_mode.lower())
        if mode_value is None:
            t.unsupported(path, f"{where} has vhost-user mode {info.vhost_user_mode!r}; expected client "
                          f"or server", "FieldValueInvalid")
            return
        socket, mode = info.vhost_user_path, mode_value
        if not socket.startswith("/"):
            t.unsupported(path, f"{where} has vhost-user path {socket!r}; expected an absolute path",
                          "FieldValueInvalid")
            return
        if len(socket.encode()) > MAX_SOCKET_PATH:
            t.unsupported(path, f"{where} has a vhost-user path longer than {MAX_SOCKET_PATH} bytes, "
                          f"the limit of a unix socket path", "FieldValueInvalid")
            return

    mac = podnet.normalise_mac(iface.macAddress) if iface.macAddress else ""
    if not mac and info is not None:
        try:
            mac = podnet.normalise_mac(info.mac) if info.mac else ""
        except ValueError:
            mac = ""
    mac = mac or podnet.derived_mac(t.vmi.metadata.uid, iface.name)
    # a device-info MTU Cloud Hypervisor would refuse is left out: the backend's default applies
    mtu = info.mtu if info is not None and info.mtu is not None and info.mtu >= podnet.MIN_MTU else None

    t.config.net = [*(t.config.net or []),
                    NetConfig(id=iface.name, vhost_user=True, vhost_socket=socket, vhost_mode=mode,
                              mac=mac, mtu=mtu, num_queues=2 * pairs)]
    t.need_shared_memory(f"{path}: vhost-user interface '{iface.name}'")
    if mode == "Client":
        t.steps.append(WaitForSocket(field=path, path=socket,
                                     what=f"vhost-user socket of interface '{iface.name}' (served by the switch)",
                                     timeout_seconds=SOCKET_WAIT_SECONDS))
    t.interfaces.append(DomainInterface(alias=iface.name, mac=mac, mtu=mtu,
                                        queues=pairs if pairs > 1 else None, type="vhostuser"))
