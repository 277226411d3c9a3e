"""Waiting, in a test's coroutine, for state that has no event to await: another process's files
and children, a counter a stand-in bumps, what a background task records."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


async def until(condition: Callable[[], T], timeout: float, interval: float = 0.01) -> T:
    """Polls `condition` every `interval` seconds and returns its first truthy value; raises
    TimeoutError when `timeout` seconds pass first."""
    async with asyncio.timeout(timeout):
        while not (value := condition()):  # noqa: ASYNC110 - the condition is state no event announces
            await asyncio.sleep(interval)
    return value
