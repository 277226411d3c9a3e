"""The process supervisor against a VMM: start-up, readiness, failures, stop, guest-driven exits."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable

import pytest

from ch_launcher.ch.api import VmmUnavailable
from ch_launcher.ch.process import VmmProcess, VmmStartError
from tests.contract.harness import FAKE, Backend, Vmm
from tests.guest.console import COMMANDS, POWER_BUTTON_IGNORED, GuestConsole, GuestTimeout


def _stale_socket(path: str) -> None:
    """Bound, never listening: what a killed VMM leaves behind."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.close()


def test_vmm_answers_ping_with_its_version(vmm: Vmm) -> None:
    pong = vmm.client.ping()
    assert pong.version.count(".") == 2
    assert vmm.proc.version == pong.version == vmm.client.version
    assert pong.pid == vmm.proc.pid


def test_spawn_replaces_a_stale_api_socket(backend: Backend, start: Callable[..., Vmm], sdir: str) -> None:
    stale = os.path.join(sdir, "ch0.sock")
    _stale_socket(stale)
    vmm = start(backend)
    assert vmm.api_socket == stale
    assert vmm.client.ping().version


def test_a_v52_vmm_cannot_start_over_a_stale_socket(sdir: str) -> None:
    # <= v52 fails to bind over a stale socket (v53 removes it under its .lock): why spawn unlinks it.
    path = os.path.join(sdir, "api.sock")
    _stale_socket(path)
    result = subprocess.run(
        [FAKE.binary, "--api-socket", f"path={path}"], env={**os.environ, "FAKE_CH_VERSION": "52.0.0"},
        capture_output=True, timeout=10, start_new_session=True, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert b"Error creating API server socket" in result.stderr


def test_stale_socket_is_removed_by_a_v53_vmm_itself(sdir: str) -> None:
    path = os.path.join(sdir, "api.sock")
    _stale_socket(path)
    proc = subprocess.Popen(
        [FAKE.binary, "--api-socket", f"path={path}"], env={**os.environ, "FAKE_CH_VERSION": "53.0.0"},
        start_new_session=True,
    )  # fmt: skip
    try:
        client_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        deadline = time.monotonic() + 10
        while True:
            try:
                client_sock.connect(path)
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.02)
        client_sock.close()
        assert os.path.exists(path + ".lock")
    finally:
        proc.kill()
        proc.wait()


