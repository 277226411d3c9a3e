"""The QEMU guest agent on the real cloud-hypervisor: a real ch-launcher process boots the Linux
guest of tests/agent_guest.py (../shared's kernel, an initramfs with Debian's qemu-ga started as
docs/features.md tells users: `qemu-ga --method=vsock-listen --path=4294967295:1023`), and
virt-handler's agent RPCs reach the real agent through Cloud Hypervisor's hybrid vsock.

One boot serves the whole story (the guest takes a minute or more to boot here): AgentConnected,
status.guestOSInfo with the guest's kernel and hostname, userlist and fslist, the ping and exec
probes, a freeze through virt-handler's RPC and through virt-freezer (the Velero hook) that the
guest's own kernel reports, SSH keys from accessCredentials in the guest's authorized_keys, and
the agent stopping and starting again. The same story on the simulated VMM, piece by piece:
test_guest_agent.py.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import agent_guest
from tests.builders import with_spec
from tests.framework.virt_handler import DomainEvent
from tests.functional.agent_support import (
    NOT_CONNECTED,
    answer,
    answer_when,
    execute,
    guest_info,
    ping,
    until_agent,
    vmi_call,
    write_secret,
)
from tests.functional.harness import Harness, RealVmm, make_vmi

# a Linux boot: 5-30 min here, so apart from `make test` (marker linux_guest: `make test-linux-guest`)
pytestmark = [pytest.mark.real_vmm, pytest.mark.linux_guest, pytest.mark.timeout(2400)]

KEYS = {"key1": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKch-first kch@test\n",
        "key2": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKch-second kch@test"}
BOOT_TIMEOUT = 1800.0  # the kernel runs emulated: 5 minutes here with a load of 10, over 15 under the full suite


@pytest.fixture
def agent_vm(tmp_path: Path) -> Iterator[Harness]:
    real = RealVmm.from_environment(tiny_guest=True)
    if isinstance(real, str):
        pytest.skip(f"real cloud-hypervisor: {real}")
    reason = agent_guest.missing()
    if reason:
        pytest.skip(f"the Linux guest with qemu-ga: {reason}")
    credentials = [{"sshPublicKey": {"source": {"secret": {"secretName": "keys"}},
                                     "propagationMethod": {"qemuGuestAgent": {"users": ["root"]}}}}]
    vmi = make_vmi(with_spec(accessCredentials=credentials))
    spec = vmi["spec"]
    spec["domain"]["memory"]["guest"] = spec["domain"]["resources"]["requests"]["memory"] = "256Mi"
    spec["domain"]["firmware"]["kernelBoot"] = {
        "kernelArgs": agent_guest.command_line(),
        "container": {"image": "registry:5000/agent-guest:devel", "kernelPath": "/boot/vmlinux",
                      "initrdPath": "/boot/initramfs.cpio"}}
    h = Harness(vmi=vmi, real=dataclasses.replace(real, tiny_guest=False))
    try:
        kernel_boot = h.layout.container_disk_dir / "kernel-boot"  # the kernel-boot container's files
        kernel_boot.mkdir()
        shutil.copyfile(agent_guest.kernel(), kernel_boot / "vmlinux")
        agent_guest.initramfs(tmp_path).rename(kernel_boot / "initramfs.cpio")
        disk = h.layout.container_disk_dir / "disk_0.img"  # the containerDisk: the guest's /data
        subprocess.run(["mkfs.ext4", "-q", "-F", str(disk)], check=True, capture_output=True, timeout=60)
        write_secret(h.layout.private_dir / "secret" / "keys-access-cred", KEYS)
        yield h
    finally:
        h.close()


def credential(event: DomainEvent) -> dict[str, Any] | None:
    """The AccessCredential metadata virt-handler reads AccessCredentialsSynchronized from."""
    found: dict[str, Any] | None = (event.domain or {}).get("Spec", {}).get("Metadata", {}).get(
        "KubeVirt", {}).get("AccessCredential")
    return found


def test_virt_handlers_agent_rpcs_reach_debians_qemu_ga_over_the_real_vmms_vsock(agent_vm: Harness) -> None:
    h = agent_vm
    h.run(h.boot())
    connected = h.run(until_agent(h, "connected", timeout=BOOT_TIMEOUT))
    assert connected.status == "Running"

    # status.guestOSInfo and virtctl guestosinfo: the guest's own kernel and name
    info = h.run(answer_when(h, "GetGuestInfo", "guestInfoResponse", lambda i: i.get("hostname"), timeout=60))
    version = subprocess.run(["/usr/sbin/qemu-ga", "--version"], capture_output=True, text=True, check=True,
                             timeout=30).stdout.split()[-1]
    assert info["guestAgentVersion"] == version and info["hostname"] == agent_guest.HOSTNAME
    assert info["os"]["kernelRelease"] == "6.1.192" and info["os"]["id"] == "debian"
    assert info["os"]["machine"] == "x86_64"
    assert {"name": "guest-fsfreeze-freeze", "enabled": True} in info["supportedCommands"]
    shown = h.run(h.recorder.wait_for(lambda e: (e.domain or {})["Status"]["OSInfo"].get("KernelRelease") == "6.1.192"))
    assert shown.domain is not None and shown.domain["Status"]["OSInfo"]["Id"] == "debian"

    # virtctl userlist and fslist
    # nobody is logged in, and this guest's kernel (tinyconfig) has no file locking, without which
    # glibc reads no utmp: the agent lists no user (a logged-in user: test_guest_agent.py)
    assert h.run(answer(h, "GetUsers", "guestUserListResponse")) == []
    filesystems = h.run(answer(h, "GetFilesystems", "guestFilesystemsResponse"))
    data = [fs for fs in filesystems if fs["mountPoint"] == "/data"]
    assert [(fs["diskName"], fs["fileSystemType"], fs["disk"][0]["busType"]) for fs in data] == [
        ("vda", "ext4", "virtio")], filesystems
    assert 0 < data[0]["usedBytes"] < data[0]["totalBytes"]

    # the guestAgentPing and exec probes (virt-probe's RPCs)
    assert ping(h).response.success
    hostname = execute(h, "cat", "/etc/hostname", timeout=30)
    assert (hostname.response.success, hostname.exitCode, hostname.stdOut) == (True, 0, "agent-guest\n"), (
        hostname.response.message)
    missing = execute(h, "cat", "/nonexistent", timeout=30)
    assert (missing.response.success, missing.exitCode) == (True, 1)

    # accessCredentials: the Secret's keys are root's authorized_keys in the guest
    synced = h.run(h.recorder.wait_for(lambda e: credential(e) is not None, timeout=60))
    assert credential(synced) == {"Succeeded": True, "Message": ""}
    keys = execute(h, "cat", "/root/.ssh/authorized_keys", timeout=30)
    assert keys.exitCode == 0 and sorted(keys.stdOut.splitlines()) == sorted(k.strip() for k in KEYS.values())

    # a freeze (the snapshot controller's RPC), then virt-freezer's (the Velero hook)
    assert vmi_call(h, "FreezeVirtualMachine", unfreezeTimeoutSeconds=300).success
    h.run(answer_when(h, "GetGuestInfo", "guestInfoResponse", lambda i: i["fsFreezeStatus"] == "frozen"))
    assert vmi_call(h, "UnfreezeVirtualMachine").success
    h.run(answer_when(h, "GetGuestInfo", "guestInfoResponse", lambda i: i["fsFreezeStatus"] == "thawed"))
    for action, status in (("--freeze", "frozen"), ("--unfreeze", "thawed")):
        done = subprocess.run([sys.executable, "-m", "ch_launcher.freezer", action, "--name", "testvmi",
                               "--namespace", "default", "--socket", str(h.layout.cmd_socket)],
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0 and "No guest agent" not in done.stderr, done.stderr
        assert guest_info(h)["fsFreezeStatus"] == status

    # the agent stops: disconnected at once, the probes fail; started again: connected
    mark = len(h.recorder.events)
    agent_guest.run(str(h.console_socket), "killall qemu-ga")
    h.run(until_agent(h, "disconnected", since=mark, timeout=60))
    failed = ping(h)
    assert (failed.response.success, failed.response.message) == (False, NOT_CONNECTED)
    assert execute(h, "true").exitCode == -1
    mark = len(h.recorder.events)
    agent_guest.run(str(h.console_socket), f"{agent_guest.AGENT_COMMAND} &")
    h.run(until_agent(h, "connected", since=mark, timeout=60))
    assert ping(h).response.success
