"""The simulated guest's qemu-ga (tests/fakes/fakech_agent.py) against Debian's qemu-ga run for
real (tests/real_agent.py): the same conversation with both, answer for answer.

What is compared: the framing (one line per reply, the sync's 0xFF), which commands succeed and
which fail, the agent's error classes and texts, the keys of every answer and the values that
do not depend on the machine (the sync's id, the freeze counts and states, the commands that
stay enabled while frozen, file handles, exec status, the SSH keys written, the one-client-at-a-
time rule). Both guests hold one freezable filesystem, a root user and `/etc/kch-test`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests import real_agent
from tests.fakes.fakech_agent import COMMANDS, FROZEN_ALLOWED, Agent, Guest

pytestmark = pytest.mark.root


class Client:
    """A plain client of one agent: writes a command, reads one line."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(path)
        self.sock.settimeout(10)
        self.buffer = b""

    def raw(self, command: dict[str, Any]) -> bytes:
        self.sock.sendall(json.dumps(command).encode())
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise AssertionError(f"the agent closed the connection after {command}")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line + b"\n"

    def call(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        line = self.raw({"execute": name, **({"arguments": arguments} if arguments is not None else {})})
        reply: dict[str, Any] = json.loads(line.lstrip(b"\xff"))
        return reply

    def exec_status(self, pid: int) -> dict[str, Any]:
        """`guest-exec-status` once the process exited (the real one takes a moment)."""
        deadline = time.monotonic() + 10
        while True:
            status = self.call("guest-exec-status", {"pid": pid})["return"]
            if status.get("exited") or time.monotonic() > deadline:
                assert isinstance(status, dict)
                return status
            time.sleep(0.05)  # a guest process exits on its own: nothing announces it

    def close(self) -> None:
        self.sock.close()


@contextlib.contextmanager
def stand_in() -> Iterator[str]:
    """The stand-in agent on a unix socket, as the simulated guest runs it (one disk: one
    filesystem; /etc/kch-test written on its console), one client served at a time."""
    guest = Guest({"disks": [{"path": "/disk.img"}]}, lambda mode: None)
    guest.console("echo hello from the guest > /etc/kch-test")
    agent = Agent(guest)
    directory = tempfile.mkdtemp(prefix="kqs", dir="/tmp")
    path = os.path.join(directory, "qga.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(8)
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            conn.settimeout(0.1)
            with conn:
                while not stop.is_set():
                    try:
                        data = conn.recv(65536)
                    except TimeoutError:
                        continue
                    if not data:
                        agent.buffer = b""
                        break
                    conn.sendall(agent.feed(data))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        stop.set()
        thread.join(5)
        listener.close()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def agents() -> Iterator[dict[str, str]]:
    reason = real_agent.unavailable()
    if reason:
        pytest.skip(f"Debian's qemu-ga: {reason}")
    with real_agent.RealAgent() as real, stand_in() as fake:
        yield {"real": real.socket, "fake": fake}


def conversation(path: str) -> dict[str, Any]:
    """The same exchange with one agent; what it answered, keyed by step."""
    seen: dict[str, Any] = {}
    c = Client(path)
    try:
        seen["sync framing"] = c.raw({"execute": "guest-sync-delimited", "arguments": {"id": 4242}})
        seen["ping framing"] = c.raw({"execute": "guest-ping"})
        info = c.call("guest-info")["return"]
        seen["version keys"] = sorted(info)
        seen["command keys"] = sorted({k for command in info["supported_commands"] for k in command})
        seen["commands"] = [(cmd["name"], cmd["success-response"]) for cmd in info["supported_commands"]]
        for name in ("guest-get-osinfo", "guest-get-host-name", "guest-get-timezone"):
            seen[f"{name} keys"] = sorted(c.call(name)["return"])
        seen["users"] = c.call("guest-get-users")
        fsinfo = c.call("guest-get-fsinfo")["return"]
        seen["fsinfo"] = (len(fsinfo), sorted(fsinfo[0]))
        seen["interface keys"] = sorted({k for nic in c.call("guest-network-get-interfaces")["return"]
                                         for k in nic} & {"name", "hardware-address"})
        seen["unknown"] = c.call("guest-nope")
        seen["unexpected"] = c.call("guest-ping", {"x": 1})
        seen["missing"] = c.call("guest-exec", {})

        # exec and files
        started = c.call("guest-exec", {"path": "cat", "arg": ["/etc/kch-test"], "capture-output": True})["return"]
        status = c.exec_status(started["pid"])
        seen["exec keys"] = sorted(status)
        seen["exec"] = (status["exitcode"], base64.b64decode(status["out-data"]))
        seen["exec again"] = c.call("guest-exec-status", {"pid": started["pid"]})
        failed = c.call("guest-exec", {"path": "cat", "arg": ["/nonexistent"], "capture-output": True})["return"]
        status = c.exec_status(failed["pid"])
        seen["exec failing"] = (status["exitcode"], sorted(status))
        seen["exec missing"] = c.call("guest-exec", {"path": "/bin/nope", "capture-output": True})
        seen["open missing"] = c.call("guest-file-open", {"path": "/nonexistent/x", "mode": "r"})
        handle = c.call("guest-file-open", {"path": "/tmp/written", "mode": "w"})["return"]
        seen["write"] = c.call("guest-file-write", {"handle": handle, "buf-b64": base64.b64encode(b"abc\n").decode()})
        seen["close"] = c.call("guest-file-close", {"handle": handle})
        seen["close again"] = c.call("guest-file-close", {"handle": handle})
        handle = c.call("guest-file-open", {"path": "/tmp/written", "mode": "r"})["return"]
        seen["read"] = c.call("guest-file-read", {"handle": handle})
        seen["read at the end"] = c.call("guest-file-read", {"handle": handle})
        c.call("guest-file-close", {"handle": handle})

        # SSH keys and passwords
        keys = ["ssh-ed25519 AAAAC3Nza-one kch@test", "ssh-rsa AAAAB3-two kch@test"]
        seen["ssh add"] = c.call("guest-ssh-add-authorized-keys", {"username": "root", "keys": keys, "reset": True})
        seen["ssh get"] = c.call("guest-ssh-get-authorized-keys", {"username": "root"})
        seen["ssh unknown user"] = c.call("guest-ssh-add-authorized-keys", {"username": "nobody", "keys": keys})
        seen["password unknown user"] = c.call("guest-set-user-password",
                                               {"username": "nobody", "password": "eA==", "crypted": False})
        seen["password not base64"] = c.call("guest-set-user-password",
                                             {"username": "root", "password": "not base64!", "crypted": False})

        # freeze
        seen["status"] = c.call("guest-fsfreeze-status")
        seen["freeze"] = c.call("guest-fsfreeze-freeze")
        seen["status frozen"] = c.call("guest-fsfreeze-status")
        seen["freeze again"] = c.call("guest-fsfreeze-freeze")
        seen["exec frozen"] = c.call("guest-exec", {"path": "true"})
        seen["ping frozen"] = c.call("guest-ping")
        frozen = c.call("guest-info")["return"]["supported_commands"]
        seen["enabled frozen"] = sorted(cmd["name"] for cmd in frozen if cmd["enabled"])
        seen["thaw"] = c.call("guest-fsfreeze-thaw")
        seen["status thawed"] = c.call("guest-fsfreeze-status")
        seen["thaw again"] = c.call("guest-fsfreeze-thaw")

        # one client at a time: a second one is served once the first has gone
        second = Client(path)
        second.sock.sendall(b'{"execute":"guest-ping"}')
        second.sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            second.sock.recv(100)
        c.close()
        second.sock.settimeout(10)
        seen["second client"] = second.sock.recv(100)
        second.close()
    finally:
        c.close()
    return seen


def test_the_stand_in_answers_as_debians_qemu_ga(agents: dict[str, str]) -> None:
    real = conversation(agents["real"])
    fake = conversation(agents["fake"])
    assert real["sync framing"] == b'\xff{"return": 4242}\n' and real["ping framing"] == b'{"return": {}}\n'
    blocked = set(real_agent.BLOCKED) | {"guest-get-devices"}  # blocked there, or off in Debian's build
    assert list(fake["commands"]) == real["commands"], "guest-info: the commands, in qemu-ga's order"
    assert set(fake["enabled frozen"]) == set(real["enabled frozen"]) - blocked == set(FROZEN_ALLOWED)
    differing = {step: (real[step], fake.get(step)) for step in real
                 if step not in ("commands", "enabled frozen") and real[step] != fake.get(step)}
    assert differing == {}, "\n".join(f"{step}:\n  real {r!r}\n  fake {f!r}" for step, (r, f) in differing.items())
    assert [name for name, _ in COMMANDS] == [name for name, _ in real["commands"]]


def test_the_agent_client_speaks_to_debians_qemu_ga(agents: dict[str, str]) -> None:
    """The launcher's own connection and parsers against the real agent (over a unix socket;
    over vsock the same bytes pass)."""
    from ch_launcher.qga import info
    from ch_launcher.qga.connection import AgentConnection

    async def story() -> None:
        reader, writer = await asyncio.open_unix_connection(agents["real"])
        connection = AgentConnection(reader, writer)
        try:
            await connection.open(5.0)
            version, commands = info.agent_info(await connection.call("guest-info", timeout=5.0))
            assert version and ("guest-get-osinfo", True) in commands
            assert info.os_info(await connection.call("guest-get-osinfo", timeout=5.0)).id == "debian"
            assert info.fs_freeze_status(await connection.call("guest-fsfreeze-status", timeout=5.0)) == "thawed"
            [data] = info.filesystems(await connection.call("guest-get-fsinfo", timeout=5.0))
            assert (data.mountpoint, data.type) == ("/data", "ext4")
            assert info.users(await connection.call("guest-get-users", timeout=5.0)) == ()
        finally:
            connection.close("done")

    asyncio.run(story())
