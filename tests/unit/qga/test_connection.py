"""One connection to the guest agent (qga.connection), over a real unix socket to a stand-in agent
that answers as qemu-ga 7.2.22 does (tests/fakes/fakech_agent.py), or to a peer scripted to misbehave."""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from ch_launcher.qga.connection import AgentConnection, AgentGone, AgentTimeout
from ch_launcher.qga.protocol import AgentError
from tests.fakes.fakech_agent import Agent, Guest

Peer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def connected(peer: Peer) -> AsyncIterator[AgentConnection]:
    """An AgentConnection (not yet opened) to a unix server running `peer` for its one client."""
    directory = tempfile.mkdtemp(prefix="kq", dir="/tmp")
    path = os.path.join(directory, "agent.sock")
    server = await asyncio.start_unix_server(peer, path)
    reader, writer = await asyncio.open_unix_connection(path)
    connection = AgentConnection(reader, writer)
    try:
        yield connection
    finally:
        connection.close("test over")
        server.close()
        os.unlink(path)
        os.rmdir(directory)


def stand_in(guest: Guest | None = None) -> Peer:
    agent = Agent(guest or Guest({}, lambda mode: None))

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(agent.feed(data))
        writer.close()

    return serve


def test_commands_get_the_agents_return_values_and_its_errors_keep_the_connection() -> None:
    async def story() -> None:
        async with connected(stand_in()) as agent:
            await agent.open(2.0)
            assert await agent.call("guest-ping", timeout=2.0) == {}
            assert await agent.call("guest-fsfreeze-status", timeout=2.0) == "thawed"
            with pytest.raises(AgentError) as refused:
                await agent.call("guest-exec", {}, timeout=2.0)
            assert (refused.value.cls, refused.value.desc) == ("GenericError", "Parameter 'path' is missing")
            assert str(refused.value) == ("unable to execute QEMU agent command 'guest-exec': "
                                          "Parameter 'path' is missing")
            assert await agent.call("guest-get-host-name", timeout=2.0) == {"host-name": "fake-guest"}
            assert not agent.lost.is_set()

    asyncio.run(story())


def test_opening_skips_what_an_earlier_client_left_before_the_sync_reply() -> None:
    async def leftovers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.read(4096)
        sync_id = int(request.split(b'"id":')[1].split(b"}")[0])
        writer.write(b'{"return": {}}\n{"error": {"class": "GenericError", "desc": "JSON parse error"}}\n')
        writer.write(b'\xff{"return": %d}\n' % sync_id)
        await reader.read(4096)
        writer.write(b'{"return": "thawed"}\n')
        await reader.read(4096)

    async def story() -> None:
        async with connected(leftovers) as agent:
            await agent.open(2.0)
            assert await agent.call("guest-fsfreeze-status", timeout=2.0) == "thawed"

    asyncio.run(story())


def test_an_agent_that_goes_is_heard_at_once_without_a_command() -> None:
    async def goes(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        agent = stand_in()
        await agent(_OneShot(await reader.read(4096)), writer)  # answers the sync, then closes

    async def story() -> None:
        async with connected(goes) as agent:
            await agent.open(2.0)
            await asyncio.wait_for(agent.lost.wait(), 2.0)
            assert agent.why_lost == "the agent closed the connection"
            with pytest.raises(AgentGone):
                await agent.call("guest-ping", timeout=1.0)

    asyncio.run(story())


def test_a_reply_that_does_not_come_closes_the_connection_so_no_late_reply_answers_the_next() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.read(4096)
        sync_id = int(request.split(b'"id":')[1].split(b"}")[0])
        writer.write(b'\xff{"return": %d}\n' % sync_id)
        await reader.read(4096)  # the next command gets no answer
        await asyncio.sleep(5)

    async def story() -> None:
        async with connected(silent) as agent:
            await agent.open(2.0)
            with pytest.raises(AgentTimeout, match=r"guest-fsfreeze-freeze got no reply within 0\.2 s"):
                await agent.call("guest-fsfreeze-freeze", timeout=0.2)
            assert agent.lost.is_set()
            with pytest.raises(AgentGone):
                await agent.call("guest-ping", timeout=1.0)

    asyncio.run(story())


@pytest.mark.parametrize("reply", [b"not json\n", b'{"neither": 1}\n'])
def test_a_reply_the_protocol_does_not_allow_closes_the_connection(reply: bytes) -> None:
    async def garbled(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.read(4096)
        sync_id = int(request.split(b'"id":')[1].split(b"}")[0])
        writer.write(b'\xff{"return": %d}\n' % sync_id)
        await reader.read(4096)
        writer.write(reply)
        await reader.read(4096)

    async def story() -> None:
        async with connected(garbled) as agent:
            await agent.open(2.0)
            with pytest.raises(AgentGone):
                await agent.call("guest-ping", timeout=2.0)
            assert agent.lost.is_set()

    asyncio.run(story())


def test_a_sync_answered_with_another_id_fails_the_opening() -> None:
    async def confused(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(4096)
        writer.write(b'\xff{"return": 1}\n')
        await reader.read(4096)

    async def story() -> None:
        async with connected(confused) as agent:
            with pytest.raises(AgentGone, match="answered the sync with 1"):
                await agent.open(2.0)

    asyncio.run(story())


class _OneShot(asyncio.StreamReader):
    """A reader that yields `data` once, then the end of the stream."""

    def __init__(self, data: bytes) -> None:
        super().__init__()
        self.feed_data(data)
        self.feed_eof()
