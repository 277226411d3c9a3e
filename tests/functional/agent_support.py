"""What the guest-agent stories (test_guest_agent.py on the simulated VMM, test_guest_agent_real_vmm.py
on the real one) do as virt-handler: read the agent's channel in the Domain, call the agent RPCs
(GetGuestInfo, GetUsers, GetFilesystems, GuestPing, Exec, Freeze/Unfreeze) on a Harness's
launcher, and lay out a Secret's files as kubelet does."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ch_launcher._proto import kubevirt_cmd_v1_pb2 as cmd_pb2
from tests.framework.virt_handler import DomainEvent
from tests.functional.harness import Harness

NOT_CONNECTED = ("LibvirtError(Code=86, Domain=10, Message='Guest agent is not responding: QEMU guest agent is not "
                 "connected')")


def agent_state(event: DomainEvent) -> str:
    """The agent channel's state in a Domain, as virt-handler reads it ("" when there is no channel)."""
    channels = ((event.domain or {}).get("Spec", {}).get("Devices", {}).get("Channels")) or []
    return next((c["Target"].get("State", "") for c in channels
                 if (c.get("Target") or {}).get("Name") == "org.qemu.guest_agent.0"), "")


async def until_agent(h: Harness, state: str, *, since: int = 0, timeout: float = 15.0) -> DomainEvent:
    return await h.recorder.wait_for(lambda e: agent_state(e) == state, timeout=timeout, since=since)


def guest_info(h: Harness) -> dict[str, Any]:
    return dict(h.run(answer(h, "GetGuestInfo", "guestInfoResponse")))


async def answer(h: Harness, rpc: str, field: str) -> Any:
    """The JSON an agent RPC answers (GetGuestInfo, GetUsers, GetFilesystems)."""
    assert h.client is not None
    reply = await h.client.call(rpc)
    assert reply.response.success
    return json.loads(getattr(reply, field))


async def answer_when(h: Harness, rpc: str, field: str, ready: Callable[[Any], bool], timeout: float = 20.0) -> Any:
    """What `rpc` answers once `ready(answer)` holds: the launcher serves what the agent told at
    its last poll, and no event says when it polled (tests/polling.py's rule)."""
    async with asyncio.timeout(timeout):
        while not ready(value := await answer(h, rpc, field)):  # noqa: ASYNC110 - no event says the agent was polled
            await asyncio.sleep(0.1)
    return value


def ping(h: Harness) -> Any:
    assert h.client is not None
    name = f"{h.vmi['metadata']['namespace']}_{h.vmi['metadata']['name']}"
    return h.run(h.client.call("GuestPing", cmd_pb2.GuestPingRequest(domainName=name, timeoutSeconds=1)))


def execute(h: Harness, *command: str, timeout: int = 1) -> Any:
    assert h.client is not None
    name = f"{h.vmi['metadata']['namespace']}_{h.vmi['metadata']['name']}"
    request = cmd_pb2.ExecRequest(domainName=name, Command=command[0], Args=list(command[1:]),
                                  timeoutSeconds=timeout)
    return h.run(h.client.call("Exec", request))


def vmi_call(h: Harness, rpc: str, **fields: Any) -> Any:
    assert h.client is not None
    vmi = cmd_pb2.VMI(vmiJson=json.dumps(h.vmi).encode())
    request = (cmd_pb2.FreezeRequest(vmi=vmi, **fields) if rpc == "FreezeVirtualMachine"
               else cmd_pb2.VMIRequest(vmi=vmi))
    return h.run(h.client.call(rpc, request))


def write_secret(directory: Path, files: dict[str, str]) -> None:
    """A Secret's files as kubelet's atomic writer leaves them: `..data` and a timestamped directory."""
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.iterdir():
        if not old.name.startswith(".."):
            old.unlink()
    for name, text in files.items():
        (directory / name).write_text(text)
    (directory / "..2026_08_22_10_00_00.000000001").mkdir(exist_ok=True)
