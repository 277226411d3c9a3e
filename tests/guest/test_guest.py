"""The tiny guest really runs on the real cloud-hypervisor and does what guest.S promises: its
marker and echo on COM1, every console command, the ACPI power button, and idling without
burning CPU. Each story boots it in a VMM of its own; the launcher's stories use it in turn
(tests/functional/test_launcher_stories.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import pytest

from ch_launcher.ch.events import open_event_fifo
from ch_launcher.ch.process import VmmProcess
from tests import real_vmm
from tests.contract.harness import EventLog
from tests.guest.build import guest_payload
from tests.guest.console import COMMANDS, POWER_BUTTON, POWER_BUTTON_IGNORED, READY, GuestConsole, GuestTimeout

pytestmark = pytest.mark.real_vmm


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid`, all its threads (/proc/PID/stat utime, stime)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Booted:
    """A real VMM running the tiny guest, its event log and a console on its serial socket."""

    def __init__(self, directory: str, *, pvpanic: bool = True, no_shutdown: bool = False) -> None:
        self.fifo = open_event_fifo(os.path.join(directory, "events"))
        self.serial = os.path.join(directory, "serial.sock")
        self.vmm = VmmProcess.spawn(real_vmm.binary(), api_socket=os.path.join(directory, "api.sock"),
                                    event_monitor=self.fifo.path, log_file=os.path.join(directory, "ch.log"),
                                    no_shutdown=no_shutdown)
        self.events = EventLog(self.fifo)
        self.console: GuestConsole | None = None
        try:
            self.vmm.wait_ready(10.0)
            self.vmm.client.create({
                "payload": {"firmware": str(guest_payload())},
                "cpus": {"boot_vcpus": 1, "max_vcpus": 1},
                "memory": {"size": 64 << 20},
                "serial": {"mode": "Socket", "socket": self.serial},
                "console": {"mode": "Off"},
                "pvpanic": pvpanic,
            })
            self.vmm.client.boot()
            self.console = GuestConsole(self.serial)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.console is not None:
            self.console.close()
        self.vmm.terminate(2.0, 2.0)
        self.vmm.close()
        self.fifo.close()


@pytest.fixture
def new_guest() -> Iterator:
    reason = real_vmm.unavailable(tiny_guest=True)
    if reason:
        pytest.skip(reason)
    made: list[Booted] = []
    directory = tempfile.mkdtemp(prefix="kg", dir="/tmp")  # unix socket paths must stay short

    def new(**kwargs) -> Booted:
        sub = os.path.join(directory, str(len(made)))
        os.makedirs(sub)
        made.append(Booted(sub, **kwargs))
        return made[-1]

    yield new
    for booted in made:
        booted.close()
    shutil.rmtree(directory, ignore_errors=True)


def test_it_prints_its_marker_echoes_and_idles_without_burning_cpu(new_guest):
    g = new_guest()
    g.console.wait_ready()  # CH v53 buffers what the guest printed before we connected
    g.console.send(b"echo-me\r")
    g.console.read_until(b"echo-me\r")
    g.console.send(b"~~")  # a typed '~' is '~~'
    g.console.read_until(b"~")
    assert g.console.command("hello").endswith(COMMANDS["hello"][1])
    g.console.send(b"~z")
    g.console.read_until(b"KCH-GUEST-UNKNOWN-COMMAND")
    # Idle: the vCPU sits in hlt. Over a second the whole VMM uses next to no CPU (a polling
    # guest keeps a vCPU thread busy all the time, even on a loaded machine a good part of it).
    before = cpu_seconds(g.vmm.pid)
    time.sleep(1.0)
    used = cpu_seconds(g.vmm.pid) - before
    assert used < 0.1, f"the idle guest's VMM used {used:.2f} s of CPU in 1 s"


def test_the_acpi_power_button_powers_it_off_and_the_vmm_exits(new_guest):
    g = new_guest()
    g.console.hello()
    g.vmm.client.power_button()
    g.console.read_until(POWER_BUTTON)
    assert g.vmm.wait(10.0) == 0, g.vmm.log_tail()


def test_a_guest_told_to_ignore_acpi_ignores_the_power_button_until_told_otherwise(new_guest):
    g = new_guest(no_shutdown=True)
    g.console.hello()
    g.console.command("ignore-acpi")
    for _ in range(2):
        g.vmm.client.power_button()
        g.console.read_until(POWER_BUTTON_IGNORED)
    assert g.vmm.client.info().state == "Running"
    g.console.command("honour-acpi")
    g.events.set_mark()
    g.vmm.client.power_button()
    g.console.read_until(POWER_BUTTON)
    g.events.wait_for("vm:shutdown")
    assert g.vmm.client.info().state == "Created"  # --no-shutdown: the VMM stays


def test_poweroff_on_command_ends_the_vmm(new_guest):
    g = new_guest()
    g.console.hello()
    g.console.command("poweroff")
    assert g.vmm.wait(10.0) == 0, g.vmm.log_tail()


@pytest.mark.parametrize("how", ["reboot", "triple-fault"])
def test_a_reboot_or_a_triple_fault_resets_the_vm_in_process_and_it_boots_again(new_guest, how):
    g = new_guest()
    g.console.hello()
    g.events.wait_for("vm:booted", after_mark=False)  # written by CH's own thread, maybe late
    g.events.set_mark()
    g.console.command(how)
    g.events.wait_for("vm:rebooted")
    assert [n for n in g.events.since_mark() if n.startswith("vm:")] == ["vm:rebooting", "vm:rebooted"]
    g.console.hello()  # CH recreated its serial socket: hello reconnects
    assert g.vmm.poll() is None and g.vmm.client.info().state == "Running"


def test_an_emulation_failure_stops_the_vm_with_a_vcpu_error(new_guest):
    g = new_guest(no_shutdown=True)
    g.console.hello()
    g.console.command("emulation-failure")
    assert g.vmm.wait(10.0) == 0  # exit_evt: the VMM ends even with --no-shutdown
    assert "Unexpected exit reason on vcpu run: InternalError" in (g.vmm.failure() or ""), g.vmm.log_tail()


def test_panic_signals_the_pvpanic_device_and_the_guest_runs_on(new_guest):
    g = new_guest()
    g.console.hello()
    g.console.command("panic")
    event = g.events.wait_for("guest:panic", after_mark=False)
    assert event.properties == {"event": "panic"}
    g.console.command("hello")
    assert g.vmm.client.info().state == "Running"


def test_panic_without_a_pvpanic_device_says_so(new_guest):
    g = new_guest(pvpanic=False)
    g.console.hello()
    with pytest.raises(GuestTimeout, match="no pvpanic device"):
        g.console.command("panic")
    assert "guest:panic" not in g.events.names()


def test_the_command_line_entry_drives_the_guest_through_a_directory_of_consoles(new_guest):
    # kubevirt-probe's CHPROBE_GUEST_ACTION runs it with the launcher's private dir, which holds
    # <vmi-uid>/virt-serial0; here CH's own socket stands in, one level down.
    g = new_guest()
    g.console.close()
    g.console = None
    private = os.path.dirname(os.path.dirname(g.serial))
    link_dir = os.path.join(private, "uid")
    os.makedirs(link_dir, exist_ok=True)
    os.symlink(g.serial, os.path.join(link_dir, "virt-serial0"))
    done = subprocess.run([sys.executable, "-m", "tests.guest.console", private, "poweroff"],
                          capture_output=True, text=True, timeout=60, cwd=str(real_vmm.REPO))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "KCH-GUEST-POWEROFF"
    assert g.vmm.wait(10.0) == 0
    done = subprocess.run([sys.executable, "-m", "tests.guest.console", "--timeout", "1",
                           os.path.join(link_dir, "virt-serial0"), "hello"],
                          capture_output=True, text=True, timeout=60, cwd=str(real_vmm.REPO))
    assert done.returncode == 1 and "cannot connect to the console" in done.stderr


def test_the_marker_is_printed_at_every_boot(new_guest):
    g = new_guest()
    g.console.wait_ready()
    g.console.command("reboot")
    g.events.wait_for("vm:rebooted", after_mark=False)  # then CH has a new serial socket
    g.console.reconnect()
    assert READY in g.console.read_until(READY)  # CH kept what the guest printed meanwhile
