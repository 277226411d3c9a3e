"""One thing at a time: the manager's work runs under one lock, each command within a time
budget, and work that outlives its budget goes on in the background.

The one door for work the manager starts by itself: `background` runs it as a task under the same
lock as the commands (a soft reboot's fresh boot, a panic's destroy, a device leaving, a
migration's end), `later` after a delay, and `watch` runs what only waits and reads (it changes
neither the VM nor its record). Every such task and timer is owned here: `cancel()` ends them all
when the manager closes, and nothing new starts after that."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


class NotStarted(Exception):
    """The budget ran out while other work held the lock; the work was withdrawn. `str()` says
    what held the lock."""


class StillRunning(Exception):
    """The work started but did not finish within its budget; it goes on in the background."""


class Runner:
    """Serialises the manager's work: commands, and what the manager starts by itself."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self.busy_with = ""  # what holds the lock now; "" when it is free
        self._tasks: set[asyncio.Task[Any]] = set()
        self._timers: set[asyncio.TimerHandle] = set()
        self._closed = False

    async def locked(self, what: str, work: Callable[[], Awaitable[T]],
                     started: asyncio.Event | None = None) -> T:
        """`await work()` under the lock, however long that waits; `started` is set once it has
        the lock."""
        async with self._lock:
            if started is not None:
                started.set()
            self.busy_with = what
            try:
                return await work()
            finally:
                self.busy_with = ""

    async def run(self, what: str, work: Callable[[], Awaitable[T]], budget: float,
                  on_late_end: Callable[[BaseException | None], None]) -> T:
        """`await work()` under the lock, within `budget` seconds; its result.

        Raises NotStarted when the lock stayed taken for the whole budget (the work is withdrawn,
        it never runs), StillRunning when the work has started but not finished: it then goes on
        in the background, owned here (`cancel()` ends it), and `on_late_end` gets the exception
        it ends with (None on success; not called if it is cancelled) before the lock is
        released, so the next command sees what it left. The same when the caller is cancelled
        (gRPC cancels a handler whose client hung up): work not started yet is withdrawn, work
        under way goes on and reports its end; the caller gets its CancelledError.
        """
        started = asyncio.Event()
        late = False  # the caller stopped waiting: the outcome goes to on_late_end

        async def reporting() -> T:
            try:
                result = await work()
            except Exception as e:
                if late:
                    self._report(what, on_late_end, e)
                raise
            if late:
                self._report(what, on_late_end, None)
            return result

        task = asyncio.create_task(self.locked(what, reporting, started), name=f"cmd-{what}")
        try:
            return await asyncio.wait_for(asyncio.shield(task), max(0.05, budget))
        except (TimeoutError, asyncio.CancelledError) as e:
            cancelled = isinstance(e, asyncio.CancelledError)
            if task.done():  # it ended as the wait did: its outcome is the command's
                if not cancelled:
                    return task.result()
                if not task.cancelled():
                    self._report(what, on_late_end, task.exception())
                raise
            if not started.is_set():
                task.cancel()
                if cancelled:
                    raise
                raise NotStarted(self.busy_with or "another command") from None
            late = True
            self._tasks.add(task)
            task.add_done_callback(self._late_done)
            if cancelled:
                raise
            raise StillRunning(what) from None

    @staticmethod
    def _report(what: str, on_late_end: Callable[[BaseException | None], None], error: BaseException | None) -> None:
        try:
            on_late_end(error)
        except Exception:  # a failing report must not change the work's outcome
            log.exception("reporting the end of %s failed", what)

    def _late_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # reported through on_late_end already

    def background(self, what: str, work: Callable[[], Awaitable[Any]]) -> None:
        """Run `await work()` under the lock, as a task owned here (after the commands and
        background work already waiting for it); an exception it ends with is logged. Nothing
        runs once the runner is cancelled."""
        self._own(self.locked(what, work), what)

    def watch(self, what: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any] | None:
        """Run `coro` as a task owned here, without the lock: for work that only waits and
        reads (it changes neither the VM nor its record; a change it leads to goes through
        `background` or `locked`, or is an observation handed to the record at once). Returns
        the task, for its caller to cancel earlier; None once the runner is cancelled."""
        return self._own(coro, what)

    def later(self, delay: float, what: str, work: Callable[[], Awaitable[Any]]) -> asyncio.TimerHandle | None:
        """`background(what, work)` after `delay` seconds; a timer owned here (the caller may
        cancel it earlier). None once the runner is cancelled."""
        if self._closed:
            return None

        def fire() -> None:
            self._timers.discard(handle)
            self.background(what, work)

        handle = asyncio.get_running_loop().call_later(delay, fire)
        self._timers = {h for h in self._timers if not h.cancelled()}  # cancelled by their owners meanwhile
        self._timers.add(handle)
        return handle

    def _own(self, coro: Coroutine[Any, Any, Any], what: str) -> asyncio.Task[Any] | None:
        if self._closed:
            coro.close()
            log.debug("not starting %s: the manager is closing", what)
            return None
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._background_done)
        return task

    def _background_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed", exc_info=task.exception())

    async def idle(self, timeout: float) -> bool:
        """Wait until no task of this runner is left (False on timeout): for tests and close."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._tasks:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            await asyncio.wait(list(self._tasks), timeout=remaining)
        return True

    def cancel(self) -> None:
        """Cancel every task and timer still here, and start nothing after (idempotent)."""
        self._closed = True
        for handle in list(self._timers):
            handle.cancel()
        self._timers.clear()
        for task in list(self._tasks):
            task.cancel()
