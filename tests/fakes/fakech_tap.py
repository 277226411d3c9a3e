"""The simulated VMM opens taps as Cloud Hypervisor does, with the process's own privileges.

Part of `fake_cloud_hypervisor.py` (stdlib only). `open_tap(net)` follows `open_tap` /
`open_tap_rx_q_0` (`net_util/src/open_tap.rs@v53.0`) and `Tap` (`net_util/src/tap.rs@v53.0`)
step by step, with real syscalls on a tap that exists in the VMM's network namespace:

1. multi-queue check against `/sys/class/net/<tap>/tun_flags` (when the tap exists);
2. one `/dev/net/tun` fd per queue pair, `TUNSETIFF` with IFF_TAP|IFF_NO_PI|IFF_VNET_HDR
   (|IFF_MULTI_QUEUE for more than one pair);
3. on the first fd: `host_mac` set with SIOCSIFHWADDR only when it differs (else read back
   into the config, which vm.info shows), `mtu` set with SIOCSIFMTU *whenever it is given*
   (needs CAP_NET_ADMIN, even when equal: the v53 behaviour that made a NIC fail in a real pod),
   the link set up with SIOCSIFFLAGS only when it is not up yet, then TUNSETVNETHDRSZ;
4. every later fd: TUNSETIFF and TUNSETVNETHDRSZ.

Errors are CH's chains (`Cannot create virtio-net device` / `Failed to open taps` / ...), the
ioctl number in decimal, then the OS error. The fds stay open while the VM exists, or until the
guest ejects the NIC (the same tap can then be added again at once, as on the real VMM).

Known difference: CH creates a tap when none of that name exists (or no name is given); that
needs CAP_NET_ADMIN, and the simulation refuses exactly as CH does without it, but with it
pretends success without creating an interface (tests never add links to the host).
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
from typing import Any

TUNSETIFF = 0x400454CA
TUNGETFEATURES = 0x800454CF
TUNSETVNETHDRSZ = 0x400454D8
IFF_TAP, IFF_NO_PI, IFF_VNET_HDR, IFF_MULTI_QUEUE = 0x0002, 0x1000, 0x4000, 0x0100
SIOCGIFFLAGS, SIOCSIFFLAGS = 0x8913, 0x8914
SIOCGIFMTU, SIOCSIFMTU = 0x8921, 0x8922
SIOCSIFHWADDR, SIOCGIFHWADDR = 0x8924, 0x8927
IFF_UP = 0x1
VNET_HDR_LEN = 12  # virtio_net_hdr_v1
CAP_NET_ADMIN = 12
PREFIX = ("Error from device manager", "Cannot create virtio-net device", "Failed to open taps")


class TapError(Exception):
    def __init__(self, *chain: str) -> None:
        super().__init__(chain[-1])
        self.chain = [*PREFIX, *chain]


def _os_error(exc: OSError) -> str:
    return f"{os.strerror(exc.errno or 0)} (os error {exc.errno or 0})"


def has_net_admin() -> bool:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> CAP_NET_ADMIN & 1)
    return False


def _ifreq(name: str, payload: bytes = b"") -> bytes:
    return struct.pack("16s", name.encode()) + payload.ljust(24, b"\0")


def _sock_ioctl(name: str, request: int, payload: bytes = b"") -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        return fcntl.ioctl(s.fileno(), request, _ifreq(name, payload))


def _ioctl(what: str, name: str, request: int, payload: bytes = b"") -> bytes:
    try:
        return _sock_ioctl(name, request, payload)
    except OSError as exc:
        raise TapError(what, f"Ioctl failed ({request})", _os_error(exc)) from None


def _open_named(name: str, pairs: int) -> int:
    try:
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise TapError("Open tap device failed", "Couldn't open /dev/net/tun", _os_error(exc)) from None
    try:
        features = struct.unpack("I", fcntl.ioctl(fd, TUNGETFEATURES, struct.pack("I", 0)))[0]
        if not features & IFF_MULTI_QUEUE and pairs > 1:
            raise TapError("Open tap device failed", "Missing multiqueue support in the kernel")
        flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR | (IFF_MULTI_QUEUE if pairs > 1 else 0)
        try:
            fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH22x", name.encode(), flags))
        except OSError as exc:
            raise TapError("Open tap device failed", "Unable to configure tap interface", _os_error(exc)) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _vnet_hdr(fd: int) -> None:
    try:
        fcntl.ioctl(fd, TUNSETVNETHDRSZ, struct.pack("i", VNET_HDR_LEN))
    except OSError as exc:
        raise TapError("Setting vnet header size failed", f"Ioctl failed ({TUNSETVNETHDRSZ})", _os_error(exc)) from None


def _mac(text: str) -> bytes:
    return bytes(int(part, 16) for part in text.split(":"))


def open_tap(net: dict[str, Any]) -> list[int]:
    """Open the taps of one virtio-net NetConfig (not vhost-user) as CH does; returns the fds.

    Writes `host_mac` back into `net`. Raises TapError with CH's chain."""
    name = net.get("tap")
    pairs = max(1, int(net.get("num_queues", 2)) // 2)
    if name and len(name) > 15:
        raise TapError("Open tap device failed", f"Interface name too long (max length is 15): {name}")
    sys_dir = f"/sys/class/net/{name}" if name else None
    if sys_dir and os.path.exists(f"{sys_dir}/tun_flags"):
        with open(f"{sys_dir}/tun_flags") as f:
            tun_flags = int(f.read().strip(), 16)
        if tun_flags & IFF_MULTI_QUEUE and pairs == 1:
            raise TapError("Error related to the multiqueue support (no support device side)")
        if not tun_flags & IFF_MULTI_QUEUE and pairs > 1:
            raise TapError("Error related to the multiqueue support (no support TAP side)")
    if not sys_dir or not os.path.exists(sys_dir):
        # CH would create a tap here (TUNSETIFF on a new name): only with CAP_NET_ADMIN.
        if not has_net_admin():
            raise TapError("Open tap device failed", "Unable to configure tap interface",
                           "Operation not permitted (os error 1)")
        return []  # the simulation creates no interface (see the module docstring)
    assert name is not None
    fds: list[int] = []
    try:
        fds.append(_open_named(name, pairs))
        current = _ioctl("Getting MAC address failed", name, SIOCGIFHWADDR)[18:24]
        if net.get("host_mac"):
            wanted = _mac(net["host_mac"])
            if current != wanted:
                _ioctl("Setting MAC address failed", name, SIOCSIFHWADDR, struct.pack("H", 1) + wanted)
        else:
            net["host_mac"] = ":".join(f"{b:02x}" for b in current)
        if net.get("mtu") is not None:
            _ioctl("Setting MTU failed", name, SIOCSIFMTU, struct.pack("i", int(net["mtu"])))
        flags = struct.unpack_from("h", _sock_ioctl(name, SIOCGIFFLAGS), 16)[0]
        if not flags & IFF_UP:
            _ioctl("Enabling tap interface failed", name, SIOCSIFFLAGS, struct.pack("h", IFF_UP))
        _vnet_hdr(fds[0])
        for _ in range(1, pairs):
            fds.append(_open_named(name, pairs))
            _vnet_hdr(fds[-1])
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return fds
