"""The domain manager re-reads the VMM (`vm.info`) instead of trusting its memory: after a call
that failed or timed out, and on every Sync. So a lost event or a lost answer never leaves
virt-handler with a wrong state, and never undoes a user's pause. The simulated VMM is made to
lose them: FAKE_CH_DROP_EVENTS, FAKE_CH_SLOW_ENDPOINT, FAKE_CH_EXIT_LINGER."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from ch_launcher.ch.api import CloudHypervisorClient, VmmUnavailable
from ch_launcher.kubevirt.vmi import parse_vmi
from ch_launcher.lifecycle import Intent, VmState
from ch_launcher.manager import CommandFailed
from tests.framework.managers import manager_for
from tests.functional.harness import make_vmi


def _statuses(sink):
    return [(d["Status"]["Status"], d["Status"]["Reason"]) for d, _ in sink.domains]


def _requests(layout, endpoint):
    log = layout.root / "requests.jsonl"
    lines = log.read_text().splitlines() if log.exists() else []
    return [json.loads(line) for line in lines if json.loads(line)["path"].endswith("/" + endpoint)]


def _run(manager, story):
    async def main():
        await manager.start()
        try:
            await story()
        finally:
            await manager.close()

    asyncio.run(main())


def test_a_pause_whose_answer_came_too_late_but_took_effect_is_the_users_pause(layout):
    raw = make_vmi()
    manager, sink = manager_for(layout, raw, api_timeout=2.0, vmm_env={
        "FAKE_CH_SLOW_ENDPOINT": "vm.pause=3", "FAKE_CH_REQUEST_LOG": str(layout.root / "requests.jsonl")})
    vmi = parse_vmi(raw)

    async def story():
        await manager.execute(Intent.SYNC, vmi, budget=15)
        await manager.execute(Intent.PAUSE, vmi)  # vm.pause times out; vm.info then says Paused
        assert manager.state is VmState.PAUSED
        await manager.execute(Intent.SYNC, vmi)  # the reconcile must not resume a user's pause
        assert _requests(layout, "vm.resume") == []
        assert _statuses(sink)[-1] == ("Paused", "User")

    _run(manager, story)


def test_a_pause_that_cannot_be_confirmed_fails_but_stays_the_users_if_it_happened(layout):
    # Neither vm.pause nor the vm.info after it answer in time, and vm:paused is lost: the Pause
    # fails, yet the user's intent is kept, so when the next Sync finds the VM paused it is the
    # user's pause (Paused/User) and is not resumed.
    raw = make_vmi()
    manager, sink = manager_for(layout, raw, api_timeout=2.0, vmm_env={
        "FAKE_CH_SLOW_ENDPOINT": "vm.pause=6", "FAKE_CH_DROP_EVENTS": "vm:paused",
        "FAKE_CH_REQUEST_LOG": str(layout.root / "requests.jsonl")})
    vmi = parse_vmi(raw)

    async def story():
        await manager.execute(Intent.SYNC, vmi, budget=15)
        with pytest.raises(CommandFailed, match=r"pause failed: .*no answer from the VMM"):
            await manager.execute(Intent.PAUSE, vmi)
        assert manager.state is VmState.RUNNING  # not known to be paused
        client = CloudHypervisorClient(manager.settings.vmm_paths[0])
        await asyncio.to_thread(client.ping, timeout=10)  # the VMM answers again: the pause is done
        await manager.execute(Intent.SYNC, vmi)
        assert manager.state is VmState.PAUSED and _statuses(sink)[-1] == ("Paused", "User")
        assert _requests(layout, "vm.resume") == []

    _run(manager, story)


def test_a_lost_event_is_corrected_by_the_next_sync(layout):
    # Someone paused the VM behind the launcher's back (ch-remote) and vm:paused was lost: the
    # next Sync reads vm.info, announces the pause, and, as virt-launcher does for a pause that
    # is not the user's, resumes the VM.
    raw = make_vmi()
    manager, sink = manager_for(layout, raw, vmm_env={
        "FAKE_CH_DROP_EVENTS": "vm:paused", "FAKE_CH_REQUEST_LOG": str(layout.root / "requests.jsonl")})
    vmi = parse_vmi(raw)

    async def story():
        await manager.execute(Intent.SYNC, vmi, budget=15)
        api_socket = manager.settings.vmm_paths[0]
        await asyncio.to_thread(CloudHypervisorClient(api_socket).pause)
        assert manager.state is VmState.RUNNING  # no event: the launcher cannot know yet
        await manager.execute(Intent.SYNC, vmi)
        assert _statuses(sink)[-2:] == [("Paused", "Unknown"), ("Running", "Unknown")]
        assert len(_requests(layout, "vm.resume")) == 1
        info = await asyncio.to_thread(CloudHypervisorClient(api_socket).info)
        assert info.state == "Running" and manager.state is VmState.RUNNING

    _run(manager, story)


def test_a_resume_behind_the_launchers_back_ends_the_users_pause_in_the_domain(layout):
    raw = make_vmi()
    manager, sink = manager_for(layout, raw, vmm_env={"FAKE_CH_DROP_EVENTS": "vm:resumed"})
    vmi = parse_vmi(raw)

    async def story():
        await manager.execute(Intent.SYNC, vmi, budget=15)
        await manager.execute(Intent.PAUSE, vmi)
        await asyncio.to_thread(CloudHypervisorClient(manager.settings.vmm_paths[0]).resume)
        await manager.execute(Intent.SYNC, vmi)
        assert manager.state is VmState.RUNNING and _statuses(sink)[-1] == ("Running", "Unknown")
        await manager.execute(Intent.SYNC, vmi)  # and nothing more happens
        assert _statuses(sink)[-1] == ("Running", "Unknown")

    _run(manager, story)


def test_a_shutdown_repeated_while_the_vmm_exits_after_the_guests_poweroff_succeeds(layout):
    # virt-handler repeats Shutdown; a real guest powers off at once, and the VMM, on its way out,
    # answers "API request send error: sending on a closed channel" for a moment. Here its
    # vm:shutdown is late (lost), so the launcher still thinks the VM runs and presses again.
    raw = make_vmi()
    manager, sink = manager_for(layout, raw, vmm_env={
        "FAKE_CH_ACPI_DELAY": "0", "FAKE_CH_EXIT_LINGER": "2", "FAKE_CH_DROP_EVENTS": "vm:shutdown"})
    vmi = parse_vmi(raw)

    async def story():
        await manager.execute(Intent.SYNC, vmi, budget=15)
        await manager.execute(Intent.SHUTDOWN, vmi)
        client = CloudHypervisorClient(manager.settings.vmm_paths[0])
        while True:  # until the guest has powered off and the VMM is on its way out
            try:
                await asyncio.to_thread(client.ping)
            except VmmUnavailable as e:
                assert e.exiting and e.mentions("API request send error")
                break
        assert manager.state is VmState.RUNNING
        await manager.execute(Intent.SHUTDOWN, vmi)  # the power button cannot be pressed any more: fine
        assert await manager.wait_until(lambda: manager.state is VmState.DOWN, 10)
        assert _statuses(sink)[-1] == ("Shutoff", "Shutdown")  # exit code 0: a clean guest shutdown

    _run(manager, story)


def test_events_that_arrive_after_the_answers_do_not_take_the_state_back(layout, caplog):
    # The real VMM writes its events from a thread of its own: vm:paused may come after the
    # vm.resume that followed has returned. The Domain goes Paused/User, Running, and stays so.
    raw = make_vmi()
    manager, sink = manager_for(layout, raw, vmm_env={"FAKE_CH_EVENT_DELAY": "0.3"})
    vmi = parse_vmi(raw)

    async def story():
        await manager.execute(Intent.SYNC, vmi, budget=15)
        await manager.execute(Intent.PAUSE, vmi)
        await manager.execute(Intent.UNPAUSE, vmi)
        deadline = time.monotonic() + 10
        while not any("event vm:resumed" in r.getMessage() for r in caplog.records):  # the late events
            assert time.monotonic() < deadline, "vm:resumed never came"
            await asyncio.sleep(0.02)
        assert _statuses(sink) == [("Running", "Unknown"), ("Paused", "User"), ("Running", "Unknown")]
        assert manager.state is VmState.RUNNING

    caplog.set_level("INFO", logger="ch_launcher.manager.supervision")
    _run(manager, story)


def test_the_late_event_of_a_start_paused_boots_pause_does_not_pause_the_vm_again(layout, caplog):
    # startStrategy Paused: the launcher pauses right after vm.boot. Its vm:paused, written by
    # the VMM's own thread, may come after the user's unpause has already run the VM.
    raw = make_vmi(startStrategy="Paused")
    manager, sink = manager_for(layout, raw, vmm_env={"FAKE_CH_EVENT_DELAY": "0.3"})
    vmi = parse_vmi(raw)

    async def story():
        await manager.execute(Intent.SYNC, vmi, budget=15)
        await manager.execute(Intent.UNPAUSE, vmi)
        deadline = time.monotonic() + 10
        while not any("event vm:resumed" in r.getMessage() for r in caplog.records):  # the late events
            assert time.monotonic() < deadline, "vm:resumed never came"
            await asyncio.sleep(0.02)
        assert _statuses(sink) == [("Paused", "User"), ("Running", "Unknown")]
        assert manager.state is VmState.RUNNING

    caplog.set_level("INFO", logger="ch_launcher.manager.supervision")
    _run(manager, story)


def test_a_soft_reboot_whose_vm_shutdown_event_was_lost_still_boots_the_guest_again(layout):
    # The real VMM writes events from a thread of its own and may exit before that thread has
    # written `vm:shutdown` (seen under load: the guest powered off and the VM stayed down). Its
    # exit code 0 says the guest shut down cleanly, so the soft reboot goes on.
    raw = make_vmi()
    manager, sink = manager_for(layout, raw, vmm_env={
        "FAKE_CH_ACPI_DELAY": "0", "FAKE_CH_DROP_EVENTS": "vm:shutdown",
        "FAKE_CH_REQUEST_LOG": str(layout.root / "requests.jsonl")})
    vmi = parse_vmi(raw)

    async def story():
        await manager.execute(Intent.SYNC, vmi, budget=15)
        await manager.execute(Intent.SOFT_REBOOT, vmi)
        assert await manager.wait_until(lambda: len(_requests(layout, "vm.boot")) == 2, 15)
        assert await manager.wait_until(lambda: manager.state is VmState.RUNNING, 15)
        assert ("Shutoff", "Shutdown") not in _statuses(sink)

    _run(manager, story)
