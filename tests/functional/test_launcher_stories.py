"""Launcher stories: a real ch-launcher process, real gRPC over real unix sockets, the VMM as a
real child process, and a stand-in for virt-handler on both channels.

The VMM is the simulated one; stories marked `@BOTH_VMMS` also run on the real cloud-hypervisor
(../shared/vmm or CH_BINARY) with the tiny guest of tests/guest/, which does on a console command
what the simulated guest does on a signal (`Harness.guest_does`); there the launcher and the VMM
run with the pod's privileges (uid 107, only NET_BIND_SERVICE, a network namespace of their own:
the `pod` sandbox)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import signal
import time

import pytest

from tests.framework import CmdClient
from tests.functional.harness import make_vmi, wait_for_file
from tests.functional.pod_probes import capabilities
from tests.functional.story_fixtures import BOTH_VMMS
from tests.polling import until

UNDELIVERED = b"cannot deliver a notification"  # the launcher's warning when virt-handler's pipe is not there

# --- start -----------------------------------------------------------------------------------------


@BOTH_VMMS
def test_first_sync_boots_the_vm_and_virt_handler_hears_it_running(vh):
    async def story():
        await vh.start()
        assert await vh.client.info() == [1]
        assert await vh.client.get_domain() is None  # no domain before the first Sync
        await vh.client.sync(vh.vmi)
        event = await vh.recorder.wait_for_status("Running", "Unknown")
        assert event.event_type == "ADDED"
        domain = await vh.client.get_domain()
        assert domain["Status"] == {**domain["Status"], "Status": "Running", "Reason": "Unknown"}
        assert domain["ObjectMeta"]["uid"] == vh.vmi["metadata"]["uid"]
        assert domain["Spec"]["Metadata"]["KubeVirt"]["UID"] == vh.vmi["metadata"]["uid"]
        assert domain["Spec"]["Metadata"]["KubeVirt"]["GracePeriod"]["DeletionGracePeriodSeconds"] == 30
        assert [d["Alias"]["Name"] for d in domain["Spec"]["Devices"]["Disks"]] == [
            "containerdisk", "scratch", "cloudinitdisk"]
        assert len(vh.requests("vm.create")) == 1 and len(vh.requests("vm.boot")) == 1
        if vh.pod is not None:  # the real VMM ran as the pod's compute container runs it
            vmm = vh.vmm_pid()
            assert os.stat(f"/proc/{vmm}").st_uid == 107 and capabilities(vmm)["CapEff"] == 0
            assert capabilities(vh.launcher.pid)["CapEff"] == 1 << 10  # only CAP_NET_BIND_SERVICE

    vh.run(story())


def test_virt_handlers_first_call_connects_the_launcher_to_its_notify_pipe_before_any_event(new_harness):
    """virt-handler injects the notify pipe right after its first connection to the command
    socket: the launcher connects and negotiates then, so the first Domain event (ADDED Running)
    does not wait for a dial and a negotiation (it did: the connection opened at the first event)."""
    vh = new_harness(notify=False)

    async def story():
        await vh.start()
        assert await vh.client.info() == [1]  # virt-handler's first call...
        await vh.recorder.start()               # ... after which it injects the pipe
        assert await vh.recorder.wait_for_negotiation() == 1
        assert vh.recorder.events == []
        await vh.client.sync(vh.vmi)
        event = await vh.recorder.wait_for_status("Running", "Unknown")
        assert event.event_type == "ADDED"
        assert vh.recorder.info_calls == 1  # the first event went over the early connection

    vh.run(story())


def test_a_launcher_run_as_the_image_runs_it_optimized_boots_pauses_and_reports_stats(new_harness):
    """The launcher image sets PYTHONOPTIMIZE=2 (no asserts, no docstrings; Containerfile): the
    same Sync, pause and GetDomainStats work that way, ISO writer child included."""
    vh = new_harness(env={"PYTHONOPTIMIZE": "2", "MALLOC_ARENA_MAX": "2"})

    async def story():
        await vh.start(wait_ready=False)
        await vh.launcher.wait_ready(60.0)  # the development virtualenv has no optimized bytecode to load
        vh.client = CmdClient(vh.layout.cmd_socket)
        await vh.client.sync(vh.vmi)
        await vh.recorder.wait_for_status("Running", "Unknown", timeout=60)
        await vh.client.vmi_command("PauseVirtualMachine", vh.vmi)
        await vh.recorder.wait_for_status("Paused", "User")
        stats = await vh.client.get_domain_stats()
        assert stats["Name"] == f"default_{vh.vmi['metadata']['name']}"

    vh.run(story())


def test_the_socket_is_renamed_only_after_the_server_answers(vh):
    async def story():
        await vh.start()
        assert vh.layout.cmd_socket.exists()
        assert not (vh.layout.sockets_dir / "launcher-init-sock").exists()
        reply = await vh.client.call("Ping")
        assert reply.success

    vh.run(story())


def test_a_stale_init_socket_file_is_replaced(vh):
    async def story():
        stale = vh.layout.sockets_dir / "launcher-init-sock"
        stale.write_text("stale")
        await vh.start()
        assert (await vh.client.call("Ping")).success

    vh.run(story())


def test_the_serial_log_exists_as_soon_as_the_launcher_is_ready(vh):
    # virt-tail (the guest-console-log container) starts first and gives up on a missing directory.
    async def story():
        await vh.start()
        log = vh.layout.console_socket(vh.vmi["metadata"]["uid"]).parent / "virt-serial0-log"
        assert log.is_file() and log.stat().st_size == 0

    vh.run(story())


@BOTH_VMMS
def test_the_serial_console_socket_exists_once_the_vm_runs(vh):
    async def story():
        await vh.boot()
        console = vh.layout.console_socket(vh.vmi["metadata"]["uid"])
        reader, writer = await asyncio.open_unix_connection(str(console))
        writer.write(b"\r")
        await writer.drain()
        data = await asyncio.wait_for(reader.read(4096), 5)
        assert data, "the guest's serial console said nothing"
        writer.close()
        assert (console.parent / "virt-serial0-log").exists()

    vh.run(story())


@BOTH_VMMS
def test_console_clients_come_and_go_while_the_serial_log_keeps_everything(vh):
    async def story():
        await vh.boot()
        # what the guest printed at boot, before anyone attached, is in the log
        await wait_for_file(vh.serial_log, lambda log: vh.boot_marker in log, 10, "the boot output")
        for n in (1, 2):  # attach, type, see the echo, detach; twice
            reader, writer = await asyncio.open_unix_connection(str(vh.console_socket))
            writer.write(f"kch-echo-{n}\r".encode())
            await writer.drain()
            seen = b""
            async with asyncio.timeout(10):
                while f"kch-echo-{n}".encode() not in seen:
                    chunk = await reader.read(4096)
                    assert chunk, f"the console closed; it said {seen!r}"
                    seen += chunk
            writer.close()
            await writer.wait_closed()
        assert (await vh.client.get_domain())["Status"]["Status"] == "Running"  # detaching never touches the VM
        await wait_for_file(vh.serial_log, lambda log: b"kch-echo-1" in log and b"kch-echo-2" in log, 10,
                            "both echoes")

    vh.run(story())


# --- Sync is a reconcile ------------------------------------------------------------------------


def test_sync_again_does_nothing_already_done(vh):
    async def story():
        await vh.boot()
        events = len(vh.recorder.events)
        for _ in range(3):
            await vh.client.sync(vh.vmi)
        assert len(vh.requests("vm.create")) == 1 and len(vh.requests("vm.boot")) == 1
        await asyncio.sleep(0.2)
        assert len(vh.recorder.events) == events  # nothing changed, nothing announced

    vh.run(story())


def test_concurrent_first_syncs_create_and_boot_once(vh):
    async def story():
        await vh.start()
        replies = await asyncio.gather(*(vh.client.sync(vh.vmi, check=False) for _ in range(4)))
        assert all(r.success for r in replies), [r.message for r in replies]
        await vh.recorder.wait_for_status("Running")
        assert len(vh.requests("vm.create")) == 1 and len(vh.requests("vm.boot")) == 1

    vh.run(story())


def test_sync_refreshes_the_grace_period_metadata(vh):
    async def story():
        await vh.boot()
        vmi = vh.vmi_copy()
        vmi["spec"]["terminationGracePeriodSeconds"] = 7
        since = len(vh.recorder.events)
        await vh.client.sync(vmi)
        event = await vh.recorder.wait_for(lambda e: e.grace.get("DeletionGracePeriodSeconds") == 7, since=since)
        assert event.status == "Running"

    vh.run(story())


# --- pause ----------------------------------------------------------------------------------------


@BOTH_VMMS
def test_pause_sync_unpause_keeps_a_user_paused_vm_paused_until_unpaused(vh):
    async def story():
        await vh.boot()
        await vh.client.vmi_command("PauseVirtualMachine", vh.vmi)
        await vh.recorder.wait_for_status("Paused", "User")
        await vh.client.sync(vh.vmi)
        assert (await vh.client.get_domain())["Status"]["Status"] == "Paused"
        assert vh.requests("vm.resume") == []
        await vh.client.vmi_command("PauseVirtualMachine", vh.vmi)  # again: a no-op
        since = len(vh.recorder.events)
        await vh.client.vmi_command("UnpauseVirtualMachine", vh.vmi)
        await vh.recorder.wait_for_status("Running", since=since)
        await vh.client.vmi_command("UnpauseVirtualMachine", vh.vmi)  # again: a no-op
        assert len(vh.requests("vm.pause")) == 1 and len(vh.requests("vm.resume")) == 1

    vh.run(story())


def test_a_vmi_with_start_strategy_paused_is_first_seen_paused_by_the_user_and_unpause_runs_it(new_harness):
    vh = new_harness(vmi=make_vmi(startStrategy="Paused"))

    async def story():
        await vh.start()
        await vh.client.sync(vh.vmi)
        first = await vh.recorder.wait_for_status("Paused", "User")
        assert first.event_type == "ADDED"  # never announced Running before the pause
        assert not any(e.status == "Running" for e in vh.recorder.events)
        await vh.client.sync(vh.vmi)  # a reconcile must not resume it
        assert vh.requests("vm.resume") == []
        since = len(vh.recorder.events)
        await vh.client.vmi_command("UnpauseVirtualMachine", vh.vmi)
        await vh.recorder.wait_for_status("Running", since=since)

    vh.run(story())


def test_pause_before_any_vm_says_domain_not_found(vh):
    async def story():
        await vh.start()
        reply = await vh.client.vmi_command("PauseVirtualMachine", vh.vmi, check=False)
        assert not reply.success and reply.message == "Domain not found."
        reply = await vh.client.vmi_command("UnpauseVirtualMachine", vh.vmi, check=False)
        assert not reply.success and reply.message == "Domain not found."

    vh.run(story())


# --- shutdown ------------------------------------------------------------------------------------


@BOTH_VMMS
def test_graceful_shutdown_with_a_guest_that_powers_off(vh):
    async def story():
        await vh.boot()
        await vh.client.vmi_command("ShutdownVirtualMachine", vh.vmi)
        stamped = await vh.recorder.wait_for(lambda e: e.grace.get("DeletionTimestamp"))
        # CH has no ShuttingDown state: Running until the guest is off (the tiny guest powers
        # off at once, so on the real VMM the first stamped Domain may already be Shutoff)
        assert stamped.status == "Running" or (vh.tiny_guest and stamped.status == "Shutoff")
        first = stamped.grace["DeletionTimestamp"]
        await vh.client.vmi_command("ShutdownVirtualMachine", vh.vmi)  # virt-handler repeats it
        # The power button is pressed before the stamp (as virt-launcher's SignalShutdownVMI
        # does), so the tiny guest's Shutoff can be announced once before the stamped one.
        down = await vh.recorder.wait_for(lambda e: (e.status, e.reason) == ("Shutoff", "Shutdown")
                                          and e.grace.get("DeletionTimestamp"))
        assert down.grace["DeletionTimestamp"] == first  # stamped once, never overwritten
        assert len(vh.requests("vm.power-button")) >= 1
        # a VMM that is down still answers, and Shutdown/Kill of a stopped VM are no-ops
        await vh.client.vmi_command("ShutdownVirtualMachine", vh.vmi)
        await vh.client.vmi_command("KillVirtualMachine", vh.vmi)
        assert (await vh.client.get_domain())["Status"]["Reason"] == "Shutdown"

    vh.run(story())


@BOTH_VMMS
def test_shutdown_of_a_guest_that_ignores_acpi_then_kill_is_destroyed(new_harness):
    h = new_harness(ignores_acpi=True)

    async def story():
        await h.boot()
        # Each press once the guest has seen the one before: two presses before the guest reads
        # the GED's event register are one interrupt to it (the same status bit set twice), as a
        # loaded machine showed with the tiny guest on the real VMM.
        for presses in (1, 2):
            await h.client.vmi_command("ShutdownVirtualMachine", h.vmi)
            await h.wait_for_ignored_power_buttons(presses)
        assert (await h.client.get_domain())["Status"]["Status"] == "Running"
        await h.client.vmi_command("KillVirtualMachine", h.vmi)
        event = await h.recorder.wait_for_status("Shutoff", "Destroyed")
        assert event.grace["DeletionTimestamp"]
        assert h.launcher.children() == []  # the VMM is gone
        assert (await h.client.call("Ping")).success

    h.run(story())


# --- crash, reboot, panic --------------------------------------------------------------------


@BOTH_VMMS
def test_a_vmm_crash_becomes_shutoff_crashed_and_the_launcher_keeps_serving(vh):
    async def story():
        await vh.boot()
        killed_at = time.monotonic()
        vh.signal_vmm(signal.SIGKILL)
        event = await vh.recorder.wait_for_status("Shutoff", "Crashed", timeout=5)
        assert event.at - killed_at < 2.0
        warning = await vh.recorder.wait_for_k8s_event("VMMCrashed")
        assert warning["type"] == "Warning"
        assert warning["involvedObject"]["uid"] == vh.vmi["metadata"]["uid"]
        assert (await vh.client.call("Ping")).success
        assert (await vh.client.get_domain())["Status"]["Reason"] == "Crashed"
        await vh.client.vmi_command("DeleteVirtualMachine", vh.vmi)
        await vh.recorder.wait_for_deleted()

    vh.run(story())


@BOTH_VMMS
@pytest.mark.parametrize("runtime_processes", [False, True], ids=["vmm-under-launcher", "vmm-under-monitor"])
def test_a_killed_launcher_takes_its_vmm_with_it_and_virt_handler_hears_the_vm_crashed(new_harness,
                                                                                      runtime_processes):
    """The monitor (the command's process, as in a pod) outlives the launcher: it stops the VMM,
    tells virt-handler the VM is gone (Shutoff/Crashed, as for a crashed VMM, and a warning),
    and exits with the launcher's status, in both of the pod's process trees."""
    vh = new_harness(runtime_processes=runtime_processes)

    async def story():
        await vh.boot()
        vmm, launcher = vh.vmm_pid(), vh.launcher.roles()["launcher"]
        assert launcher is not None and launcher != vh.launcher.pid
        since = len(vh.recorder.events)
        os.kill(launcher, signal.SIGKILL)
        event = await vh.recorder.wait_for_status("Shutoff", "Crashed", since=since, timeout=10)
        assert event.event_type == "MODIFIED"
        assert event.domain["Spec"]["Metadata"]["KubeVirt"]["UID"] == vh.vmi["metadata"]["uid"]
        warning = await vh.recorder.wait_for_k8s_event("LauncherCrashed")
        assert (warning["type"], warning["involvedObject"]["uid"]) == ("Warning", vh.vmi["metadata"]["uid"])
        assert warning["message"] == (f"ch-launcher (pid {launcher}) was killed by signal 9 while the VM was "
                                      f"running; the VM is gone")
        assert await vh.launcher.wait_exit(30) == 128 + signal.SIGKILL
        assert not os.path.exists(f"/proc/{vmm}")  # stopped and reaped by the monitor
        assert [str(e) for e in vh.recorder.events[since:]] == ["MODIFIED Shutoff/Crashed"]

    vh.run(story())


@pytest.mark.parametrize("stopped_first", [False, True], ids=["before-any-sync", "after-the-vm-stopped"])
def test_a_launcher_killed_with_no_vm_running_leaves_virt_handler_nothing_to_hear(new_harness, stopped_first):
    """No VM runs here (before the first Sync, or once the VM was stopped, while the launcher
    waits for virt-handler's Delete): the monitor says nothing on the launcher's behalf. (After
    the Delete the launcher exits 0 on its own, cli.py step 4.)"""
    vh = new_harness()

    async def story():
        await vh.start()
        if stopped_first:
            await vh.client.sync(vh.vmi)
            await vh.recorder.wait_for_status("Running")
            await vh.client.vmi_command("KillVirtualMachine", vh.vmi)
            await vh.recorder.wait_for_status("Shutoff", "Destroyed")
        since = len(vh.recorder.events)
        os.kill(vh.launcher.launcher_pid, signal.SIGKILL)
        assert await vh.launcher.wait_exit(30) == 128 + signal.SIGKILL
        assert vh.recorder.events[since:] == [] and vh.recorder.k8s_events == []

    vh.run(story())


@BOTH_VMMS
def test_a_vcpu_failure_is_shutoff_crashed_not_a_clean_shutdown(vh):
    """A KVM emulation failure: CH stops the VM as after a guest poweroff (vm:shutdown, exit 0);
    the launcher tells the two apart by the VMM's log and reports Crashed, so virt-handler sets
    the VMI Failed (a RerunOnFailure VM restarts), not Succeeded."""
    async def story():
        await vh.boot()
        await vh.guest_does("emulation-failure")
        event = await vh.recorder.wait_for_status("Shutoff", "Crashed", timeout=10)
        assert all(e.reason != "Shutdown" for e in vh.recorder.events)  # never first said Shutdown
        warning = await vh.recorder.wait_for_k8s_event("VMMCrashed")
        assert warning["type"] == "Warning"
        assert "Unexpected exit reason on vcpu run: InternalError" in warning["message"]
        assert event.grace.get("DeletionTimestamp") is None
        assert (await vh.client.get_domain())["Status"]["Reason"] == "Crashed"
        assert "stopped the VM on an internal failure" in vh.log_text()

    vh.run(story())


@BOTH_VMMS
def test_a_vcpu_failure_during_a_soft_reboot_is_crashed_and_not_booted_again(new_harness):
    """A soft reboot boots the VM again once the guest has shut down; a VM the VMM stopped on
    an internal failure has not shut down: it is Crashed, and no new VMM starts."""
    h = new_harness(ignores_acpi=True)

    async def story():
        await h.boot()
        await h.client.vmi_command("SoftRebootVirtualMachine", h.vmi)
        await h.wait_for_ignored_power_buttons(1)  # the soft reboot is armed, the guest runs on
        since = len(h.recorder.events)
        await h.guest_does("emulation-failure")
        await h.recorder.wait_for_status("Shutoff", "Crashed", since=since, timeout=10)
        # The VMM exits right after its vm:shutdown; the launcher handles the exit either way:
        log = await wait_for_file(h.layout.log_file, lambda text: b"VM is down" in text or b"booting it again" in text,
                                  10, "the launcher handling the VMM's exit")
        assert b"booting it again" not in log
        assert h.launcher.children() == []
        assert all(e.status != "Running" for e in h.recorder.events[since:])
        assert (await h.client.get_domain())["Status"]["Reason"] == "Crashed"

    h.run(story())


@BOTH_VMMS
@pytest.mark.parametrize("how", ["reboot", "triple-fault"])
def test_a_guest_reboot_keeps_the_vm_running_and_is_announced(vh, how):
    async def story():
        await vh.boot()
        # the first boot is in the serial log (the launcher announces Running before it has
        # relayed the guest's first output; a guest that reboots before that leaves none)
        await wait_for_file(vh.serial_log, lambda log: log.count(vh.boot_marker) == 1, 10, "the first boot")
        since = len(vh.recorder.events)
        pid = vh.vmm_pid()
        await vh.guest_does(how)  # a triple fault is a reset for CH, as a reboot
        event = await vh.recorder.wait_for_status("Running", since=since)
        assert event.event_type == "MODIFIED"
        assert vh.vmm_pid() == pid  # CH reboots in-process
        assert (await vh.client.get_domain())["Status"]["Status"] == "Running"
        # the guest booted again, and the serial log has both boots
        await wait_for_file(vh.serial_log, lambda log: log.count(vh.boot_marker) == 2, 10, "a second boot")

    vh.run(story())


@BOTH_VMMS
def test_reset_is_a_hard_reboot_of_the_same_vmm(vh):
    async def story():
        await vh.boot()
        pid = vh.vmm_pid()
        since = len(vh.recorder.events)
        await vh.client.vmi_command("ResetVirtualMachine", vh.vmi)
        await vh.recorder.wait_for_status("Running", since=since)
        assert len(vh.requests("vm.reboot")) == 1 and vh.vmm_pid() == pid

    vh.run(story())


@BOTH_VMMS
def test_soft_reboot_shuts_the_guest_down_cleanly_and_boots_it_again(vh):
    async def story():
        await vh.boot()
        old = vh.vmm_pid()
        since = len(vh.recorder.events)
        await vh.client.vmi_command("SoftRebootVirtualMachine", vh.vmi)
        await vh.recorder.wait_for(lambda e: e.status == "Running", since=since, timeout=10)
        with contextlib.suppress(TimeoutError):
            await until(lambda: vh.launcher.children() not in ([], [old]), 10, 0.05)
        assert vh.launcher.children() and vh.launcher.children() != [old]
        if vh.simulated:  # a real VMM's log (where its requests are counted) starts afresh
            assert len(vh.requests("vm.power-button")) == 1 and len(vh.requests("vm.boot")) == 2
        else:
            assert len(vh.requests("vm.boot")) == 1  # the new VMM booted the VM once
        assert all(e.status != "Shutoff" for e in vh.recorder.events[since:])

    vh.run(story())


def test_the_dirty_rate_asked_during_a_soft_reboot_is_the_fresh_vms(vh):
    # Between the guest's poweroff and the fresh boot the domain stays Running (libvirt's fake
    # reboot keeps QEMU, and its dirty rate answers): the measurement waits for the fresh VM.
    async def story():
        await vh.boot()
        old = os.pidfd_open(vh.vmm_pid())
        await vh.client.vmi_command("SoftRebootVirtualMachine", vh.vmi)
        exited, _, _ = await asyncio.to_thread(select.select, [old], [], [], 10.0)
        os.close(old)
        assert exited, "the guest did not power off for the soft reboot"
        reply = await vh.client.call("GetDomainDirtyRateStats")
        assert reply.response.success, reply.response.message
        assert reply.dirtyRateMbs == 0

    vh.run(story())


def test_soft_reboot_without_acpi_is_refused_with_kubevirts_message(vh):
    async def story():
        await vh.boot()
        vmi = vh.vmi_copy()
        vmi["spec"]["domain"]["features"] = {"acpi": {"enabled": False}}
        reply = await vh.client.vmi_command("SoftRebootVirtualMachine", vmi, check=False)
        assert not reply.success
        assert reply.message == "VMI neither have the agent connected nor the ACPI feature enabled"

    vh.run(story())


@BOTH_VMMS
def test_a_guest_panic_is_crashed_panicked_then_the_vmm_goes_away_as_under_on_crash_destroy(new_harness):
    # libvirt's default on_crash=destroy (KubeVirt's domains set none): CRASHED/PANICKED, then QEMU
    # is stopped and the domain reads Shutoff/Crashed. virt-launcher reports the panic with
    # PanicCount, GuestPanicInfo and a GuestPanicked Warning (notify-client/client.go@d923fdb815cd).
    h = new_harness(vmi=make_vmi(devices={"panicDevices": [{"model": "pvpanic"}]}))

    async def story():
        await h.boot()
        assert (await h.client.get_domain())["Spec"]["Devices"]["PanicDevices"] == [{"Model": "pvpanic"}]
        vmm = os.pidfd_open(h.vmm_pid())
        await h.guest_does("panic")
        crashed = await h.recorder.wait_for_status("Crashed", "Panicked")
        assert crashed.domain["Status"]["PanicCount"] == 1
        assert crashed.domain["Status"]["GuestPanicInfo"]["Type"] == "unknown"
        warning = await h.recorder.wait_for_k8s_event("GuestPanicked")
        assert (warning["type"], warning["message"]) == ("Warning", "GuestPanicked (details unavailable)")
        down = await h.recorder.wait_for_status("Shutoff", "Crashed")
        assert down.domain["Status"]["PanicCount"] == 1
        exited, _, _ = await asyncio.to_thread(select.select, [vmm], [], [], 10.0)
        os.close(vmm)
        assert exited, "the VMM of a panicked guest is still running"
        assert "VMMCrashed" not in [e.get("reason") for e in h.recorder.k8s_events]  # the launcher stopped it
        await h.client.vmi_command("DeleteVirtualMachine", h.vmi)
        final = await h.recorder.wait_for_deleted()
        assert final.domain["Status"]["PanicCount"] == 1
        # the guest's failure, not the launcher's: a warning (and the event), no error line
        levels = {e.get("msg", "").split(";")[0]: e.get("level") for e in map(json.loads, (
            line for line in h.log_text().splitlines() if line.startswith("{")))}
        assert levels.get("the guest panicked") == "warning", h.log_text()
        assert "error" not in levels.values(), h.log_text()

    h.run(story())


def test_a_kdump_kernel_taking_over_is_a_reported_panic_and_the_vm_runs_on(new_harness):
    # pvpanic `crash_loaded`: libvirt's CRASHED/CRASHLOADED event, no state change, no destroy.
    h = new_harness(vmi=make_vmi(devices={"panicDevices": [{"model": "pvpanic"}]}),
                    env={"FAKE_CH_PANIC_EVENT": "crash_loaded"})

    async def story():
        await h.boot()
        since = len(h.recorder.events)
        h.signal_vmm(signal.SIGURG)
        warning = await h.recorder.wait_for_k8s_event("GuestPanicked")
        assert warning["message"] == "GuestPanicked (details unavailable)"
        event = await h.recorder.wait_for(lambda e: e.domain["Status"]["PanicCount"] == 1, since=since)
        assert (event.status, event.reason) == ("Running", "Unknown")
        assert event.domain["Status"]["GuestPanicInfo"]["Type"] == "unknown"
        assert (await h.client.get_domain())["Status"]["Status"] == "Running"
        assert len(h.launcher.children()) == 1

    h.run(story())


# --- delete and exit -----------------------------------------------------------------------------


@BOTH_VMMS
def test_delete_sends_the_final_event_and_the_launcher_exits(vh):
    async def story():
        await vh.boot()
        vmm = vh.vmm_pid()
        await vh.guest_does("poweroff")
        await vh.recorder.wait_for_status("Shutoff", "Shutdown")
        await vh.client.vmi_command("DeleteVirtualMachine", vh.vmi)
        final = await vh.recorder.wait_for_deleted()
        assert final.event_type == "MODIFIED"
        assert final.status == "NoState" and final.reason == "NonExistent"
        assert await vh.launcher.wait_exit(20) == 0  # the pod's work is done, as virt-launcher's
        with pytest.raises(ProcessLookupError):
            os.kill(vmm, 0)

    vh.run(story())


def test_delete_without_a_vm_is_a_successful_no_op(vh):
    async def story():
        await vh.start()
        await vh.client.vmi_command("DeleteVirtualMachine", vh.vmi)
        await vh.client.vmi_command("KillVirtualMachine", vh.vmi)
        await vh.client.vmi_command("ShutdownVirtualMachine", vh.vmi)
        assert vh.recorder.events == [] and vh.launcher.poll() is None

    vh.run(story())


@BOTH_VMMS
def test_sigterm_marks_graceful_shutdown_and_virt_handler_completes_it(vh):
    async def story():
        await vh.boot()
        vh.launcher.send_signal(signal.SIGTERM)
        marked = await vh.recorder.wait_for(lambda e: e.grace.get("MarkedForGracefulShutdown") is True)
        assert marked.status == "Running"
        # virt-handler's side of the protocol: Shutdown until the guest is off, then Delete
        await vh.client.vmi_command("ShutdownVirtualMachine", vh.vmi)
        await vh.recorder.wait_for_status("Shutoff", "Shutdown")
        await vh.client.vmi_command("DeleteVirtualMachine", vh.vmi)
        await vh.recorder.wait_for_deleted()
        assert await vh.launcher.wait_exit(20) == 0

    vh.run(story())


@BOTH_VMMS
def test_sigterm_kills_the_vm_itself_after_the_grace_period(new_harness):
    h = new_harness(ignores_acpi=True, grace_period_seconds=1)

    async def story():
        await h.boot()
        h.launcher.send_signal(signal.SIGTERM)
        await h.recorder.wait_for(lambda e: e.grace.get("MarkedForGracefulShutdown") is True)
        await h.recorder.wait_for_status("Shutoff", "Destroyed", timeout=10)
        await h.client.vmi_command("DeleteVirtualMachine", h.vmi)
        await h.recorder.wait_for_deleted()
        assert await h.launcher.wait_exit(20) == 0

    h.run(story())


def test_sigterm_before_any_vm_exits_at_once(vh):
    async def story():
        await vh.start()
        vh.launcher.send_signal(signal.SIGTERM)
        assert await vh.launcher.wait_exit(10) == 0
        assert not vh.layout.cmd_socket.exists()

    vh.run(story())


def test_no_vm_within_qemu_timeout_exits_with_kubevirts_error(new_harness):
    h = new_harness(qemu_timeout="1s")

    async def story():
        await h.start()
        code = await h.launcher.wait_exit(15)
        assert code not in (None, 0)
        assert "timed out waiting for domain to be defined" in h.log_text()
        assert h.launcher.children() == []

    h.run(story())


# --- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize("payload", [b"{not json", b"", b"[]", b'{"spec": {"domain": {"cpu": {"cores": "many"}}}}'])
def test_a_malformed_vmi_is_refused_with_the_go_launchers_message(vh, payload):
    async def story():
        await vh.start()
        reply = await vh.client.sync(payload, check=False)
        assert not reply.success
        assert reply.message == "No valid vmi object present in command server request"
        assert (await vh.client.call("Ping")).success
        assert vh.requests("vm.create") == []

    vh.run(story())


def test_an_unsupported_feature_is_refused_naming_the_field_path(vh):
    async def story():
        await vh.start()
        vmi = vh.vmi_copy()
        vmi["spec"]["domain"]["devices"]["disks"][2] = {"name": "cloudinitdisk", "cdrom": {"bus": "sata"}}
        reply = await vh.client.sync(vmi, check=False)
        assert not reply.success
        assert "spec.domain.devices.disks[2].cdrom" in reply.message
        assert vh.requests("vm.create") == []
        assert await vh.client.get_domain() is None

    vh.run(story())


def test_a_vmm_that_cannot_start_fails_the_sync_with_the_reason(new_harness):
    h = new_harness(env={"FAKE_CH_EXIT_AT_START": "3"})

    async def story():
        await h.start()
        reply = await h.client.sync(h.vmi, check=False)
        assert not reply.success
        assert "cloud-hypervisor" in reply.message and "code 3" in reply.message
        assert (await h.client.call("Ping")).success

    h.run(story())


@pytest.mark.parametrize("version", ["52.0.0", "54.0.0"])
def test_a_vmm_of_an_unsupported_version_is_refused_naming_both_versions(new_harness, version):
    h = new_harness(env={"FAKE_CH_VERSION": version})

    async def story():
        await h.start()
        reply = await h.client.sync(h.vmi, check=False)
        assert not reply.success
        assert reply.message == (f"cloud-hypervisor {version} is not supported: this ch-launcher drives "
                                 "cloud-hypervisor >= 53.0.0, < 54.0.0")
        assert h.requests("vm.create") == [] and h.launcher.children() == []
        assert (await h.client.call("Ping")).success  # the launcher stays up and says it again
        assert f"cloud-hypervisor {version} is not supported" in h.log_text()  # already at start

    h.run(story())


# --- virt-handler's notify socket -----------------------------------------------------------------


def test_events_reach_a_notify_server_that_appears_late(new_harness):
    h = new_harness(notify=False)

    async def story():
        await h.start()
        await h.client.sync(h.vmi)
        await wait_for_file(h.layout.log_file, lambda log: UNDELIVERED in log, 15, "a failed notification")
        await h.recorder.start()  # virt-handler injects the pipe after its first connection
        await h.recorder.wait_for_status("Running", timeout=15)

    h.run(story())


def test_events_reach_a_restarted_virt_handler(vh):
    async def story():
        await vh.boot()
        await vh.recorder.stop()
        await vh.client.vmi_command("PauseVirtualMachine", vh.vmi)  # while virt-handler is away
        await wait_for_file(vh.layout.log_file, lambda log: UNDELIVERED in log, 15, "a failed notification")
        await vh.recorder.start()
        await vh.recorder.wait_for_status("Paused", "User", timeout=15)

    vh.run(story())


# --- every RPC answers -------------------------------------------------------------------------


def _request_for(rpc, vmi_json):
    from ch_launcher._proto import kubevirt_cmd_v1_pb2 as pb

    method = pb.DESCRIPTOR.services_by_name["Cmd"].methods_by_name[rpc]
    request = getattr(pb, method.input_type.name)()
    if method.input_type.name in ("ExecRequest", "GuestPingRequest"):
        request.domainName = "default_testvmi"
        request.timeoutSeconds = 1
    elif "vmi" in method.input_type.fields_by_name:
        request.vmi.vmiJson = vmi_json
    return request


def test_the_dirty_rate_virt_handler_scrapes_is_measured_from_what_the_guest_writes(new_harness):
    # virt-handler's dirty-rate collector calls GetDomainDirtyRateStats for every Running VMI on
    # every scrape and logs an error for each failure. The simulated guest writes 8000 random
    # pages a second into its 128 MiB: about a fifth of them within the measured second.
    h = new_harness(env={"FAKE_CH_DIRTY_PAGES": "8000"})

    async def story():
        await h.boot()
        reply = await h.client.call("GetDomainDirtyRateStats")
        assert reply.response.success, reply.response.message
        assert 0 < reply.dirtyRateMbs <= 128

    h.run(story())


@BOTH_VMMS
def test_every_rpc_answers_within_its_deadline_and_failures_say_why(vh):
    from ch_launcher._proto import kubevirt_cmd_v1_pb2 as pb
    from tests.framework import DEADLINES

    async def story():
        await vh.boot()
        vmi_json = json.dumps(vh.vmi).encode()
        # Commands that stop or change the VM are covered by the stories above; here: all others.
        skip = {"ShutdownVirtualMachine", "KillVirtualMachine", "DeleteVirtualMachine", "ResetVirtualMachine",
                "SoftRebootVirtualMachine", "SignalTargetPodCleanup"}
        answered = {}
        for method in pb.DESCRIPTOR.services_by_name["Cmd"].methods:
            if method.name in skip:
                continue
            deadline = DEADLINES.get(method.name, 20.0)
            started = time.monotonic()
            reply = await vh.client.call(method.name, _request_for(method.name, vmi_json), timeout=deadline)
            elapsed = time.monotonic() - started
            assert elapsed < deadline, f"{method.name} took {elapsed:.1f} s"
            response = reply if method.output_type.name == "Response" else reply.response
            if method.name in ("FreezeVirtualMachine", "UnfreezeVirtualMachine", "GuestPing", "Exec"):
                # exactly what virt-launcher answers without a connected guest agent (this guest runs
                # none: test_guest_agent.py has one)
                assert response.message.startswith("LibvirtError(Code=86, "), response.message
            elif not response.success:
                assert method.name in response.message and response.message.count(":") >= 1, response.message
            answered[method.name] = response.success
        served = {name for name, ok in answered.items() if ok}
        assert served == {"SyncVirtualMachine", "PauseVirtualMachine", "UnpauseVirtualMachine", "GetDomain",
                          "GetDomainStats", "GetDomainDirtyRateStats", "GetGuestInfo", "GetUsers", "GetFilesystems",
                          "Ping", "GetQemuVersion",
                          # the same vCPU count again: nothing to do; memory: refused, no maxGuest
                          "SyncVirtualMachineCPUs",
                          # no migration to cancel: nothing to do, success (as the Go launcher)
                          "CancelVirtualMachineMigration"}
        reply = await vh.client.call("GetFilesystems")
        assert reply.guestFilesystemsResponse == "[]"
        reply = await vh.client.call("GetQemuVersion")
        assert reply.version.startswith("cloud-hypervisor ")
        stats = await vh.client.get_domain_stats()
        assert stats["Name"] == "default_testvmi"

    vh.run(story())
