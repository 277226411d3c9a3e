"""The QEMU guest agent over vsock, as virt-handler and the pod's helpers meet it: a real
ch-launcher process on the simulated VMM, whose guest runs the stand-in qemu-ga
(tests/fakes/fakech_agent.py) when its console is told to, or from boot (FAKE_CH_GUEST_AGENT).

What virt-handler reads is checked where it reads it: the `org.qemu.guest_agent.0` channel's
state in the Domain (its AgentConnected condition, pkg/virt-handler/vm.go `guestAgentConnected`),
`Status.OSInfo` (status.guestOSInfo), `Status.FSFreezeStatus`, the AccessCredential metadata,
and the JSON of GetGuestInfo, GetUsers and GetFilesystems (virtctl guestosinfo, userlist,
fslist). KubeVirt's own client code decodes the same answers in test_probe.py; the real qemu-ga
answers them on the real VMM in test_guest_agent_real_vmm.py.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ch_launcher import probe as probe_module
from tests.builders import with_spec
from tests.framework.virt_handler import DomainEvent
from tests.functional.agent_support import (
    NOT_CONNECTED,
    agent_state,
    answer,
    answer_when,
    execute,
    guest_info,
    ping,
    until_agent,
    vmi_call,
    write_secret,
)
from tests.functional.harness import Harness, make_vmi
from tests.guest.console import GuestConsole

START_AGENT = "qemu-ga --method=vsock-listen --path=4294967295:1023"
PROMPT = b"fake-guest login: "
AGENT_FROM_BOOT = {"FAKE_CH_GUEST_AGENT": "1023"}

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def harnesses() -> Iterator[list[Harness]]:
    made: list[Harness] = []
    yield made
    for h in made:
        h.close()


def booted(harnesses: list[Harness], *options: Any, env: dict[str, str] | None = None) -> Harness:
    h = Harness(vmi=make_vmi(*options), env=env)
    harnesses.append(h)
    h.run(h.boot())
    return h


def console(h: Harness, *lines: str) -> None:
    """Type each line on the guest's console (through the launcher's virt-serial0), awaiting the prompt."""
    with GuestConsole(str(h.console_socket)) as guest:
        for line in lines:
            guest.send(line.encode() + b"\r")
            guest.read_until(PROMPT)


def test_the_agent_shows_connected_once_it_listens_and_disconnected_once_it_stops(harnesses: list[Harness]) -> None:
    h = booted(harnesses)
    assert agent_state(h.run(until_agent(h, "disconnected"))) == "disconnected"  # a channel, nobody on it yet
    assert guest_info(h) == {"os": {}, "timezone": ", 0", "fsInfo": {"disks": None}}  # as virt-launcher's, empty
    mark = len(h.recorder.events)
    console(h, START_AGENT)
    connected = h.run(until_agent(h, "connected", since=mark))
    assert connected.status == "Running"
    with_os = h.run(h.recorder.wait_for(lambda e: (e.domain or {})["Status"]["OSInfo"]["Name"] != "", since=mark))
    assert with_os.domain is not None and with_os.domain["Status"]["OSInfo"] == {
        "Name": "Debian GNU/Linux", "KernelRelease": "6.6.0-fake", "Version": "12 (bookworm)",
        "PrettyName": "Debian GNU/Linux 12 (bookworm)", "VersionId": "12",
        "KernelVersion": "#1 SMP PREEMPT_DYNAMIC fake", "Machine": "x86_64", "Id": "debian"}
    info = h.run(answer_when(h, "GetGuestInfo", "guestInfoResponse", lambda i: "guestAgentVersion" in i))
    assert info["guestAgentVersion"] == "7.2.22" and info["hostname"] == "fake-guest"
    assert info["timezone"] == "UTC, 0" and info["os"]["prettyName"] == "Debian GNU/Linux 12 (bookworm)"
    assert {"name": "guest-get-osinfo", "enabled": True} in info["supportedCommands"]
    assert {"name": "guest-shutdown", "enabled": True} in info["supportedCommands"]

    mark = len(h.recorder.events)
    console(h, "killall qemu-ga")
    gone = h.run(until_agent(h, "disconnected", since=mark))
    assert gone.status == "Running" and gone.domain is not None
    assert gone.domain["Status"]["OSInfo"]["Name"] == "Debian GNU/Linux"  # what it told stays, as virt-launcher's


def test_ping_and_exec_probes_reach_the_guest_through_the_agent(harnesses: list[Harness]) -> None:
    h = booted(harnesses, env=AGENT_FROM_BOOT)
    h.run(until_agent(h, "connected"))
    assert ping(h).response.success
    missing = execute(h, "cat", "/tmp/ready")
    assert (missing.response.success, missing.exitCode) == (True, 1)  # a probe that fails: the command's code
    console(h, "echo ready > /tmp/ready")
    found = execute(h, "cat", "/tmp/ready")
    assert (found.response.success, found.exitCode, found.stdOut) == (True, 0, "ready\n")
    nothing = execute(h, "/usr/bin/nope")
    assert not nothing.response.success and nothing.exitCode == -1  # virt-probe exits with it: the probe fails
    assert "Failed to execute child process" in nothing.response.message

    console(h, "killall qemu-ga")
    h.run(until_agent(h, "disconnected"))
    failed = ping(h)
    assert (failed.response.success, failed.response.message) == (False, NOT_CONNECTED)
    event = h.run(h.recorder.wait_for_k8s_event("GuestAgentPingFailed"))
    assert event["message"] == "GuestAgentPing probe failed for VMI testvmi"
    assert execute(h, "true").exitCode == -1


def virt_probe(h: Harness, *args: str, socket: str | None = None) -> subprocess.CompletedProcess[str]:
    """The image's `/usr/bin/virt-probe` (`python -ISOO .../probe.py`) as kubelet runs it for the
    pod's probe virt-controller rendered (`--domainName <ns>_<name> --timeoutSeconds N ...`)."""
    name = f"{h.vmi['metadata']['namespace']}_{h.vmi['metadata']['name']}"
    return subprocess.run([sys.executable, "-ISOO", probe_module.__file__, "--socket",
                           socket or str(h.layout.cmd_socket), "--domainName", name, "--timeoutSeconds", "5", *args],
                          capture_output=True, text=True, timeout=30, check=False)


