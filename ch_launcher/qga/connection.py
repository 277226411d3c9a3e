"""One connection to the guest agent (`AgentConnection`), over a stream already connected to it.

It is opened with `guest-sync-delimited` (whatever an earlier client left in the stream is
skipped up to the reply's 0xFF) and then carries one command at a time. A reader task reads the
agent's replies as they come, so the connection learns at once when the agent goes: the guest
closes a vsock connection when qemu-ga exits, and the VMM then closes the host's stream
(`lost` is set). A command that gets no reply in time closes the connection: a late reply would
otherwise answer the next command.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
from typing import Any

from ch_launcher.qga.protocol import SYNC, ProtocolError, after_delimiter, command, result

log = logging.getLogger(__name__)


class AgentGone(Exception):
    """The connection is closed (the agent went, or a command timed out); `str()` says why."""


class AgentTimeout(AgentGone):
    """A command got no reply in time; the connection is closed."""


class AgentConnection:
    """Commands to one agent over `reader`/`writer`. `await open()` first; `close()` at the end."""

    _ids = itertools.count(int.from_bytes(os.urandom(3), "big"))

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._lock = asyncio.Lock()           # one command at a time
        self._pending: asyncio.Future[bytes] | None = None
        self._syncing = False                 # skip lines until the sync reply's delimiter
        self._reading: asyncio.Task[None] | None = None
        self.why_lost = ""
        self.lost = asyncio.Event()            # set once the connection is closed, for whatever reason

    async def open(self, timeout: float) -> None:
        """Start reading and synchronise with the agent. Raises AgentGone (closed) on failure."""
        self._reading = asyncio.ensure_future(self._read())
        sync_id = next(self._ids) & 0x7FFFFFFF
        self._syncing = True
        answer = await self.call(SYNC, {"id": sync_id}, timeout=timeout)
        if answer != sync_id:
            self.close(f"the agent answered the sync with {answer!r}, not {sync_id}")
            raise AgentGone(self.why_lost)

    async def call(self, name: str, arguments: dict[str, Any] | None = None, *, timeout: float) -> Any:
        """The agent's `return` value for command `name`. Raises AgentError for the agent's
        error reply (the connection stays open), AgentTimeout when no reply came within
        `timeout` and AgentGone when the connection is or gets closed."""
        async with self._lock:
            if self.lost.is_set():
                raise AgentGone(self.why_lost)
            pending: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
            self._pending = pending
            try:
                self._writer.write(command(name, arguments))
                line = await asyncio.wait_for(asyncio.shield(pending), timeout)
            except TimeoutError:
                self.close(f"{name} got no reply within {timeout:g} s")
                raise AgentTimeout(self.why_lost) from None
            except (OSError, RuntimeError) as e:
                self.close(f"writing {name} failed: {e}")
                raise AgentGone(self.why_lost) from None
            finally:
                self._pending = None
                if not pending.done():
                    pending.cancel()
        try:
            return result(name, line)
        except ProtocolError as e:
            self.close(str(e))
            raise AgentGone(self.why_lost) from None

    async def send(self, name: str, arguments: dict[str, Any] | None = None) -> None:
        """A command the agent does not answer when it succeeds (`guest-shutdown`): written,
        not awaited. Raises AgentGone when the connection is closed."""
        async with self._lock:
            if self.lost.is_set():
                raise AgentGone(self.why_lost)
            try:
                self._writer.write(command(name, arguments))
                await self._writer.drain()
            except (OSError, RuntimeError) as e:
                self.close(f"writing {name} failed: {e}")
                raise AgentGone(self.why_lost) from None

    def close(self, why: str) -> None:
        """Close the connection (idempotent); a command waiting for its reply gets AgentGone."""
        if self.lost.is_set():
            return
        self.why_lost = why
        self.lost.set()
        if self._pending is not None and not self._pending.done():
            self._pending.set_exception(AgentGone(why))
        with contextlib.suppress(OSError, RuntimeError):
            self._writer.close()
        if self._reading is not None and self._reading is not asyncio.current_task():
            self._reading.cancel()

    async def _read(self) -> None:
        why = "the agent closed the connection"
        try:
            while True:
                line = await self._reader.readline()
                if not line.endswith(b"\n"):
                    break  # end of stream (possibly in the middle of a reply)
                self._received(line)
        except (OSError, ValueError) as e:  # ValueError: a line longer than the reader's limit
            why = f"reading from the agent failed: {e}"
        self.close(why)

    def _received(self, line: bytes) -> None:
        if self._syncing:
            rest = after_delimiter(line)
            if rest is None:
                log.debug("guest agent: skipping %r before the sync reply", line[:200])
                return
            line, self._syncing = rest, False
        pending = self._pending
        if pending is None or pending.done():
            log.warning("guest agent: a reply nobody waits for: %r", line[:200])
            return
        pending.set_result(line)
