"""The launcher's state machine as data: commands per state, events, and KubeVirt's status strings."""

from __future__ import annotations

import pytest

from ch_launcher.kubevirt.domain import LifeCycle, Reason
from ch_launcher.lifecycle import (
    DOMAIN_NOT_FOUND,
    NO_ACPI,
    NOT_RUNNING,
    START,
    TABLE,
    Intent,
    Step,
    VmState,
    decide,
    domain_status,
    down_reason,
    state_after_event,
)


def test_first_sync_translates_prepares_spawns_creates_and_boots():
    assert decide(Intent.SYNC, VmState.UNDEFINED).steps == (Step.REFRESH_GRACE, *START)


@pytest.mark.parametrize("state", [VmState.RUNNING, VmState.PANICKED])
def test_sync_of_a_live_vm_only_refreshes_grace_metadata(state):
    assert decide(Intent.SYNC, state).steps == (Step.REFRESH_GRACE,)


def test_sync_never_creates_or_boots_twice():
    for state in (VmState.RUNNING, VmState.PAUSED, VmState.PANICKED):
        steps = decide(Intent.SYNC, state, user_paused=False).steps
        assert Step.CREATE not in steps and Step.BOOT not in steps


def test_sync_never_resumes_a_user_paused_vm():
    assert decide(Intent.SYNC, VmState.PAUSED, user_paused=True).steps == (Step.REFRESH_GRACE,)


def test_sync_resumes_a_vm_paused_for_another_reason():
    assert decide(Intent.SYNC, VmState.PAUSED, user_paused=False).steps == (Step.REFRESH_GRACE, Step.RESUME)


def test_sync_restarts_a_down_vm_only_while_the_vmi_is_not_yet_running():
    assert decide(Intent.SYNC, VmState.DOWN, vmi_started=False).steps == (Step.REFRESH_GRACE, *START)
    assert decide(Intent.SYNC, VmState.DOWN, vmi_started=True).steps == (Step.REFRESH_GRACE,)


@pytest.mark.parametrize("intent", [Intent.PAUSE, Intent.UNPAUSE, Intent.RESET, Intent.SOFT_REBOOT])
def test_commands_that_need_a_vm_say_domain_not_found_without_one(intent):
    assert decide(intent, VmState.UNDEFINED).error == DOMAIN_NOT_FOUND


@pytest.mark.parametrize("intent", [Intent.SHUTDOWN, Intent.KILL, Intent.DELETE])
def test_stop_commands_without_a_vm_succeed_doing_nothing(intent):
    outcome = decide(intent, VmState.UNDEFINED)
    assert outcome.error is None and outcome.steps == ()


def test_pause_remembers_the_user_pause_before_pausing():
    assert decide(Intent.PAUSE, VmState.RUNNING).steps == (Step.REMEMBER_USER_PAUSE, Step.PAUSE)


def test_pause_of_a_paused_or_stopped_vm_is_a_successful_no_op():
    for state in (VmState.PAUSED, VmState.DOWN):
        assert decide(Intent.PAUSE, state) == decide(Intent.UNPAUSE, VmState.RUNNING)


def test_unpause_forgets_the_user_pause_and_resumes():
    assert decide(Intent.UNPAUSE, VmState.PAUSED).steps == (Step.FORGET_USER_PAUSE, Step.RESUME)


@pytest.mark.parametrize("state", [VmState.RUNNING, VmState.PAUSED])
def test_shutdown_presses_the_power_button_then_stamps_the_deletion_time(state):
    steps = decide(Intent.SHUTDOWN, state).steps
    assert steps.index(Step.POWER_BUTTON) < steps.index(Step.STAMP_DELETION)
    assert Step.DISARM_SOFT_REBOOT in steps


def test_kill_stops_the_vmm_hard_when_anything_runs():
    for state in (VmState.RUNNING, VmState.PAUSED, VmState.PANICKED):
        assert Step.STOP_VMM in decide(Intent.KILL, state).steps
    assert decide(Intent.KILL, VmState.DOWN).steps == ()


def test_delete_always_ends_with_the_final_event():
    for state in (VmState.RUNNING, VmState.PAUSED, VmState.PANICKED, VmState.DOWN):
        assert decide(Intent.DELETE, state).steps[-1] is Step.FORGET_DOMAIN


def test_reset_of_a_stopped_vm_is_refused():
    assert decide(Intent.RESET, VmState.DOWN).error == NOT_RUNNING


def test_soft_reboot_arms_a_reboot_and_presses_the_power_button():
    assert decide(Intent.SOFT_REBOOT, VmState.RUNNING).steps == (Step.ARM_SOFT_REBOOT, Step.POWER_BUTTON)


def test_soft_reboot_without_acpi_gives_kubevirts_message():
    assert decide(Intent.SOFT_REBOOT, VmState.RUNNING, acpi=False).error == NO_ACPI


def test_every_table_intent_covers_every_state():
    for intent, row in TABLE.items():
        assert set(row) == set(VmState), intent


@pytest.mark.parametrize("event,state,expected", [
    ("vm:paused", VmState.RUNNING, VmState.PAUSED),
    ("vm:resumed", VmState.PAUSED, VmState.RUNNING),
    ("vm:shutdown", VmState.RUNNING, VmState.DOWN),
    ("vm:shutdown", VmState.PAUSED, VmState.DOWN),
    ("guest:panic", VmState.RUNNING, VmState.PANICKED),
    ("vm:rebooted", VmState.PANICKED, VmState.RUNNING),
    ("vm:rebooted", VmState.PAUSED, VmState.RUNNING),
])
def test_events_move_the_state(event, state, expected):
    assert state_after_event(state, event) is expected