def test_virt_probe_runs_a_vmis_exec_and_ping_probes_as_kubelet_calls_it(harnesses: list[Harness],
                                                                          tmp_path: Path) -> None:
    """virt-controller renders a VMI's `exec` probe as `virt-probe ... --command cmd -- args` and
    its `guestAgentPing` probe as `virt-probe ... --guestAgentPing` in `compute`: the ping passes
    (0) while the agent answers and fails (1) once it stops; exec exits with the guest command's
    code and prints its output, and with 255 when the command could not run (upstream exits -1)."""
    h = booted(harnesses, env=AGENT_FROM_BOOT)
    h.run(until_agent(h, "connected"))
    assert virt_probe(h, "--guestAgentPing").returncode == 0
    missing = virt_probe(h, "--command", "cat", "--", "/tmp/ready")
    assert missing.returncode == 1
    console(h, "echo ready > /tmp/ready")
    found = virt_probe(h, "--command", "cat", "--", "/tmp/ready")
    assert (found.returncode, found.stdout) == (0, "ready\n\n"), found.stderr  # Go's Println of stdOut
    nothing = virt_probe(h, "--command", "/usr/bin/nope")
    assert nothing.returncode == 255 and "Failed executing the command" in nothing.stderr

    console(h, "killall qemu-ga")
    h.run(until_agent(h, "disconnected"))
    failed = virt_probe(h, "--guestAgentPing")
    assert failed.returncode == 1 and "Failed to ping the guest" in failed.stderr
    assert virt_probe(h, "--command", "true").returncode == 255
    absent = str(tmp_path / "absent")
    assert virt_probe(h, "--guestAgentPing", socket=absent).returncode == 1
    assert virt_probe(h, "--command", "true", socket=absent).returncode == 255


def test_users_and_filesystems_are_what_the_agent_lists(harnesses: list[Harness]) -> None:
    h = booted(harnesses)
    console(h, "login root", START_AGENT)  # someone logged in before the agent's first look
    h.run(until_agent(h, "connected"))
    users = h.run(answer_when(h, "GetUsers", "guestUserListResponse", bool))
    assert [u["userName"] for u in users] == ["root"] and users[0]["loginTime"] > 0
    filesystems = h.run(answer(h, "GetFilesystems", "guestFilesystemsResponse"))
    assert filesystems == [{"diskName": "vda1", "mountPoint": "/", "fileSystemType": "ext4",
                            "usedBytes": 256 << 20, "totalBytes": 1 << 30, "disk": [{"busType": "virtio"}]}]
    assert guest_info(h)["fsInfo"]["disks"] == filesystems and guest_info(h)["userList"] == users


def test_freeze_and_unfreeze_go_through_the_agent_and_a_forgotten_thaw_comes_by_itself(
        harnesses: list[Harness]) -> None:
    h = booted(harnesses, env=AGENT_FROM_BOOT)
    h.run(until_agent(h, "connected"))
    mark = len(h.recorder.events)
    assert vmi_call(h, "FreezeVirtualMachine", unfreezeTimeoutSeconds=300).success
    frozen = h.run(h.recorder.wait_for(lambda e: (e.domain or {})["Status"]["FSFreezeStatus"]["Status"] == "frozen",
                                       since=mark))
    assert agent_state(frozen) == "connected"
    assert guest_info(h)["fsFreezeStatus"] == "frozen"
    assert vmi_call(h, "FreezeVirtualMachine", unfreezeTimeoutSeconds=300).success  # already frozen: nothing to do
    assert vmi_call(h, "UnfreezeVirtualMachine").success
    h.run(h.recorder.wait_for(lambda e: (e.domain or {})["Status"]["FSFreezeStatus"]["Status"] == "thawed",
                              since=mark))
    assert vmi_call(h, "UnfreezeVirtualMachine").success  # already thawed

    mark = len(h.recorder.events)
    assert vmi_call(h, "FreezeVirtualMachine", unfreezeTimeoutSeconds=1).success  # and no Unfreeze follows
    h.run(h.recorder.wait_for(lambda e: (e.domain or {})["Status"]["FSFreezeStatus"]["Status"] == "frozen",
                              since=mark))
    h.run(h.recorder.wait_for(lambda e: (e.domain or {})["Status"]["FSFreezeStatus"]["Status"] == "thawed",
                              since=mark))
    assert "Unfreeze was not called for vmi default_testvmi" in h.log_text()