def test_a_second_v53_vmm_on_the_same_socket_fails_with_socket_in_use(start: Callable[..., Vmm], sdir: str) -> None:
    first = start(FAKE)
    result = subprocess.run(
        [FAKE.binary, "--api-socket", f"path={first.api_socket}"], env={**os.environ, "FAKE_CH_VERSION": "53.0.0"},
        capture_output=True, timeout=10, start_new_session=True, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert b"ApiSocketInUse" in result.stderr
    assert first.client.ping()


def test_vmm_dying_during_startup_is_reported_with_its_exit_code_and_log(start: Callable[..., Vmm]) -> None:
    vmm = start(FAKE, env={"FAKE_CH_EXIT_AT_START": "3"}, wait=False)
    t0 = time.monotonic()
    with pytest.raises(VmmStartError) as info:
        vmm.proc.wait_ready(60.0)
    message = str(info.value)
    assert "exited with code 3 during start-up" in message
    assert "FAKE_CH_EXIT_AT_START=3" in message  # the tail of its log (stderr) is included
    assert time.monotonic() - t0 < 30.0  # noticed from the exit, not from the 60 s timeout


def test_vmm_killed_during_startup_is_reported_with_the_signal(start: Callable[..., Vmm]) -> None:
    vmm = start(FAKE, env={"FAKE_CH_START_DELAY": "5"}, wait=False)
    vmm.events.wait_for("vmm:starting")  # it is in its start-up delay
    vmm.signal(signal.SIGKILL)
    with pytest.raises(VmmStartError, match="was killed by SIGKILL during start-up"):
        vmm.proc.wait_ready(10.0)


def test_vmm_that_never_opens_its_socket_fails_after_a_bounded_wait(start: Callable[..., Vmm]) -> None:
    vmm = start(FAKE, env={"FAKE_CH_NO_API_SOCKET": "1"}, wait=False)
    t0 = time.monotonic()
    with pytest.raises(VmmStartError) as info:
        vmm.proc.wait_ready(0.5)
    assert time.monotonic() - t0 < 5.0
    assert "never answered vmm.ping within 0.5 s" in str(info.value)
    assert "the API socket never appeared" in str(info.value)
    assert vmm.proc.poll() is None  # left running for the caller to terminate
    vmm.events.wait_for("vmm:starting", timeout=30)  # its SIGTERM handler is in place
    assert vmm.proc.terminate(shutdown_timeout=0.5, term_timeout=10.0) == 0  # SIGTERM: a clean exit


def test_terminate_does_not_wait_out_a_shutdown_request_that_was_never_delivered(start: Callable[..., Vmm]) -> None:
    vmm = start(FAKE, env={"FAKE_CH_NO_API_SOCKET": "1"}, wait=False)
    vmm.events.wait_for("vmm:starting", timeout=30)  # up, with its SIGTERM handler in place
    t0 = time.monotonic()
    # No API socket: vmm.shutdown cannot be delivered, so SIGTERM follows at once, not after 20 s.
    assert vmm.proc.terminate(shutdown_timeout=20.0, term_timeout=10.0) == 0
    assert time.monotonic() - t0 < 10.0


def test_slow_vmm_start_is_waited_for(start: Callable[..., Vmm]) -> None:
    vmm = start(FAKE, env={"FAKE_CH_START_DELAY": "0.5"})
    assert vmm.client.ping()


def test_hung_call_times_out_naming_the_endpoint_and_the_wait(start: Callable[..., Vmm]) -> None:
    vmm = start(FAKE, env={"FAKE_CH_HANG_ENDPOINT": "vm.info"})
    vmm.client.create(vmm.config())
    with pytest.raises(VmmUnavailable) as info:
        vmm.client.info(timeout=0.3)
    assert info.value.endpoint == "vm.info"
    assert info.value.status is None
    assert str(info.value) == "vm.info failed: no answer from the VMM within 0.3 s"
    # The whole API is stalled now, as with the real VMM: stop escalates to SIGTERM.
    t0 = time.monotonic()
    assert vmm.proc.terminate(shutdown_timeout=0.3, term_timeout=3.0) == 0
    assert time.monotonic() - t0 < 5.0


BOOTED_THEN_STOPPED = ["vmm:starting", "vm:booting", "vm:booted", "vm:shutdown", "vm:deleted", "vmm:shutdown"]


def assert_final_events(vmm: Vmm) -> None:
    """A VM booted and then stopped with its VMM: the events say so, in order. The real VMM
    writes events from a thread it does not join before process::exit (cloud-hypervisor
    vmm/src/lib.rs start_event_monitor_thread, cloud-hypervisor/src/main.rs@v53), so on a busy
    machine the last ones (even vm:booted) can be lost: what arrives is a prefix. A launcher must
    not depend on them (it reads the exit status; see manager/life.py VmmLife.gone)."""
    names = [n for n in vmm.events.names() if not n.startswith("virtio-device")]
    if vmm.backend.real:
        assert names == BOOTED_THEN_STOPPED[: len(names)], names
    else:
        assert names == BOOTED_THEN_STOPPED


def test_terminate_uses_vmm_shutdown_and_reaps(vmm: Vmm) -> None:
    vmm.client.create(vmm.config())
    vmm.client.boot()
    assert vmm.proc.terminate() == 0
    assert vmm.proc.poll() == 0
    assert not os.path.exists(vmm.api_socket)  # a clean exit removes the socket
    assert_final_events(vmm)
    assert vmm.proc.terminate() == 0  # twice is fine


def test_terminate_kills_a_vmm_that_ignores_sigterm(sdir: str) -> None:
    script = os.path.join(sdir, "stubborn")
    ready = os.path.join(sdir, "ready")
    with open(script, "w") as f:
        f.write(f"#!/bin/sh\ntrap '' TERM\n: > {ready}\nwhile :; do sleep 0.05; done\n")
    os.chmod(script, 0o755)
    proc = VmmProcess.spawn(
        script, api_socket=os.path.join(sdir, "a.sock"), event_monitor=os.path.join(sdir, "ev"),
        log_file=os.path.join(sdir, "log"),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(ready):  # SIGTERM before the trap would simply kill it
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.01)
        assert proc.terminate(shutdown_timeout=0.2, term_timeout=0.3) == -signal.SIGKILL
    finally:
        proc.close()


def test_pidfd_becomes_readable_when_the_vmm_exits(vmm: Vmm) -> None:
    import select

    assert vmm.proc.pidfd is not None
    assert select.select([vmm.proc.pidfd], [], [], 0)[0] == []
    vmm.client.shutdown_vmm()
    assert select.select([vmm.proc.pidfd], [], [], 10)[0] == [vmm.proc.pidfd]
    assert vmm.proc.wait(5) == 0


def test_sigterm_deletes_the_vm_and_exits_cleanly(vmm: Vmm) -> None:
    vmm.client.create(vmm.config())
    vmm.client.boot()
    vmm.signal(signal.SIGTERM)
    assert vmm.proc.wait(10) == 0
    assert_final_events(vmm)
    assert not os.path.exists(vmm.api_socket)


def test_calls_to_an_exited_vmm_say_the_socket_is_gone(vmm: Vmm) -> None:
    vmm.client.shutdown_vmm()
    vmm.proc.wait(10)
    with pytest.raises(VmmUnavailable, match=r"API socket .* does not exist"):
        vmm.client.info()


# --- guest-driven exits (the simulated guest acts on signals, the tiny guest on commands) -------


def test_guest_poweroff_ends_the_vmm_without_no_shutdown(guest_backend: Backend, start: Callable[..., Vmm]) -> None:
    vmm = start(guest_backend)
    vmm.client.create(vmm.guest_config())
    vmm.client.boot()
    vmm.guest_does("poweroff")
    assert vmm.proc.wait(10) == 0
    assert_final_events(vmm)
    assert not os.path.exists(vmm.api_socket)


def test_guest_poweroff_with_no_shutdown_leaves_a_created_vm_that_boots_again(
        guest_backend: Backend, start: Callable[..., Vmm]) -> None:
    vmm = start(guest_backend, no_shutdown=True)
    vmm.client.create(vmm.guest_config())
    vmm.client.boot()
    vmm.events.wait_for("vm:booted", after_mark=False)  # the real VMM may write it after answering
    vmm.events.set_mark()
    vmm.guest_does("poweroff")
    vmm.events.wait_for("vm:shutdown")
    assert vmm.proc.poll() is None
    assert vmm.client.info().state == "Created"
    assert [n for n in vmm.events.since_mark() if not n.startswith("virtio")] == ["vm:shutdown"]
    vmm.client.boot()
    assert vmm.client.info().state == "Running"


def test_power_button_makes_the_guest_power_off(guest_backend: Backend, start: Callable[..., Vmm]) -> None:
    vmm = start(guest_backend, no_shutdown=True)
    vmm.client.create(vmm.guest_config())
    vmm.client.boot()
    if guest_backend.real:
        vmm.guest_does("hello")  # booted far enough to take the ACPI event
    vmm.events.set_mark()
    vmm.client.power_button()
    vmm.events.wait_for("vm:shutdown", timeout=5)
    assert vmm.client.info().state == "Created"


def test_power_button_makes_the_simulated_guest_power_off_after_the_acpi_delay(start: Callable[..., Vmm]) -> None:
    vmm = start(FAKE, no_shutdown=True, env={"FAKE_CH_ACPI_DELAY": "0.3"})
    vmm.client.create(vmm.config())
    vmm.client.boot()
    vmm.events.wait_for("vm:booted", after_mark=False)  # the real VMM may write it after answering
    vmm.events.set_mark()
    vmm.client.power_button()
    assert vmm.client.info().state == "Running"  # the guest takes its time
    vmm.events.wait_for("vm:shutdown", timeout=5)
    assert vmm.client.info().state == "Created"


def test_power_button_is_ignored_by_a_guest_without_acpi(guest_backend: Backend, start: Callable[..., Vmm]) -> None:
    vmm = start(guest_backend, env={"FAKE_CH_ACPI_DELAY": "never"})
    vmm.client.create(vmm.guest_config())
    vmm.client.boot()
    if guest_backend.real:
        # One connection throughout: a client that reconnects to CH's serial socket at once may
        # miss the first bytes (CH writes them to the old connection until it sees it closed).
        with GuestConsole(vmm.serial_socket) as console:
            console.hello()
            console.command("ignore-acpi")
            vmm.client.power_button()
            console.read_until(POWER_BUTTON_IGNORED)
    else:
        vmm.client.power_button()
        assert "the guest ignores ACPI" in vmm.proc.log_tail()  # no poweroff was scheduled
    assert vmm.client.info().state == "Running"


def test_guest_poweroff_while_paused_happens_after_resume(guest_backend: Backend, start: Callable[..., Vmm]) -> None:
    vmm = start(guest_backend, no_shutdown=True)
    vmm.client.create(vmm.guest_config())
    vmm.client.boot()
    if guest_backend.real:
        with GuestConsole(vmm.serial_socket) as console:  # one connection throughout (see above)
            console.hello()
            vmm.client.pause()
            console.send(b"~p")  # typed while paused: the guest acts once it runs again
            assert vmm.client.info().state == "Paused"
            vmm.client.resume()
            console.read_until(COMMANDS["poweroff"][1])
    else:
        vmm.client.pause()
        vmm.signal(signal.SIGUSR1)  # acted on before the next request is answered
        assert vmm.client.info().state == "Paused"
        assert "guest poweroff deferred: the VM is paused" in vmm.proc.log_tail()
        vmm.client.resume()
    vmm.events.wait_for("vm:shutdown", after_mark=False)
    assert vmm.client.info().state == "Created"


@pytest.mark.parametrize("no_shutdown", [False, True])
def test_a_vcpu_failure_ends_the_vmm_as_a_poweroff_would_and_only_the_log_says_why(
        guest_backend: Backend, start: Callable[..., Vmm], no_shutdown: bool) -> None:
    """A KVM emulation failure (the tiny guest jumps to MMIO; the simulated one on SIGPWR): CH
    tears the VM down through exit_evt, so the events and the exit code are a poweroff's, and
    --no-shutdown does not keep the VMM (it only governs the guest's own exit). The log's ERROR
    line is the one difference (ch.vmmlog)."""
    vmm = start(guest_backend, no_shutdown=no_shutdown)
    vmm.client.create(vmm.guest_config())
    vmm.client.boot()
    vmm.guest_does("emulation-failure")
    assert vmm.proc.wait(10) == 0, vmm.proc.log_tail()
    assert_final_events(vmm)
    assert vmm.proc.failure() == ("VCPU generated error: VcpuRun(Failed to run vcpu: "
                                  "Unexpected exit reason on vcpu run: InternalError)")


def test_a_guest_poweroff_leaves_no_failure_in_the_log(guest_backend: Backend, start: Callable[..., Vmm]) -> None:
    vmm = start(guest_backend)
    vmm.client.create(vmm.guest_config())
    vmm.client.boot()
    vmm.guest_does("triple-fault")  # an ERROR line too ("Guest likely triple-faulted"), but a reset
    vmm.events.wait_for("vm:rebooted", after_mark=False)
    vmm.guest_does("poweroff")
    assert vmm.proc.wait(10) == 0
    assert vmm.proc.failure() is None, vmm.proc.log_tail()


@pytest.mark.parametrize("how", ["reboot", "triple-fault"])
def test_guest_reboot_rebuilds_the_vm_in_process(guest_backend: Backend, start: Callable[..., Vmm], how: str) -> None:
    vmm = start(guest_backend)
    vmm.client.create(vmm.guest_config())
    vmm.client.boot()
    vmm.events.wait_for("vm:booted", after_mark=False)  # the real VMM may write it after answering
    vmm.events.set_mark()
    vmm.guest_does(how)
    vmm.events.wait_for("vm:rebooted")
    assert vmm.proc.poll() is None
    assert vmm.client.info().state == "Running"
    assert [n for n in vmm.events.since_mark() if n.startswith("vm:")] == ["vm:rebooting", "vm:rebooted"]


@pytest.mark.parametrize("pvpanic", [True, False])
def test_guest_panic_is_reported_only_with_pvpanic(guest_backend: Backend, start: Callable[..., Vmm],
                                                  pvpanic: bool) -> None:
    vmm = start(guest_backend)
    vmm.client.create(vmm.guest_config(pvpanic=pvpanic))
    vmm.client.boot()
    if pvpanic or not guest_backend.real:
        vmm.guest_does("panic")
    else:
        with pytest.raises(GuestTimeout, match="no pvpanic device"):  # the tiny guest finds none
            vmm.guest_does("panic")
    if pvpanic:
        panic = vmm.events.wait_for("guest:panic", after_mark=False)
        assert [e.properties for e in vmm.events.seen if e.name == "guest:panic"] == [{"event": "panic"}]
        assert panic.properties == {"event": "panic"}
    else:
        assert "guest:panic" not in vmm.events.names()
        if not guest_backend.real:
            assert "guest panicked, but there is no pvpanic device" in vmm.proc.log_tail()
    assert vmm.client.info().state == "Running"


def test_a_bad_knob_value_stops_the_simulated_vmm_with_a_clear_error(start: Callable[..., Vmm]) -> None:
    vmm = start(FAKE, env={"FAKE_CH_ACPI_DELAY": "soon"}, wait=False)
    with pytest.raises(VmmStartError, match="exited with code 2") as info:
        vmm.proc.wait_ready(10.0)
    assert "FAKE_CH_ACPI_DELAY='soon' is not a number of seconds or 'never'" in str(info.value)