@pytest.mark.parametrize("event,state", [
    ("vm:rebooted", VmState.RUNNING),        # same state
    ("vm:resumed", VmState.PANICKED),        # only a reset ends a panic
    ("vm:paused", VmState.DOWN),             # a straggler of a dead VMM
    ("vm:shutdown", VmState.UNDEFINED),
    ("virtio-device:activated", VmState.RUNNING),
    ("vmm:shutdown", VmState.RUNNING),
])
def test_events_that_do_not_change_the_state(event, state):
    assert state_after_event(state, event) is None


def test_a_kdump_kernel_taking_over_changes_no_state():
    # cloud-hypervisor's pvpanic `crash_loaded`: libvirt's CRASHED/CRASHLOADED, the guest runs on
    assert state_after_event(VmState.RUNNING, "guest:panic", {"event": "crash_loaded"}) is None
    assert state_after_event(VmState.RUNNING, "guest:panic", {"event": "panic"}) is VmState.PANICKED


def test_a_vm_stopped_after_its_guest_panicked_is_crashed_as_libvirts_on_crash_destroy():
    for state in (VmState.PANICKED, VmState.RUNNING):
        assert down_reason(saw_shutdown=True, killing=True, state=state, crash_destroy=True) is Reason.CRASHED
    assert domain_status(VmState.DOWN, user_paused=False, down=Reason.CRASHED) == (LifeCycle.SHUTOFF, Reason.CRASHED)


def test_down_reasons():
    assert down_reason(saw_shutdown=True, killing=True, state=VmState.RUNNING) is Reason.DESTROYED
    assert down_reason(saw_shutdown=True, killing=False, state=VmState.RUNNING) is Reason.SHUTDOWN
    assert down_reason(saw_shutdown=False, killing=False, state=VmState.RUNNING) is Reason.CRASHED
    assert down_reason(saw_shutdown=False, killing=False, state=VmState.PANICKED) is Reason.PANICKED


def test_an_orderly_vmm_exit_is_a_guest_shutdown_even_when_its_event_was_lost():
    # CH exits 0 only in an orderly shutdown; a crash is a signal or a non-zero status.
    assert down_reason(saw_shutdown=False, killing=False, state=VmState.RUNNING, exit_code=0) is Reason.SHUTDOWN
    assert down_reason(saw_shutdown=False, killing=False, state=VmState.RUNNING, exit_code=-9) is Reason.CRASHED
    assert down_reason(saw_shutdown=False, killing=False, state=VmState.RUNNING, exit_code=1) is Reason.CRASHED
    assert down_reason(saw_shutdown=False, killing=True, state=VmState.RUNNING, exit_code=0) is Reason.DESTROYED


def test_a_vm_the_vmm_stopped_on_an_internal_failure_crashed_even_though_it_said_shutdown():
    # CH ends a vCPU error like a poweroff (vm:shutdown, exit 0); its log is what tells.
    for code in (None, 0):
        assert down_reason(saw_shutdown=True, killing=False, state=VmState.RUNNING, exit_code=code,
                           vmm_failed=True) is Reason.CRASHED
    assert down_reason(saw_shutdown=True, killing=False, state=VmState.PAUSED, vmm_failed=True) is Reason.CRASHED
    assert down_reason(saw_shutdown=True, killing=False, state=VmState.PANICKED, vmm_failed=True) is Reason.PANICKED
    assert down_reason(saw_shutdown=True, killing=True, state=VmState.RUNNING, vmm_failed=True) is Reason.DESTROYED


@pytest.mark.parametrize("state,user_paused,down,expected", [
    (VmState.UNDEFINED, False, None, None),
    (VmState.RUNNING, False, None, (LifeCycle.RUNNING, Reason.UNKNOWN)),
    (VmState.PAUSED, True, None, (LifeCycle.PAUSED, Reason.USER)),
    (VmState.PAUSED, False, None, (LifeCycle.PAUSED, Reason.UNKNOWN)),
    (VmState.PANICKED, False, None, (LifeCycle.CRASHED, Reason.PANICKED)),
    (VmState.DOWN, False, Reason.SHUTDOWN, (LifeCycle.SHUTOFF, Reason.SHUTDOWN)),
    (VmState.DOWN, False, Reason.DESTROYED, (LifeCycle.SHUTOFF, Reason.DESTROYED)),
    (VmState.DOWN, False, Reason.CRASHED, (LifeCycle.SHUTOFF, Reason.CRASHED)),
    (VmState.DOWN, False, Reason.PANICKED, (LifeCycle.CRASHED, Reason.PANICKED)),
])
def test_domain_status_uses_kubevirts_strings_and_never_unknown(state, user_paused, down, expected):
    status = domain_status(state, user_paused=user_paused, down=down)
    assert status == expected
    if status is not None:
        assert status[0].value != "Unknown"


def test_a_vm_is_alive_exactly_where_a_kill_has_a_vmm_to_stop():
    from ch_launcher.lifecycle import ALIVE

    assert set(ALIVE) == {s for s in VmState if Step.STOP_VMM in decide(Intent.KILL, s).steps}
