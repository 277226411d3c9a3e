"""The launcher's state machine as data: what each command does in each VM state, how Cloud
Hypervisor's events and the VMM's exit move the state, and how a state reads as KubeVirt's
`(LifeCycle, Reason)` (contract.md §2.3, §6, §11; cloud-hypervisor.md §5, §6).

Pure: no I/O, no clock. `ch_launcher.manager` runs the steps; tests read the tables.

The model follows the process model chosen for Cloud Hypervisor: CH runs **without**
`--no-shutdown`, so a guest poweroff ends the VMM process (as QEMU ends under libvirt), every CH
version behaves the same, and "the VM is down" always means "no VMM is running it". A restart
(Sync of a VMI that is not yet Running, or a soft reboot) spawns a fresh VMM.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ch_launcher.kubevirt.domain import LifeCycle, Reason


class VmState(str, enum.Enum):
    """What the launcher knows about its one VM."""

    UNDEFINED = "undefined"  # no domain: nothing booted yet, or deleted (GetDomain answers "")
    RUNNING = "running"      # CH state Running
    PAUSED = "paused"        # CH state Paused
    PANICKED = "panicked"    # the guest reported a panic (pvpanic); the launcher is stopping its VMM
    DOWN = "down"            # the VM ran and stopped; the VMM is gone (Shutoff / Crashed)


class Intent(str, enum.Enum):
    """The Cmd RPCs that change the VM (their names in virt-handler's errors, contract §2.3)."""

    SYNC = "SyncVMI"
    PAUSE = "Pause"
    UNPAUSE = "Unpause"
    SHUTDOWN = "Shutdown"
    KILL = "Kill"
    DELETE = "Delete"
    RESET = "Reset"
    SOFT_REBOOT = "SoftReboot"


class Step(str, enum.Enum):
    """One thing the manager does. Steps run in order under the manager's lock; a failing step
    stops the sequence and its error is the command's in-band failure."""

    REFRESH_GRACE = "refresh-grace"            # DeletionGracePeriodSeconds from the VMI
    TRANSLATE = "translate"                    # VMI -> Plan (UnsupportedFeatures -> failure)
    PREPARE = "prepare"                        # the Plan's preparation steps (disks, ISOs, ...)
    SPAWN = "spawn"                            # a running, answering VMM (idempotent)
    CREATE = "create"                          # PUT vm.create
    BOOT = "boot"                              # PUT vm.boot
    REMEMBER_USER_PAUSE = "remember-user-pause"
    FORGET_USER_PAUSE = "forget-user-pause"
    PAUSE = "pause"                            # PUT vm.pause
    RESUME = "resume"                          # PUT vm.resume
    DISARM_SOFT_REBOOT = "disarm-soft-reboot"
    ARM_SOFT_REBOOT = "arm-soft-reboot"        # the next guest poweroff boots the VM again
    POWER_BUTTON = "power-button"              # PUT vm.power-button (ACPI; the guest decides)
    STAMP_DELETION = "stamp-deletion"          # GracePeriod.DeletionTimestamp, first time only
    REBOOT = "reboot"                          # PUT vm.reboot (a hard reset)
    STOP_VMM = "stop-vmm"                      # hard stop: vmm.shutdown, SIGTERM, SIGKILL
    FORGET_DOMAIN = "forget-domain"            # the VM is gone: final event with deletionTimestamp


START = (Step.TRANSLATE, Step.PREPARE, Step.SPAWN, Step.CREATE, Step.BOOT)

# In-band failure texts. "Domain not found." is the Go launcher's text for a missing domain.
DOMAIN_NOT_FOUND = "Domain not found."
NOT_RUNNING = "Domain is not running."
NO_ACPI = "VMI neither have the agent connected nor the ACPI feature enabled"


@dataclass(frozen=True)
class Outcome:
    """What a command does: `steps` in order, or `error` (an in-band failure) and no steps."""

    steps: tuple[Step, ...] = ()
    error: str | None = None


ALIVE = (VmState.RUNNING, VmState.PAUSED, VmState.PANICKED)  # a VMM runs the VM
UP = (VmState.RUNNING, VmState.PAUSED)  # the guest can be signalled

# intent -> state -> outcome, for the intents whose outcome depends on the state alone.
TABLE: dict[Intent, dict[VmState, Outcome]] = {
    # Pause if running, remember the pause as the user's (before pausing, so the vm:paused event
    # already reads Paused/User). Not running: success, no-op. No VM: "Domain not found.".
    Intent.PAUSE: {
        VmState.UNDEFINED: Outcome(error=DOMAIN_NOT_FOUND),
        VmState.RUNNING: Outcome((Step.REMEMBER_USER_PAUSE, Step.PAUSE)),
        VmState.PAUSED: Outcome(),
        VmState.PANICKED: Outcome(),
        VmState.DOWN: Outcome(),
    },
    Intent.UNPAUSE: {
        VmState.UNDEFINED: Outcome(error=DOMAIN_NOT_FOUND),
        VmState.RUNNING: Outcome(),
        VmState.PAUSED: Outcome((Step.FORGET_USER_PAUSE, Step.RESUME)),
        VmState.PANICKED: Outcome(),
        VmState.DOWN: Outcome(),
    },
    # ACPI power button on every call while the guest can be signalled (virt-handler repeats
    # Shutdown every <= 5 s because "a booting OS can miss ACPI signals"); stamp the deletion
    # timestamp after the first press that reached the VMM. A pending soft reboot is cancelled,
    # as libvirt's shutdown clears its fake-reboot flag. CH has no ShuttingDown state: the
    # domain stays Running until the guest powers off.
    Intent.SHUTDOWN: {
        VmState.UNDEFINED: Outcome(),
        VmState.RUNNING: Outcome((Step.DISARM_SOFT_REBOOT, Step.POWER_BUTTON, Step.STAMP_DELETION)),
        VmState.PAUSED: Outcome((Step.DISARM_SOFT_REBOOT, Step.POWER_BUTTON, Step.STAMP_DELETION)),
        VmState.PANICKED: Outcome(),
        VmState.DOWN: Outcome(),
    },
    # Hard stop when running, paused or panicked -> Shutoff/Destroyed. No VM: success.
    Intent.KILL: {
        VmState.UNDEFINED: Outcome(),
        VmState.RUNNING: Outcome((Step.DISARM_SOFT_REBOOT, Step.STOP_VMM)),
        VmState.PAUSED: Outcome((Step.DISARM_SOFT_REBOOT, Step.STOP_VMM)),
        VmState.PANICKED: Outcome((Step.DISARM_SOFT_REBOOT, Step.STOP_VMM)),
        VmState.DOWN: Outcome(),
    },
    # Forget the VM. virt-handler deletes only domains that are down; a live one is stopped
    # hard first rather than left running without a domain. No VM: success, no event.
    Intent.DELETE: {
        VmState.UNDEFINED: Outcome(),
        VmState.RUNNING: Outcome((Step.DISARM_SOFT_REBOOT, Step.STOP_VMM, Step.FORGET_DOMAIN)),
        VmState.PAUSED: Outcome((Step.DISARM_SOFT_REBOOT, Step.STOP_VMM, Step.FORGET_DOMAIN)),
        VmState.PANICKED: Outcome((Step.DISARM_SOFT_REBOOT, Step.STOP_VMM, Step.FORGET_DOMAIN)),
        VmState.DOWN: Outcome((Step.DISARM_SOFT_REBOOT, Step.STOP_VMM, Step.FORGET_DOMAIN)),
    },
    # vm.reboot is a hard reset; it also ends a pause (CH resets into Running) and a panic.
    Intent.RESET: {
        VmState.UNDEFINED: Outcome(error=DOMAIN_NOT_FOUND),
        VmState.RUNNING: Outcome((Step.REBOOT,)),
        VmState.PAUSED: Outcome((Step.FORGET_USER_PAUSE, Step.REBOOT)),
        VmState.PANICKED: Outcome((Step.REBOOT,)),
        VmState.DOWN: Outcome(error=NOT_RUNNING),
    },
}


def decide(intent: Intent, state: VmState, *, user_paused: bool = False, vmi_started: bool = False,
           acpi: bool = True) -> Outcome:
    """The steps of `intent` in `state`.

    `user_paused`: the VM was paused through PauseVirtualMachine (Sync must not resume it).
    `vmi_started`: the VMI's phase is Running or final (Sync must not start a VM that is down:
    KubeVirt's `IsDown(domState) && !vmi.IsRunning() && !vmi.IsFinal()` rule).
    `acpi`: the VMI does not disable `spec.domain.features.acpi` (SoftReboot needs it).
    """
    if intent is Intent.SYNC:
        if state in (VmState.UNDEFINED, VmState.DOWN):
            return Outcome((Step.REFRESH_GRACE,) if vmi_started else (Step.REFRESH_GRACE, *START))
        if state is VmState.PAUSED and not user_paused:
            return Outcome((Step.REFRESH_GRACE, Step.RESUME))
        return Outcome((Step.REFRESH_GRACE,))
    if intent is Intent.SOFT_REBOOT:
        # Cloud Hypervisor has no guest agent and its power button means "power off". So a soft
        # reboot is libvirt's "fake reboot": press the power button, and when the guest has shut
        # down cleanly, boot the VM again instead of reporting Shutoff.
        if not acpi:
            return Outcome(error=NO_ACPI)
        if state is VmState.UNDEFINED:
            return Outcome(error=DOMAIN_NOT_FOUND)
        if state in UP:
            return Outcome((Step.ARM_SOFT_REBOOT, Step.POWER_BUTTON))
        return Outcome(error=NOT_RUNNING)
    return TABLE[intent][state]


# --- observations -----------------------------------------------------------------------------


def state_after_event(state: VmState, event: str, properties: dict[str, str] | None = None) -> VmState | None:
    """The state after Cloud Hypervisor event `event` ("vm:booted", ...) with its `properties`,
    or None when the event does not change it. `vm:shutdown` means the VM stopped (the VMM exits
    right after it); `guest:panic` other than `event: panic` (a kdump kernel loaded) changes nothing."""
    if state in (VmState.UNDEFINED, VmState.DOWN) and event != "vm:booted":
        return None  # stragglers of a VMM we already wrote off, or of a boot in progress
    if event == "guest:panic" and (properties or {}).get("event", PANIC_EVENT) != PANIC_EVENT:
        return None
    new = _EVENT_STATE.get(event)
    if new is None or new is state:
        return None
    if state is VmState.PANICKED and new is VmState.RUNNING and event != "vm:rebooted":
        return None  # only a reset ends a panic
    return new


_EVENT_STATE: dict[str, VmState] = {
    "vm:booted": VmState.RUNNING,
    "vm:resumed": VmState.RUNNING,
    "vm:rebooted": VmState.RUNNING,
    "vm:restored": VmState.PAUSED,
    "vm:paused": VmState.PAUSED,
    "vm:shutdown": VmState.DOWN,
    "guest:panic": VmState.PANICKED,  # `event: panic` only; `crash_loaded` changes nothing (see PANIC_EVENT)
}

# The `event` property of `guest:panic` that means "the guest kernel panicked" (cloud-hypervisor
# devices/src/pvpanic.rs@v53). `crash_loaded` means a kdump kernel took over and the guest keeps
# running: libvirt's CRASHED/CRASHLOADED event, which changes no state.
PANIC_EVENT = "panic"

# Events after which a MODIFIED Domain is sent even when the state did not change: a guest
# reboot keeps the VM Running, but virt-handler hears of it (libvirt sends a reboot event). Other
# events announce themselves through the state change they cause, once.
NOTIFY_EVENTS = frozenset({"vm:rebooted"})


def down_reason(*, saw_shutdown: bool, killing: bool, state: VmState, exit_code: int | None = None,
                vmm_failed: bool = False, crash_destroy: bool = False) -> Reason:
    """Why the VM is down, once the VMM has exited (or announced `vm:shutdown`).

    `crash_destroy`: the launcher stopped it because the guest panicked -> Crashed, as libvirt's
    `on_crash=destroy` (the default for the domains KubeVirt defines, which set no `on_crash`)
    stops QEMU with `VIR_DOMAIN_SHUTOFF_CRASHED`.
    `killing`: the launcher stopped it (Kill, Delete, SIGTERM's grace expiry) -> Destroyed.
    `vmm_failed`: the VMM's log reports an internal failure (a vCPU error such as a KVM
    emulation failure, a thread that panicked: ch.vmmlog), after which CH stops the VM exactly as
    after a guest poweroff (`vm:shutdown`, exit 0) -> Crashed (Panicked stays Panicked), as
    libvirt reports a QEMU that died under its domain (VIR_DOMAIN_SHUTOFF_CRASHED), so that
    virt-handler sets the VMI Failed, not Succeeded (kubevirt pkg/virt-handler/vm.go
    calculateVmPhaseForStatusReason@d923fdb815cd). (QEMU itself keeps running on a KVM internal
    error with the VM stopped, run state `internal-error`, which libvirt reports Paused/Unknown;
    CH has no VM left that could be resumed, so a paused Domain would be a lie.)
    `saw_shutdown`: CH said `vm:shutdown` without being asked -> the guest powered off.
    `exit_code` 0 without either: CH exits 0 only in an orderly shutdown (guest poweroff,
    SIGTERM/SIGINT, vmm.shutdown; cloud-hypervisor.md §1.4), so the guest is down cleanly even if
    its `vm:shutdown` event was lost (CH drops events a stalled reader misses, §6).
    Otherwise the VMM died under a live VM -> Crashed (Panicked stays Panicked).
    """
    if crash_destroy:
        return Reason.CRASHED
    if killing:
        return Reason.DESTROYED
    if vmm_failed:
        return Reason.PANICKED if state is VmState.PANICKED else Reason.CRASHED
    if saw_shutdown or (exit_code == 0 and state is not VmState.PANICKED):
        return Reason.SHUTDOWN
    if state is VmState.PANICKED:
        return Reason.PANICKED
    return Reason.CRASHED


def domain_status(state: VmState, *, user_paused: bool, down: Reason | None) -> tuple[LifeCycle, Reason] | None:
    """`(Status.Status, Status.Reason)` of the Domain, or None when there is no domain (contract
    §11, "suggested reporting"). Never `Unknown` as a status."""
    if state is VmState.UNDEFINED:
        return None
    if state is VmState.RUNNING:
        return LifeCycle.RUNNING, Reason.UNKNOWN
    if state is VmState.PAUSED:
        return LifeCycle.PAUSED, (Reason.USER if user_paused else Reason.UNKNOWN)
    if state is VmState.PANICKED:
        return LifeCycle.CRASHED, Reason.PANICKED
    if down is Reason.PANICKED:
        return LifeCycle.CRASHED, Reason.PANICKED
    return LifeCycle.SHUTOFF, (down or Reason.CRASHED)
