"""manager.runner: one thing at a time, each within its budget, and what outlives its caller is
still owned (its outcome reported, cancelled with the rest at close)."""

from __future__ import annotations

import asyncio
import gc

import pytest

from ch_launcher.manager import CommandFailed
from ch_launcher.manager.runner import NotStarted, Runner, StillRunning


def _loop_errors(loop: asyncio.AbstractEventLoop) -> list[str]:
    errors: list[str] = []
    loop.set_exception_handler(lambda _, context: errors.append(context["message"]))
    return errors


def test_work_that_outlives_its_budget_reports_its_end_and_the_next_command_sees_it():
    async def story():
        runner = Runner()
        ended: list[BaseException | None] = []
        release = asyncio.Event()

        async def boot() -> str:
            await release.wait()
            raise CommandFailed("booting the VM failed")

        with pytest.raises(StillRunning):
            await runner.run("SyncVMI", boot, 0.1, ended.append)
        seen = asyncio.ensure_future(runner.run("SyncVMI", lambda: asyncio.sleep(0, list(ended)), 5, ended.append))
        release.set()
        assert await seen == [ended[0]], "the late end is reported before the next command runs"
        assert isinstance(ended[0], CommandFailed)

    asyncio.run(story())


def test_a_command_whose_caller_is_cancelled_keeps_running_and_reports_its_end():
    # gRPC cancels the handler when virt-handler hangs up mid-call: the work goes on (a boot
    # half done must finish or clean up), and a Sync's failure must reach the next Sync.
    async def story():
        errors = _loop_errors(asyncio.get_running_loop())
        runner = Runner()
        ended: list[BaseException | None] = []
        started, release = asyncio.Event(), asyncio.Event()

        async def boot() -> str:
            started.set()
            await release.wait()
            raise CommandFailed("booting the VM failed")

        caller = asyncio.ensure_future(runner.run("SyncVMI", boot, 10, ended.append))
        await started.wait()
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        release.set()
        assert await runner.run("Pause", lambda: asyncio.sleep(0, "paused"), 5, ended.append) == "paused"
        assert len(ended) == 1 and isinstance(ended[0], CommandFailed)
        del caller
        gc.collect()
        await asyncio.sleep(0)
        assert errors == [], "every task's exception is retrieved"

    asyncio.run(story())


def test_a_command_whose_caller_is_cancelled_is_cancelled_with_the_rest_at_close():
    async def story():
        runner = Runner()
        started, cancelled = asyncio.Event(), asyncio.Event()

        async def boot() -> str:
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise
            return "booted"

        caller = asyncio.ensure_future(runner.run("SyncVMI", boot, 10, lambda _: None))
        await started.wait()
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        runner.cancel()
        await asyncio.wait_for(cancelled.wait(), 5)

    asyncio.run(story())


def test_a_command_cancelled_before_it_had_the_lock_never_runs():
    async def story():
        runner = Runner()
        ran: list[str] = []
        release = asyncio.Event()
        first = asyncio.ensure_future(runner.run("SyncVMI", release.wait, 10, lambda _: None))
        await asyncio.sleep(0.01)
        caller = asyncio.ensure_future(runner.run("Pause", lambda: asyncio.sleep(0, ran.append("pause")), 10,
                                                  lambda _: None))
        await asyncio.sleep(0.01)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        release.set()
        await first
        await runner.run("Unpause", lambda: asyncio.sleep(0), 5, lambda _: None)
        assert ran == []
        with pytest.raises(NotStarted, match="SyncVMI"):
            blocker = asyncio.ensure_future(runner.run("SyncVMI", asyncio.Event().wait, 10, lambda _: None))
            await asyncio.sleep(0.01)
            await runner.run("Pause", lambda: asyncio.sleep(0), 0.1, lambda _: None)
        blocker.cancel()
        runner.cancel()

    asyncio.run(story())
