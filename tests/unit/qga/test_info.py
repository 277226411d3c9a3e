"""The agent's answers in KubeVirt's shapes (qga.info). The answers are qemu-ga 7.2.22's (Debian
bookworm's qemu-guest-agent, run for real on this machine: tests/contract/test_guest_agent.py),
trimmed; `guest-get-users` with a user is the QAPI schema's shape (qga/qapi-schema.json GuestUser)."""

from __future__ import annotations

from typing import Any

import pytest

from ch_launcher.kubevirt.guest_info import (
    GuestAgentData,
    GuestDisk,
    GuestFilesystem,
    GuestInterface,
    GuestOSInfo,
    GuestUser,
    filesystems_json,
    guest_info_json,
    users_json,
)
from ch_launcher.qga import info

OSINFO = {"name": "Debian GNU/Linux", "kernel-release": "6.18.44-fc-v1252", "version": "12 (bookworm)",
          "pretty-name": "Debian GNU/Linux 12 (bookworm)", "version-id": "12",
          "kernel-version": "#1 SMP PREEMPT_DYNAMIC @0", "machine": "x86_64", "id": "debian"}
INTERFACES = [
    {"name": "lo", "ip-addresses": [{"ip-address-type": "ipv4", "ip-address": "127.0.0.1", "prefix": 8},
                                    {"ip-address-type": "ipv6", "ip-address": "::1", "prefix": 128}],
     "statistics": {"tx-packets": 63625, "rx-bytes": 2660084369}, "hardware-address": "00:00:00:00:00:00"},
    {"name": "ifb0", "hardware-address": "da:4a:6a:b3:b9:8b"},
    {"name": "eth0", "ip-addresses": [{"ip-address-type": "ipv6", "ip-address": "fd00::2", "prefix": 64},
                                      {"ip-address-type": "ipv4", "ip-address": "192.0.2.2", "prefix": 24}],
     "hardware-address": "02:fc:00:00:00:01"},
]
FSINFO = [{"name": "vda", "total-bytes": 108944293888, "mountpoint": "/", "used-bytes": 44113829888, "type": "ext4",
           "disk": [{"bus-type": "virtio", "bus": 0, "unit": 0, "dev": "/dev/vda", "target": 0,
                     "pci-controller": {"bus": 0, "slot": 2, "domain": 0, "function": 0}}]},
          {"name": "7:0", "total-bytes": 6160384, "mountpoint": "/data", "disk": [], "used-bytes": 14336,
           "type": "ext4"}]


def test_the_os_host_name_and_time_zone() -> None:
    assert info.os_info(OSINFO) == GuestOSInfo(
        name="Debian GNU/Linux", kernel_release="6.18.44-fc-v1252", version="12 (bookworm)",
        pretty_name="Debian GNU/Linux 12 (bookworm)", version_id="12", kernel_version="#1 SMP PREEMPT_DYNAMIC @0",
        machine="x86_64", id="debian")
    assert info.os_info({"name": "Debian GNU/Linux", "id": "debian"}).version == ""  # qemu-ga leaves out what it lacks
    assert info.hostname({"host-name": "vm"}) == "vm"
    assert info.timezone({"zone": "UTC", "offset": 0}) == ("UTC", 0)
    assert info.timezone({"offset": 3600}) == ("", 3600)  # no zone name: Windows guests


def test_interfaces_leave_out_lo_and_prefer_the_first_ipv4_address() -> None:
    assert info.interfaces(INTERFACES) == (
        GuestInterface(name="ifb0", mac="da:4a:6a:b3:b9:8b"),
        GuestInterface(name="eth0", mac="02:fc:00:00:00:01", ip="192.0.2.2", ips=("fd00::2", "192.0.2.2")),
    )


