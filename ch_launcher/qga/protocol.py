"""qemu-ga's wire format (pure): a command is a JSON object `{"execute", "arguments"}`; each
reply is one line, `{"return": ...}` or `{"error": {"class": ..., "desc": ...}}`, and the reply
to `guest-sync-delimited` starts with the delimiter byte 0xFF (qemu `qga/qapi-schema.json`,
`qga/main.c`@v7.2; seen from qemu-ga 7.2.22: tests/contract/test_guest_agent.py)."""

from __future__ import annotations

import json
from typing import Any

DELIMITER = b"\xff"
SYNC = "guest-sync-delimited"


class AgentError(Exception):
    """The agent answered a command with an error: `cls` (`GenericError`, `CommandNotFound`,
    ...) and `desc`, its text. `str()` is the text as libvirt shows it."""

    def __init__(self, command: str, cls: str, desc: str) -> None:
        super().__init__(f"unable to execute QEMU agent command '{command}': {desc}")
        self.command = command
        self.cls = cls
        self.desc = desc


class ProtocolError(Exception):
    """A reply the protocol does not allow (not JSON, neither `return` nor `error`)."""


def command(name: str, arguments: dict[str, Any] | None = None) -> bytes:
    """The bytes of one command."""
    message: dict[str, Any] = {"execute": name}
    if arguments is not None:
        message["arguments"] = arguments
    return json.dumps(message, separators=(",", ":")).encode()


def after_delimiter(line: bytes) -> bytes | None:
    """The part of `line` after its last 0xFF (the reply to a sync), or None without one."""
    at = line.rfind(DELIMITER)
    return None if at < 0 else line[at + 1:]


def result(name: str, line: bytes) -> Any:
    """The `return` value of the reply `line` to command `name`. Raises AgentError for an error
    reply, ProtocolError for anything else."""
    try:
        reply = json.loads(line)
    except ValueError:
        raise ProtocolError(f"the reply to {name} is not JSON: {line[:200]!r}") from None
    if isinstance(reply, dict):
        if "return" in reply:
            return reply["return"]
        error = reply.get("error")
        if isinstance(error, dict):
            raise AgentError(name, str(error.get("class", "")), str(error.get("desc", "")))
    raise ProtocolError(f"the reply to {name} is neither a return nor an error: {line[:200]!r}")
