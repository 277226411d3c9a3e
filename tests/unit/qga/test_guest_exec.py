"""A command run in the guest as virt-launcher runs it (qga.guest_exec)."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest

from ch_launcher.qga.guest_exec import Completed, GuestExecFailed, guest_exec
from ch_launcher.qga.protocol import AgentError


class Scripted:
    """Answers `guest-exec` with a pid and `guest-exec-status` from `statuses`, in order."""

    def __init__(self, *statuses: dict[str, Any], pid: Any = 42) -> None:
        self.statuses = list(statuses)
        self.pid = pid
        self.calls: list[tuple[str, dict[str, Any] | None]] = []
        self.timeouts: list[float] = []

    async def call(self, name: str, arguments: dict[str, Any] | None = None, *, timeout: float) -> Any:
        self.calls.append((name, arguments))
        self.timeouts.append(timeout)
        if name == "guest-exec":
            return {"pid": self.pid}
        if len(self.statuses) > 1:
            return self.statuses.pop(0)
        return self.statuses[0]


def test_the_exit_code_and_output_once_the_process_exited() -> None:
    agent = Scripted({"exited": False}, {"exited": True, "exitcode": 3, "out-data": base64.b64encode(b"out\n").decode(),
                                         "err-data": "ZXJyCg=="})
    done = asyncio.run(guest_exec(agent, "/bin/sh", ["-c", "exit 3"], 1))
    assert done == Completed(exit_code=3, stdout="out\n")
    assert agent.calls[0] == ("guest-exec", {"path": "/bin/sh", "arg": ["-c", "exit 3"], "capture-output": True})
    assert [c[0] for c in agent.calls[1:]] == ["guest-exec-status", "guest-exec-status"]


def test_a_process_still_running_at_the_timeout_fails_with_virt_launchers_text() -> None:
    with pytest.raises(GuestExecFailed, match=r"Timed out waiting for guest pid \[42\] for command \[sleep\] to exit"):
        asyncio.run(guest_exec(Scripted({"exited": False}), "sleep", ["9"], 1))


def test_no_pid_is_a_failure() -> None:
    with pytest.raises(GuestExecFailed, match=r"Invalid pid \[0\]"):
        asyncio.run(guest_exec(Scripted(pid=0), "true", [], 1))


def test_a_program_the_guest_does_not_have_is_the_agents_error() -> None:
    class Missing(Scripted):
        async def call(self, name: str, arguments: dict[str, Any] | None = None, *, timeout: float) -> Any:
            raise AgentError(name, "GenericError", "Guest agent command failed, error was 'Failed to execute child "
                                                   "process \u201cnope\u201d (No such file or directory)'")

    with pytest.raises(AgentError, match="Failed to execute child process"):
        asyncio.run(guest_exec(Missing(), "nope", [], 1))


def test_the_agent_may_take_the_probes_whole_timeout_to_start_the_command() -> None:
    """A busy guest forks slowly (the Linux guest on this machine's emulated kernel answered
    guest-exec after 7 s): the start may take the probe's timeout; each status call the usual 5 s."""
    agent = Scripted({"exited": True, "exitcode": 0})
    asyncio.run(guest_exec(agent, "true", [], 30, call_timeout=5.0))
    assert agent.timeouts == [30, 5.0]
    asyncio.run(guest_exec(agent, "true", [], 1, call_timeout=5.0))
    assert agent.timeouts[2:] == [5.0, 5.0]
