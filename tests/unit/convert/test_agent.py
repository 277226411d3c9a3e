"""The guest agent's vsock on every VM, and what KubeVirt asks of the agent (convert/agent.py)."""

from __future__ import annotations

from typing import Any

import pytest

from ch_launcher.convert import check
from ch_launcher.convert.agent import AGENT_PORT, configure_guest_agent
from ch_launcher.convert.context import Translation
from ch_launcher.convert.devices import configure_devices
from ch_launcher.convert.plan import AgentCredential
from tests.unit.convert.netbuild import UID, fields, translation, vmi

COMMAND = "qemu-ga --method=vsock-listen --path=4294967295:1023"


def plain(**spec: Any) -> dict[str, Any]:
    """A VMI whose devices draw no warning of their own (no display to drop)."""
    return vmi(devices={"autoattachGraphicsDevice": False}, **spec)


def run(body: dict[str, Any], **env: Any) -> Translation:
    t = translation(body, **env)
    configure_devices(t)
    configure_guest_agent(t)
    return t


def ssh(secret: str, users: list[str] | None = None, method: str = "qemuGuestAgent") -> dict[str, Any]:
    agent = {"users": users} if users is not None else {}
    return {"sshPublicKey": {"source": {"secret": {"secretName": secret}},
                             "propagationMethod": {method: agent if method == "qemuGuestAgent" else {}}}}


def password(secret: str) -> dict[str, Any]:
    return {"userPassword": {"source": {"secret": {"secretName": secret}}, "propagationMethod": {"qemuGuestAgent": {}}}}


def test_every_vm_gets_a_vsock_with_the_local_cid_and_the_agent_is_reached_on_its_port(tmp_path: Any) -> None:
    t = run(plain(), private_dir=str(tmp_path))
    assert t.problems == [] and t.warnings == []  # nothing needs the agent: nothing to warn about
    assert t.config.vsock is not None
    assert t.config.vsock.to_api() == {"cid": 3, "socket": f"{tmp_path}/{UID}/vsock", "id": "_vsock"}
    assert t.guest_agent is not None
    assert (t.guest_agent.socket, t.guest_agent.port, t.guest_agent.device, t.guest_agent.credentials) == (
        f"{tmp_path}/{UID}/vsock", AGENT_PORT, "_vsock", ())


def test_the_vsock_autoattach_vsock_asked_for_carries_the_agent_with_kubevirts_cid() -> None:
    body = vmi(devices={"autoattachVSOCK": True})
    body["status"] = {"VSOCKCID": 1234}
    t = run(body)
    assert t.config.vsock is not None and t.config.vsock.cid == 1234
    assert t.guest_agent is not None and t.guest_agent.socket == t.config.vsock.socket


def test_the_vm_plan_names_the_agent_and_admission_sees_one_vsock_device() -> None:
    verdict = check(vmi())
    assert verdict.allowed and verdict.plan is not None
    assert verdict.plan.guest_agent is not None and verdict.plan.config.vsock is not None


@pytest.mark.parametrize("probe", ["livenessProbe", "readinessProbe"])
@pytest.mark.parametrize("kind, body", [("exec", {"command": ["cat", "/tmp/ready"]}), ("guestAgentPing", {})])
def test_a_probe_through_the_agent_warns_how_the_guest_must_run_it(probe: str, kind: str, body: dict[str, Any]) -> None:
    t = run(plain(**{probe: {kind: body}}))
    assert t.problems == []
    assert fields(t.warnings) == [f"spec.{probe}.{kind}"]
    assert COMMAND in t.warnings[0].message and "virtio-vsock port 1023" in t.warnings[0].message


def test_access_credentials_through_the_agent_are_planned_with_kubevirts_secret_directories() -> None:
    t = run(plain(accessCredentials=[ssh("keys", ["root", "fedora"]), password("pw"), ssh("ci", method="noCloud")]),
            private_dir="/p")
    assert t.problems == []
    assert t.guest_agent is not None
    assert t.guest_agent.credentials == (
        AgentCredential("spec.accessCredentials[0].sshPublicKey", "ssh", "/p/secret/keys-access-cred",
                        ("root", "fedora")),
        AgentCredential("spec.accessCredentials[1].userPassword", "password", "/p/secret/pw-access-cred"),
    )  # the noCloud one is cloud-init's
    assert fields(t.warnings) == ["spec.accessCredentials[0].sshPublicKey", "spec.accessCredentials[1].userPassword"]
    assert all(COMMAND in w.message for w in t.warnings)


@pytest.mark.parametrize("cred, field", [
    (ssh("keys", []), "spec.accessCredentials[0].sshPublicKey.propagationMethod.qemuGuestAgent.users"),
    ({"userPassword": {"propagationMethod": {"qemuGuestAgent": {}}}},
     "spec.accessCredentials[0].userPassword.source.secret.secretName"),
])
def test_an_agent_credential_without_a_secret_or_users_is_refused(cred: dict[str, Any], field: str) -> None:
    t = run(vmi(accessCredentials=[cred]))
    assert fields(t.problems) == [field]
    assert t.guest_agent is not None and t.guest_agent.credentials == ()


def test_a_whole_vmi_with_agent_credentials_is_admitted() -> None:
    verdict = check(vmi(accessCredentials=[ssh("keys", ["root"]), password("pw")]))
    assert verdict.allowed, [p.message for p in verdict.problems]