def test_users_login_time_is_kept_to_the_millisecond_as_libvirt_keeps_it() -> None:
    assert info.users([{"user": "root", "login-time": 1700000000.1234567},
                       {"user": "Administrator", "domain": "WORKGROUP", "login-time": 1.5}]) == (
        GuestUser(name="root", login_time=1700000000.123), GuestUser(name="Administrator", domain="WORKGROUP",
                                                                    login_time=1.5))


def test_filesystems_keep_their_disks_serial_and_bus() -> None:
    assert info.filesystems(FSINFO) == (
        GuestFilesystem(name="vda", mountpoint="/", type="ext4", used_bytes=44113829888, total_bytes=108944293888,
                        disks=(GuestDisk(bus_type="virtio"),)),
        GuestFilesystem(name="7:0", mountpoint="/data", type="ext4", used_bytes=14336, total_bytes=6160384),
    )


def test_the_agents_version_and_commands() -> None:
    version, commands = info.agent_info({"version": "7.2.22", "supported_commands": [
        {"enabled": True, "name": "guest-ping", "success-response": True},
        {"enabled": False, "name": "guest-fsfreeze-freeze", "success-response": True}]})
    assert (version, commands) == ("7.2.22", (("guest-ping", True), ("guest-fsfreeze-freeze", False)))


@pytest.mark.parametrize("parse, answer", [
    (info.os_info, ["not", "an", "object"]), (info.interfaces, {"name": "eth0"}), (info.users, [1]),
    (info.filesystems, [{"disk": "vda"}]), (info.fs_freeze_status, "melting"),
    (info.agent_info, {"supported_commands": 3}),
])
def test_an_answer_of_the_wrong_shape_is_a_value_error(parse: Any, answer: Any) -> None:
    with pytest.raises(ValueError):
        parse(answer)


def test_get_guest_info_is_virt_launchers_json_of_what_was_heard() -> None:
    data = GuestAgentData(version="7.2.22", supported_commands=(("guest-ping", True), ("guest-shutdown", False)),
                          os_info=info.os_info(OSINFO), hostname="vm", timezone=("UTC", 0),
                          users=(GuestUser("root", login_time=12.5),), filesystems=info.filesystems(FSINFO)[:1],
                          fs_freeze_status="thawed")
    assert guest_info_json(data) == (
        '{"guestAgentVersion":"7.2.22","supportedCommands":[{"name":"guest-ping","enabled":true},'
        '{"name":"guest-shutdown"}],"hostname":"vm","os":{"name":"Debian GNU/Linux",'
        '"kernelRelease":"6.18.44-fc-v1252","version":"12 (bookworm)","prettyName":"Debian GNU/Linux 12 (bookworm)",'
        '"versionId":"12","kernelVersion":"#1 SMP PREEMPT_DYNAMIC @0","machine":"x86_64","id":"debian"},'
        '"timezone":"UTC, 0","userList":[{"userName":"root","loginTime":12.5}],"fsInfo":{"disks":[{"diskName":"vda",'
        '"mountPoint":"/","fileSystemType":"ext4","usedBytes":44113829888,"totalBytes":108944293888,'
        '"disk":[{"busType":"virtio"}]}]},"fsFreezeStatus":"thawed"}')


def test_before_the_agent_is_heard_the_answers_are_empty_as_virt_launchers() -> None:
    assert guest_info_json(GuestAgentData()) == '{"os":{},"timezone":", 0","fsInfo":{"disks":null}}'
    assert users_json(GuestAgentData()) == filesystems_json(GuestAgentData()) == "[]"


def test_guest_info_lists_ten_users_and_filesystems_and_the_lists_all_of_them() -> None:
    users = tuple(GuestUser(f"u{n}") for n in range(12))
    filesystems = tuple(GuestFilesystem(f"d{n}", f"/m{n}", "ext4") for n in range(12))
    data = GuestAgentData(users=users, filesystems=filesystems)
    assert guest_info_json(data).count('"userName"') == 10 and guest_info_json(data).count('"diskName"') == 10
    assert users_json(data).count('"userName"') == 12 and filesystems_json(data).count('"diskName"') == 12
