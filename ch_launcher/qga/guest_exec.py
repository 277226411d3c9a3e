"""A command run in the guest through the agent, as virt-launcher runs it for exec probes and
access credentials (kubevirt `pkg/virt-launcher/virtwrap/agent/exec.go` `GuestExec`
@d923fdb815cd): `guest-exec` with its output captured, then `guest-exec-status` every tenth of
the timeout until the process has exited or the timeout has passed."""

from __future__ import annotations

import asyncio
import base64
import binascii
from dataclasses import dataclass
from typing import Any, Protocol


class Commands(Protocol):
    """What running a command needs of a connection (`AgentConnection.call`)."""

    async def call(self, name: str, arguments: dict[str, Any] | None = None, *, timeout: float) -> Any: ...


class GuestExecFailed(Exception):
    """The command could not be run or did not end in time; `str()` is virt-launcher's text."""


@dataclass(frozen=True)
class Completed:
    exit_code: int
    stdout: str


async def guest_exec(agent: Commands, command: str, args: list[str], timeout_seconds: int, *,
                     call_timeout: float = 5.0) -> Completed:
    """Run `command args...` in the guest and wait up to `timeout_seconds` for it to exit.

    `guest-exec` itself may take up to `timeout_seconds` (at least `call_timeout`): the agent
    answers it once the process is forked, which a busy guest can take seconds to do, and an
    unanswered call closes the connection. Raises GuestExecFailed when it did not exit in time
    or the agent gave no pid, the agent's errors (AgentError: e.g. the program does not exist)
    and AgentGone as the connection raises them."""
    started = await agent.call("guest-exec", {"path": command, "arg": args, "capture-output": True},
                               timeout=max(call_timeout, timeout_seconds))
    pid = started.get("pid", 0) if isinstance(started, dict) else 0
    if not isinstance(pid, int) or pid <= 0:
        raise GuestExecFailed(f"Invalid pid [{pid}] returned from qemu agent during access credential injection: "
                              f"{started}")
    loop = asyncio.get_running_loop()
    interval = max(0.1, timeout_seconds * 0.1)
    deadline = loop.time() + timeout_seconds
    while True:
        status = await agent.call("guest-exec-status", {"pid": pid}, timeout=call_timeout)
        if isinstance(status, dict) and status.get("exited"):
            try:
                out = base64.b64decode(str(status.get("out-data", "")), validate=True).decode(errors="replace")
            except binascii.Error as e:
                raise GuestExecFailed(f"the output of guest pid [{pid}] is not base64: {e}") from None
            code = status.get("exitcode", 0)
            return Completed(exit_code=code if isinstance(code, int) else -1, stdout=out)
        if loop.time() + interval > deadline:
            raise GuestExecFailed(f"Timed out waiting for guest pid [{pid}] for command [{command}] to exit")
        await asyncio.sleep(interval)
