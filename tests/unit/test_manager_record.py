"""manager.record and manager.vmm's sessions on their own: what virt-handler is sent as the VM's
facts change, and which of a VMM's events are news."""

from __future__ import annotations

import asyncio
import json

from ch_launcher.convert import LauncherEnv, translate
from ch_launcher.kubevirt.domain import Reason
from ch_launcher.kubevirt.vmi import parse_vmi
from ch_launcher.lifecycle import VmState
from ch_launcher.manager.record import DomainRecord
from ch_launcher.manager.vmm import VmmSession
from tests.framework.managers import RecordingSink
from tests.unit.convert.vmibuild import vmi as make_vmi


def _record():
    sink = RecordingSink()
    record = DomainRecord(sink)
    vmi = parse_vmi(make_vmi({}))
    record.set_plan(translate(vmi, LauncherEnv()))
    return record, sink, vmi


def _sent(sink):
    return [(kind, d["Status"]["Status"], d["Status"]["Reason"]) for d, kind in sink.domains]


def test_each_change_is_sent_once_in_order_and_the_last_withdraws_the_domain():
    async def story():
        record, sink, vmi = _record()
        record.refresh(vmi)  # no state yet: nothing to show
        record.set_state(VmState.RUNNING, force=True)
        record.user_paused = True
        record.set_state(VmState.PAUSED)
        record.set_state(VmState.PAUSED)  # no change: nothing sent
        record.set_state(VmState.DOWN, down=Reason.SHUTDOWN)
        record.forget()
        assert await record.flush(5)
        assert _sent(sink)[:3] == [("ADDED", "Running", "Unknown"), ("MODIFIED", "Paused", "User"),
                                   ("MODIFIED", "Shutoff", "Shutdown")]
        final = sink.domains[3][0]
        assert final["ObjectMeta"]["deletionTimestamp"] and final["Status"]["Reason"] == "NonExistent"
        assert len(sink.domains) == 4 and record.domain_json == "" and record.forgotten.is_set()
        assert (record.state, record.down, record.user_paused) == (VmState.UNDEFINED, None, False)

    asyncio.run(story())


def test_a_state_set_quietly_is_not_sent_and_the_down_reason_goes_with_down():
    async def story():
        record, sink, vmi = _record()
        record.refresh(vmi)
        record.set_state(VmState.DOWN, down=Reason.CRASHED)
        record.set_state(VmState.RUNNING)
        assert record.down is None
        record.set_state(VmState.UNDEFINED, publish=False)  # a forget follows
        assert await record.flush(5)
        assert _sent(sink) == [("ADDED", "Shutoff", "Crashed"), ("MODIFIED", "Running", "Unknown")]
        assert json.loads(record.domain_json)["Status"]["Status"] == "Running", "nothing rebuilt either"

    asyncio.run(story())


def test_waiting_for_a_change_needs_no_polling():
    async def story():
        record, _, _ = _record()
        waiter = asyncio.ensure_future(record.wait_until(lambda: record.state is VmState.RUNNING, 5))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        record.set_state(VmState.RUNNING)
        assert await waiter
        assert not await record.wait_until(lambda: record.state is VmState.PAUSED, 0.05)

    asyncio.run(story())


class _Process:
    pid = 1


def test_an_event_an_answer_told_of_already_is_stale_once():
    session = VmmSession(_Process(), rest=None)  # type: ignore[arg-type]  (no call made)
    heard = session.events_heard()
    session.answered("pause", heard)  # vm.pause returned before its vm:paused came
    session.heard("vm:paused")
    assert session.stale("vm:paused") and not session.stale("vm:paused")
    heard = session.events_heard()
    session.heard("vm:resumed")  # the event came before the answer: it was news
    session.answered("resume", heard)
    assert not session.stale("vm:resumed")
    session.answered("power-button", session.events_heard())  # no state-changing event of its own
    assert not session.stale("vm:shutdown")
