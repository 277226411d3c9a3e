"""The agent's answers as KubeVirt reports them (pure): what virt-launcher's agent poller makes
of each (kubevirt `pkg/virt-launcher/virtwrap/agent-poller/agent_poller.go`, `agent_parser.go`
@d923fdb815cd, through libvirt's `virDomainGetGuestInfo` for the OS, host name, time zone,
interfaces and users). Each function raises ValueError on an answer of the wrong shape (the
poller then keeps what it had, as virt-launcher logs "Cannot parse ..." and goes on)."""

from __future__ import annotations

import math
from typing import Any

from ch_launcher.kubevirt.guest_info import GuestDisk, GuestFilesystem, GuestInterface, GuestOSInfo, GuestUser


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what}: expected an object, got {type(value).__name__}")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{what}: expected a list, got {type(value).__name__}")
    return value


def _str(obj: dict[str, Any], key: str) -> str:
    value = obj.get(key, "")
    return value if isinstance(value, str) else str(value)


def _int(obj: dict[str, Any], key: str) -> int:
    value = obj.get(key, 0)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def agent_info(answer: Any) -> tuple[str, tuple[tuple[str, bool], ...]]:
    """`guest-info`: the agent's version and its commands with whether each is enabled."""
    info = _object(answer, "guest-info")
    commands = tuple((_str(c, "name"), c.get("enabled") is True)
                     for c in (_object(c, "guest-info command") for c in _list(info.get("supported_commands", []),
                                                                                "supported_commands")))
    return _str(info, "version"), commands


def os_info(answer: Any) -> GuestOSInfo:
    """`guest-get-osinfo`."""
    info = _object(answer, "guest-get-osinfo")
    return GuestOSInfo(name=_str(info, "name"), kernel_release=_str(info, "kernel-release"),
                       version=_str(info, "version"), pretty_name=_str(info, "pretty-name"),
                       version_id=_str(info, "version-id"), kernel_version=_str(info, "kernel-version"),
                       machine=_str(info, "machine"), id=_str(info, "id"))


def hostname(answer: Any) -> str:
    """`guest-get-host-name`."""
    return _str(_object(answer, "guest-get-host-name"), "host-name")


def timezone(answer: Any) -> tuple[str, int]:
    """`guest-get-timezone`: the zone's name (may be absent) and its offset from UTC in seconds."""
    info = _object(answer, "guest-get-timezone")
    return _str(info, "zone"), _int(info, "offset")


def interfaces(answer: Any) -> tuple[GuestInterface, ...]:
    """`guest-network-get-interfaces`, without `lo`; the first IPv4 address is the primary one
    (else the first address), as KubeVirt's `convertToInterfaces`."""
    out = []
    for item in _list(answer, "guest-network-get-interfaces"):
        nic = _object(item, "interface")
        name = _str(nic, "name")
        if name == "lo":
            continue
        addresses = [_object(a, "ip-address") for a in _list(nic.get("ip-addresses", []), "ip-addresses")]
        ips = tuple(_str(a, "ip-address") for a in addresses)
        primary = next((_str(a, "ip-address") for a in addresses if a.get("ip-address-type") == "ipv4"), "")
        out.append(GuestInterface(name=name, mac=_str(nic, "hardware-address"), ip=primary or (ips[0] if ips else ""),
                                  ips=ips))
    return tuple(out)


def users(answer: Any) -> tuple[GuestUser, ...]:
    """`guest-get-users`: `login-time` is seconds (a float); libvirt keeps whole milliseconds and
    KubeVirt turns them back into seconds."""
    out = []
    for item in _list(answer, "guest-get-users"):
        user = _object(item, "user")
        seconds = user.get("login-time", 0)
        login = math.floor(float(seconds) * 1000) / 1000 if isinstance(seconds, (int, float)) else 0.0
        out.append(GuestUser(name=_str(user, "user"), domain=_str(user, "domain"), login_time=login))
    return tuple(out)


def filesystems(answer: Any) -> tuple[GuestFilesystem, ...]:
    """`guest-get-fsinfo`: each mount with its disks' serial and bus type."""
    out = []
    for item in _list(answer, "guest-get-fsinfo"):
        fs = _object(item, "filesystem")
        disks = tuple(GuestDisk(serial=_str(d, "serial"), bus_type=_str(d, "bus-type"))
                      for d in (_object(d, "disk") for d in _list(fs.get("disk", []), "disk")))
        out.append(GuestFilesystem(name=_str(fs, "name"), mountpoint=_str(fs, "mountpoint"), type=_str(fs, "type"),
                                   used_bytes=_int(fs, "used-bytes"), total_bytes=_int(fs, "total-bytes"),
                                   disks=disks))
    return tuple(out)


def fs_freeze_status(answer: Any) -> str:
    """`guest-fsfreeze-status`: "frozen" or "thawed"."""
    if answer not in ("frozen", "thawed"):
        raise ValueError(f"guest-fsfreeze-status: unexpected answer {answer!r}")
    return str(answer)
