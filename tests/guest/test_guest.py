"""The tiny guest really runs on the real cloud-hypervisor and does what guest.S promises: its
marker and echo on COM1, every console command, the ACPI power button, hot-added and removed PCI
devices and vCPUs acknowledged and ejected as a Linux guest does, and idling without burning
CPU. Each story boots it in a VMM of its own; the launcher's stories use it in turn
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
from tests.guest.console import (
    COMMANDS,
    CPU_ADDED,
    CPU_EJECT,
    CPU_EJECT_IGNORED,
    DISK_MARK,
    FLOOD_LINE,
    FLOOD_STOPPED,
    PCI_ADDED,
    PCI_EJECT,
    PCI_EJECT_IGNORED,
    POWER_BUTTON,
    POWER_BUTTON_IGNORED,
    READY,
    GuestConsole,
    GuestTimeout,
    disk_states,
)

pytestmark = pytest.mark.real_vmm


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid`, all its threads (/proc/PID/stat utime, stime)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Booted:
    """A real VMM running the tiny guest, its event log and a console on its serial socket."""

    def __init__(self, directory: str, *, pvpanic: bool = True, no_shutdown: bool = False,
                 cpus: tuple[int, int] = (1, 1), disks: tuple[dict, ...] = ()) -> None:
        self.fifo = open_event_fifo(os.path.join(directory, "events"))
        self.serial = os.path.join(directory, "serial.sock")
        self.log_file = os.path.join(directory, "ch.log")
        self.vmm = VmmProcess.spawn(real_vmm.binary(), api_socket=os.path.join(directory, "api.sock"),
                                    event_monitor=self.fifo.path, log_file=os.path.join(directory, "ch.log"),
                                    no_shutdown=no_shutdown)
        self.events = EventLog(self.fifo)
        self.console: GuestConsole | None = None
        try:
            self.vmm.wait_ready(10.0)
            self.vmm.client.create({
                "payload": {"firmware": str(guest_payload())},
                "cpus": {"boot_vcpus": cpus[0], "max_vcpus": cpus[1]},
                "memory": {"size": 64 << 20},
                "serial": {"mode": "Socket", "socket": self.serial},
                "console": {"mode": "Off"},
                "pvpanic": pvpanic,
                **({"disks": list(disks)} if disks else {}),
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


def unregistered_accesses(g: Booted) -> list[str]:
    """What the guest touched where no device is: Cloud Hypervisor logs each such access."""
    with open(g.log_file, errors="replace") as f:
        return [line for line in f if "unregistered address" in line]


def test_the_acpi_power_button_powers_it_off_and_the_vmm_exits(new_guest):
    g = new_guest()
    g.console.hello()
    g.vmm.client.power_button()
    g.console.read_until(POWER_BUTTON)
    assert g.vmm.wait(10.0) == 0, g.vmm.log_tail()
    # it read the GED's event byte where the GED is (above 4 GiB, through its paging window)
    assert unregistered_accesses(g) == []


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


def test_a_flood_prints_without_pause_until_told_to_stop_and_the_guest_idles_again(new_guest):
    g = new_guest()
    g.console.hello()
    g.console.command("flood")
    start = time.monotonic()
    while time.monotonic() - start < 1.0:
        g.console._read(start + 1.0)
    lines = g.console.seen.count(FLOOD_LINE)  # each byte is a port write the VMM handles (on PVM: emulated)
    assert lines > 20, g.console.seen[-400:]
    g.console.send(b"~f")  # read between two lines: the flood stops
    g.console.read_until(FLOOD_STOPPED)
    g.console.read_until(b"\r\n")
    assert g.console.command("hello").endswith(COMMANDS["hello"][1])
    assert FLOOD_LINE not in g.console.seen
    print(f"\nflood: {lines} lines ({lines * len(FLOOD_LINE) / 1024:.1f} KiB) in 1 s")
    before = cpu_seconds(g.vmm.pid)  # idle again: interrupts on, hlt
    time.sleep(1.0)
    assert cpu_seconds(g.vmm.pid) - before < 0.1


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
                          capture_output=True, text=True, timeout=60, cwd=str(real_vmm.REPO), check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "KCH-GUEST-POWEROFF"
    assert g.vmm.wait(10.0) == 0
    done = subprocess.run([sys.executable, "-m", "tests.guest.console", "--timeout", "1",
                           os.path.join(link_dir, "virt-serial0"), "hello"],
                          capture_output=True, text=True, timeout=60, cwd=str(real_vmm.REPO), check=False)
    assert done.returncode == 1 and "cannot connect to the console" in done.stderr


def test_the_marker_is_printed_at_every_boot(new_guest):
    g = new_guest()
    g.console.wait_ready()
    g.console.command("reboot")
    g.events.wait_for("vm:rebooted", after_mark=False)  # then CH has a new serial socket
    g.console.reconnect()
    assert READY in g.console.read_until(READY)  # CH kept what the guest printed meanwhile


# --- hotplug: what a Linux guest's ACPI does -------------------------------------------------

def hot_disk(g: Booted, name: str = "hot") -> tuple[str, str]:
    """A disk added to the running VM: (its bdf, the slot the guest reports, "0:<device>")."""
    path = os.path.join(os.path.dirname(g.serial), f"{name}.img")
    with open(path, "wb") as f:
        f.truncate(1 << 20)
    info = g.vmm.client.add_disk({"id": name, "path": path, "image_type": "Raw"})
    assert info is not None
    return info.bdf, f"0:{int(info.bdf.split(':')[2].split('.')[0], 16)}"


def test_a_hot_added_device_is_seen_and_a_removed_one_is_ejected_by_the_guest(new_guest):
    g = new_guest()
    g.console.hello()
    bdf, slot = hot_disk(g)
    assert g.console.reported(PCI_ADDED) == slot
    g.events.set_mark()
    g.vmm.client.remove_device("hot")
    assert g.console.reported(PCI_EJECT) == slot
    removed = g.events.wait_for("vm:device-removed")
    assert removed.properties == {"id": "hot", "bdf": bdf}
    assert "hot" not in (g.vmm.client.info().device_tree or {})
    bdf_again, slot_again = hot_disk(g, "again")  # the slot is free again
    assert g.console.reported(PCI_ADDED) == slot_again and bdf_again == bdf
    assert unregistered_accesses(g) == []  # every register it used is the hotplug controller's


def test_a_guest_told_to_ignore_ejects_keeps_the_device_until_told_otherwise(new_guest):
    g = new_guest()
    g.console.hello()
    g.console.command("ignore-eject")
    _, slot = hot_disk(g)
    g.vmm.client.remove_device("hot")
    assert g.console.reported(PCI_EJECT_IGNORED) == slot
    g.console.command("hello")  # the guest runs on; the device stays in the VM
    assert "hot" in (g.vmm.client.info().device_tree or {})
    assert "vm:device-removed" not in g.events.names()
    g.console.command("honour-eject")  # the next request is honoured
    _, other = hot_disk(g, "other")
    g.events.set_mark()
    g.vmm.client.remove_device("other")
    assert g.console.reported(PCI_EJECT) == other
    assert g.events.wait_for("vm:device-removed").properties["id"] == "other"


def wait_until_removed(g: Booted, count: int, timeout: float = 10.0) -> None:
    """Until no vCPU removal is pending: CH refuses a resize to `count` with 429 while vCPUs it
    removes are still there (they count as present), and takes it as nothing to do after."""
    from ch_launcher.ch.api import Conflict

    deadline = time.monotonic() + timeout
    while True:
        try:
            g.vmm.client.resize(desired_vcpus=count)
            return
        except Conflict as e:
            assert e.status == 429 and time.monotonic() < deadline, f"the removal is still pending: {e}"
        time.sleep(0.02)


def test_added_vcpus_are_acknowledged_and_removed_ones_ejected_so_the_next_resize_is_accepted(new_guest):
    g = new_guest(cpus=(2, 4))
    g.console.hello()
    g.vmm.client.resize(desired_vcpus=4)
    assert [g.console.reported(CPU_ADDED) for _ in range(2)] == ["2", "3"]
    g.vmm.client.resize(desired_vcpus=1)
    assert [g.console.reported(CPU_EJECT) for _ in range(3)] == ["1", "2", "3"]
    wait_until_removed(g, 1)  # the guest prints before it ejects
    g.vmm.client.resize(desired_vcpus=2)
    assert g.console.reported(CPU_ADDED) == "1"
    assert g.vmm.client.info().config["cpus"]["boot_vcpus"] == 2
    g.console.command("hello")
    assert unregistered_accesses(g) == []


def test_a_vcpu_removal_the_guest_ignores_stays_pending(new_guest):
    from ch_launcher.ch.api import Conflict

    g = new_guest(cpus=(2, 2))
    g.console.hello()
    g.console.command("ignore-eject")
    g.vmm.client.resize(desired_vcpus=1)
    assert g.console.reported(CPU_EJECT_IGNORED) == "1"
    with pytest.raises(Conflict) as refused:  # vCPU 1 is still there, its removal pending
        g.vmm.client.resize(desired_vcpus=1)
    assert refused.value.status == 429
    assert g.vmm.client.info().config["cpus"]["boot_vcpus"] == 1  # the config says what was asked


# --- disks: what a guest writes lands on the host's image --------------------------------------

def slot_of(g: Booted, disk_id: str) -> str:
    """The "<segment>:<slot>" the guest reports for the VM's disk `disk_id`: the bdf of its
    virtio-pci transport in vm.info's device tree (the node whose child it is)."""
    tree = g.vmm.client.info().device_tree or {}
    (bdf,) = [node["pci_bdf"] for node in tree.values() if disk_id in node.get("children", []) and "pci_bdf" in node]
    segment, _bus, device = str(bdf).split(".")[0].split(":")
    return f"{int(segment, 16)}:{int(device, 16)}"


