"""What the guest agent tells, in KubeVirt's shapes (pure).

The Domain carries some of it (`Status.OSInfo`, `Status.Interfaces`, `Status.FSFreezeStatus`:
`api.GuestOSInfo`, `api.InterfaceStatus`, `api.FSFreeze` of kubevirt
`pkg/virt-launcher/virtwrap/api/schema.go@d923fdb815cd`); the rest is answered by the
GetGuestInfo, GetUsers and GetFilesystems RPCs as the JSON of KubeVirt's
`v1.VirtualMachineInstanceGuestAgentInfo`, `[]v1.VirtualMachineInstanceGuestOSUser` and
`[]v1.VirtualMachineInstanceFileSystem` (staging/src/kubevirt.io/api/core/v1/types.go), written
as virt-launcher's `GetGuestInfo`/`GetUsers`/`GetFilesystems` write them
(pkg/virt-launcher/virtwrap/manager.go): Go's field order, its `omitempty` rules, at most
`INFO_LIMIT` users and filesystems in the guest info, all of them in the lists.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

INFO_LIMIT = 10  # GetGuestInfo's users and filesystems (agentData.GetUsers(10), GetFS(10))


@dataclass(frozen=True)
class GuestOSInfo:
    """`api.GuestOSInfo` (from `guest-get-osinfo`)."""

    name: str = ""
    kernel_release: str = ""
    version: str = ""
    pretty_name: str = ""
    version_id: str = ""
    kernel_version: str = ""
    machine: str = ""
    id: str = ""

    def to_domain(self) -> dict[str, str]:
        return {"Name": self.name, "KernelRelease": self.kernel_release, "Version": self.version,
                "PrettyName": self.pretty_name, "VersionId": self.version_id, "KernelVersion": self.kernel_version,
                "Machine": self.machine, "Id": self.id}

    def to_v1(self) -> dict[str, str]:
        pairs = (("name", self.name), ("kernelRelease", self.kernel_release), ("version", self.version),
                 ("prettyName", self.pretty_name), ("versionId", self.version_id),
                 ("kernelVersion", self.kernel_version), ("machine", self.machine), ("id", self.id))
        return {key: value for key, value in pairs if value}


@dataclass(frozen=True)
class GuestInterface:
    """`api.InterfaceStatus`: one guest NIC (from `guest-network-get-interfaces`, `lo` left out)."""

    name: str
    mac: str = ""
    ip: str = ""                 # the first IPv4 address, else the first address
    ips: tuple[str, ...] = ()

    def to_domain(self) -> dict[str, Any]:
        return {"Mac": self.mac, "Ip": self.ip, "IPs": list(self.ips) or None, "InterfaceName": self.name}


@dataclass(frozen=True)
class GuestUser:
    """One logged-in user (from `guest-get-users`); `login_time` in seconds, as KubeVirt reports it."""

    name: str
    domain: str = ""
    login_time: float = 0.0

    def to_v1(self) -> dict[str, Any]:
        out: dict[str, Any] = {"userName": self.name}
        if self.domain:
            out["domain"] = self.domain
        if self.login_time:
            out["loginTime"] = self.login_time
        return out


@dataclass(frozen=True)
class GuestDisk:
    serial: str = ""
    bus_type: str = ""


@dataclass(frozen=True)
class GuestFilesystem:
    """One mounted filesystem (from `guest-get-fsinfo`)."""

    name: str
    mountpoint: str
    type: str
    used_bytes: int = 0
    total_bytes: int = 0
    disks: tuple[GuestDisk, ...] = ()

    def to_v1(self) -> dict[str, Any]:
        out: dict[str, Any] = {"diskName": self.name, "mountPoint": self.mountpoint, "fileSystemType": self.type,
                               "usedBytes": self.used_bytes, "totalBytes": self.total_bytes}
        disks = [{**({"serial": d.serial} if d.serial else {}), "busType": d.bus_type} for d in self.disks]
        if disks:
            out["disk"] = disks
        return out


@dataclass(frozen=True)
class GuestAgentData:
    """What the launcher last heard from the agent (each part None until first heard): what
    GetGuestInfo, GetUsers and GetFilesystems answer and the Domain shows."""

    version: str = ""
    supported_commands: tuple[tuple[str, bool], ...] = ()  # (name, enabled)
    os_info: GuestOSInfo | None = None
    hostname: str = ""
    timezone: tuple[str, int] | None = None                # (zone, offset in seconds)
    interfaces: tuple[GuestInterface, ...] | None = None
    users: tuple[GuestUser, ...] = ()
    filesystems: tuple[GuestFilesystem, ...] = ()
    fs_freeze_status: str = ""                             # "frozen" | "thawed" | "" (never asked)


def guest_info_json(data: GuestAgentData) -> str:
    """GetGuestInfo's answer: `v1.VirtualMachineInstanceGuestAgentInfo` as virt-launcher fills it
    from its agent store (`Timezone` is `"<zone>, <offset>"` even with nothing known, `", 0"`)."""
    zone, offset = data.timezone or ("", 0)
    out: dict[str, Any] = {}
    if data.version:
        out["guestAgentVersion"] = data.version
    if data.supported_commands:
        out["supportedCommands"] = [{"name": name, **({"enabled": True} if enabled else {})}
                                    for name, enabled in data.supported_commands]
    if data.hostname:
        out["hostname"] = data.hostname
    out["os"] = (data.os_info or GuestOSInfo()).to_v1()
    out["timezone"] = f"{zone}, {offset}"
    if data.users:
        out["userList"] = [u.to_v1() for u in data.users[:INFO_LIMIT]]
    out["fsInfo"] = {"disks": [f.to_v1() for f in data.filesystems[:INFO_LIMIT]] or None}
    if data.fs_freeze_status:
        out["fsFreezeStatus"] = data.fs_freeze_status
    return json.dumps(out, separators=(",", ":"))


def users_json(data: GuestAgentData) -> str:
    """GetUsers' answer: every user (`[]` when none)."""
    return json.dumps([u.to_v1() for u in data.users], separators=(",", ":"))


def filesystems_json(data: GuestAgentData) -> str:
    """GetFilesystems' answer: every filesystem (`[]` when none)."""
    return json.dumps([f.to_v1() for f in data.filesystems], separators=(",", ":"))