def test_a_paused_vm_keeps_its_agent_connected_and_its_ping_probe_passing(harnesses: list[Harness]) -> None:
    h = booted(harnesses, env=AGENT_FROM_BOOT)
    h.run(until_agent(h, "connected"))
    assert h.client is not None
    h.run(h.client.vmi_command("PauseVirtualMachine", h.vmi))
    paused = h.run(h.recorder.wait_for_status("Paused"))
    assert agent_state(paused) == "connected"
    assert ping(h).response.success  # a VM paused on purpose is healthy (virt-launcher's isPausedButHealthy)
    mark = len(h.recorder.events)
    h.run(h.client.vmi_command("UnpauseVirtualMachine", h.vmi))
    assert agent_state(h.run(h.recorder.wait_for_status("Running", since=mark))) == "connected"
    assert ping(h).response.success
    assert not [e for e in h.recorder.events[mark:] if agent_state(e) == "disconnected"]


def test_a_guest_reboot_disconnects_the_agent_until_the_rebooted_guest_starts_it(harnesses: list[Harness]) -> None:
    h = booted(harnesses, env=AGENT_FROM_BOOT)
    h.run(until_agent(h, "connected"))
    mark = len(h.recorder.events)
    h.run(h.guest_does("reboot"))
    gone = h.run(until_agent(h, "disconnected", since=mark))
    h.run(until_agent(h, "connected", since=h.recorder.events.index(gone)))
    assert ping(h).response.success


def test_ssh_keys_and_passwords_from_access_credentials_reach_the_guest(harnesses: list[Harness]) -> None:
    credentials = [
        {"sshPublicKey": {"source": {"secret": {"secretName": "keys"}},
                          "propagationMethod": {"qemuGuestAgent": {"users": ["root"]}}}},
        {"userPassword": {"source": {"secret": {"secretName": "pw"}}, "propagationMethod": {"qemuGuestAgent": {}}}},
    ]
    h = Harness(vmi=make_vmi(with_spec(accessCredentials=credentials)), env=AGENT_FROM_BOOT)
    harnesses.append(h)
    keys = h.layout.private_dir / "secret" / "keys-access-cred"
    passwords = h.layout.private_dir / "secret" / "pw-access-cred"
    write_secret(keys, {"key1": "ssh-ed25519 AAAAC3Nza-first kch@test\n", "key2": "ssh-rsa AAAAB3-second kch@test"})
    write_secret(passwords, {"root": "s3cret\n"})
    h.run(h.boot())
    synced = h.run(h.recorder.wait_for(lambda e: _credential(e) is not None, timeout=20))
    assert _credential(synced) == {"Succeeded": True, "Message": ""}
    done = execute(h, "cat", "/root/.ssh/authorized_keys")
    assert done.stdOut == "ssh-ed25519 AAAAC3Nza-first kch@test\nssh-rsa AAAAB3-second kch@test"

    mark = len(h.recorder.events)
    write_secret(passwords, {"nobody": "x"})  # kubelet updates the Secret's files: a user the guest lacks
    failed = h.run(h.recorder.wait_for(lambda e: (_credential(e) or {}).get("Succeeded") is False, since=mark,
                                       timeout=40))
    assert _credential(failed) == {"Succeeded": False, "Message": (
        "Error encountered setting password for user [nobody]: unable to execute QEMU agent command "
        "'guest-set-user-password': child process has failed to set user password")}


# --- helpers ---------------------------------------------------------------------------------------


def _credential(event: DomainEvent) -> dict[str, Any] | None:
    meta = (event.domain or {}).get("Spec", {}).get("Metadata", {}).get("KubeVirt", {})
    credential: dict[str, Any] | None = meta.get("AccessCredential")
    return credential


def test_the_backup_hook_freezes_and_thaws_through_the_agent(harnesses: list[Harness]) -> None:
    h = booted(harnesses, env=AGENT_FROM_BOOT)
    h.run(until_agent(h, "connected"))
    h.run(answer_when(h, "GetGuestInfo", "guestInfoResponse", lambda i: "guestAgentVersion" in i))
    for action, status in (("--freeze", "frozen"), ("--unfreeze", "thawed")):
        done = subprocess.run([sys.executable, "-m", "ch_launcher.freezer", action, "--name", "testvmi",
                               "--namespace", "default", "--socket", str(h.layout.cmd_socket)],
                              capture_output=True, text=True, timeout=70, check=False)
        assert done.returncode == 0, done.stderr
        assert "No guest agent" not in done.stderr
        assert guest_info(h)["fsFreezeStatus"] == status  # the launcher heard the agent's answer