def test_the_guest_writes_its_mark_on_each_writable_disk_and_reads_it_back_after_a_reboot(new_guest, tmp_path):
    """Raw and qcow2 images and a read-only one, each with its `image_type` (as the launcher sends
    them: without it Cloud Hypervisor refuses a write to sector 0 of a raw image, virtio-devices/
    src/block.rs@v53, and the guest reports an ERROR): the mark lands at the start of each
    writable image (the raw one as the host reads it), survives a reboot, and the read-only disk
    is left alone."""
    raw, ro, qcow2 = tmp_path / "raw.img", tmp_path / "ro.img", tmp_path / "disk.qcow2"
    for image in (raw, ro):
        image.write_bytes(b"\0" * (1 << 20))
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(qcow2), "1M"], check=True)
    g = new_guest(disks=({"id": "raw", "path": str(raw), "image_type": "Raw"},
                         {"id": "ro", "path": str(ro), "image_type": "Raw", "readonly": True},
                         {"id": "qcow2", "path": str(qcow2), "image_type": "Qcow2"}))
    slots = {name: slot_of(g, name) for name in ("raw", "ro", "qcow2")}
    g.console.hello()
    assert disk_states(g.console.command("disk-read")) == dict.fromkeys(slots.values(), "UNMARKED")
    assert disk_states(g.console.command("disk-write")) == {
        slots["raw"]: "WRITTEN", slots["ro"]: "READ-ONLY", slots["qcow2"]: "WRITTEN"}
    assert raw.read_bytes()[:4096] == DISK_MARK + b"\0" * (4096 - len(DISK_MARK))
    assert ro.read_bytes() == b"\0" * (1 << 20)
    g.console.command("reboot")
    g.events.wait_for("vm:rebooted", after_mark=False)
    g.console.reconnect()
    g.console.hello()
    assert disk_states(g.console.command("disk-read")) == {
        slots["raw"]: "MARKED", slots["ro"]: "UNMARKED", slots["qcow2"]: "MARKED"}


def test_a_hot_added_disk_is_written_like_the_others_and_without_disks_the_guest_says_so(new_guest):
    g = new_guest()
    g.console.hello()
    out = g.console.command("disk-write")
    assert b"KCH-GUEST-NO-DISKS" in out and disk_states(out) == {}
    _bdf, slot = hot_disk(g)
    assert g.console.reported(PCI_ADDED) == slot
    assert disk_states(g.console.command("disk-write")) == {slot: "WRITTEN"}
    assert disk_states(g.console.command("disk-read")) == {slot: "MARKED"}
    image = os.path.join(os.path.dirname(g.serial), "hot.img")
    with open(image, "rb") as f:
        assert f.read(len(DISK_MARK)) == DISK_MARK
