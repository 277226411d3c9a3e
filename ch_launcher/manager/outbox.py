"""The events for virt-handler, in the order they happened, handed to the sink one at a time."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from typing import Any

from ch_launcher.manager.settings import EventSink

log = logging.getLogger(__name__)


class Outbox:
    """A queue in front of the `EventSink`: `put_*` never waits; one task delivers in order.
    Waits on an event while empty (no polling)."""

    def __init__(self, sink: EventSink | None) -> None:
        self._sink = sink
        self._items: collections.deque[tuple[str, Any]] = collections.deque()
        self._ready = asyncio.Event()
        self._empty = asyncio.Event()
        self._empty.set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._pump(), name="domain-events")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def put_domain(self, domain_json: str, event_type: str) -> None:
        self._put(("domain", (domain_json, event_type)))

    def put_k8s_event(self, **event: str) -> None:
        self._put(("k8s", event))

    def _put(self, item: tuple[str, Any]) -> None:
        self._items.append(item)
        self._empty.clear()
        self._ready.set()

    async def _pump(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            while self._items:
                kind, payload = self._items.popleft()
                if self._sink is None:
                    continue
                try:
                    if kind == "domain":
                        await self._sink.send_domain(*payload)
                    else:
                        await self._sink.send_k8s_event(**payload)
                except Exception:  # noqa: BLE001 - a broken sink must not stop the VM's events
                    log.exception("could not queue a %s event for virt-handler", kind)
            self._empty.set()

    async def flush(self, timeout: float) -> bool:
        """Wait until every queued event went to virt-handler (or `timeout`); True if so."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            await asyncio.wait_for(self._empty.wait(), timeout)
        except TimeoutError:
            return False
        if self._sink is None:
            return True
        return await self._sink.flush(max(0.0, deadline - loop.time()))
