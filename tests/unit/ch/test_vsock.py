"""The host's end of a hybrid vsock (ch.vsock) against listeners that behave as the VMM's does in
each case (the VMM itself: tests/contract/test_vsock.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import tempfile
from collections.abc import Iterator

import pytest

from ch_launcher.ch import vsock


@pytest.fixture
def path() -> Iterator[str]:
    directory = tempfile.mkdtemp(prefix="kv", dir="/tmp")
    yield os.path.join(directory, "vsock")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(directory, "vsock"))
    os.rmdir(directory)


def connect(path: str, port: int = 1023, timeout: float = 0.3) -> None:
    async def attempt() -> None:
        _, writer = await vsock.connect(path, port, timeout)
        writer.close()

    asyncio.run(attempt())


def test_a_listener_that_never_accepts_times_out_and_once_its_backlog_is_full_fails_at_once(path: str) -> None:
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(1)  # the kernel queues backlog + 1
    try:
        for _ in range(2):
            with pytest.raises(vsock.VsockTimeout, match="did not answer"):
                connect(path)
        with pytest.raises(vsock.VsockTimeout, match="backlog is full"):
            connect(path)
    finally:
        listener.close()


def test_a_socket_file_nobody_listens_on_and_a_missing_one_are_unavailable(path: str) -> None:
    with pytest.raises(vsock.VsockUnavailable, match="No such file"):
        connect(path)
    socket.socket(socket.AF_UNIX).bind(path)  # left behind by a VMM that was killed
    with pytest.raises(vsock.VsockUnavailable, match="Connection refused"):
        connect(path)


@pytest.mark.parametrize("answer", [b"", b"BUSY\n"])
def test_a_connection_closed_or_answered_otherwise_is_refused(path: str, answer: bytes) -> None:
    async def story() -> None:
        async def guest(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            assert await reader.readline() == b"CONNECT 1023\n"
            writer.write(answer)
            writer.close()

        server = await asyncio.start_unix_server(guest, path)
        try:
            with pytest.raises(vsock.VsockRefused):
                await vsock.connect(path, 1023, 2.0)
        finally:
            server.close()

    asyncio.run(story())


def test_an_ok_gives_the_stream_to_the_guest(path: str) -> None:
    async def story() -> None:
        async def guest(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readline()
            writer.write(b"OK 1073741824\nhello")
            await writer.drain()

        server = await asyncio.start_unix_server(guest, path)
        try:
            reader, writer = await vsock.connect(path, 1023, 2.0)
            assert await reader.readexactly(5) == b"hello"
            writer.close()
        finally:
            server.close()

    asyncio.run(story())
