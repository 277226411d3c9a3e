"""Every state x call cell of cloud-hypervisor.md §5.2 that the launcher can hit, through the client.

Each cell: bring the VMM to a state (NONE, CREATED, RUNNING, PAUSED), make one call, and check
what a launcher relies on: success or the exact error class, the status for the VMM's version,
a message of the chain, `already_in_state()`, the events written, and the state afterwards.
The simulated VMM runs as four versions (plain-text bodies of v46, JSON arrays of v52, v53's 404,
main's mapping); a real VMM runs as whatever version it is. One VMM per version serves all
cells (`vm.delete` resets it), which keeps the table fast.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from ch_launcher.ch.api import ChApiError, Conflict, InternalError, InvalidRequest, VmNotCreated
from ch_launcher.ch.vmconfig import PciDeviceInfo, VmInfo
from tests.contract.harness import FAKE, Vmm, launch, real_backend, real_vmm_unavailable, remove_tree, short_dir
from tests.guest.console import GuestConsole

NONE, CREATED, RUNNING, PAUSED = "NONE", "Created", "Running", "Paused"
STATES = (NONE, CREATED, RUNNING, PAUSED)
OK = None


@dataclass(frozen=True)
class Cell:
    call: str
    state: str
    error: type[ChApiError] | None  # None: the call succeeds
    end: str  # the state afterwards
    events: tuple[str, ...] = ()  # in this order, and (simulated VMM) no other vm:* event
    text: str = ""  # a message of the error chain contains this
    already: bool = False  # Conflict.already_in_state()
    not_created: bool = False  # 404 from v53 on, 500 before

    @property
    def id(self) -> str:
        return f"{self.call}-{self.state}"


def _cells() -> list[Cell]:
    c: list[Cell] = [
        Cell("create", s, OK, CREATED)
        if s == NONE
        else Cell("create", s, Conflict, s, text="VM is already created", already=True)
        for s in STATES
    ]
    c += [
        Cell("boot", NONE, VmNotCreated, NONE, ("vm:booting",), "VM config is missing", not_created=True),
        Cell("boot", CREATED, OK, RUNNING, ("vm:booting", "vm:booted")),
        Cell("boot", RUNNING, Conflict, RUNNING, (), "VM is already created"),
        Cell("boot", PAUSED, Conflict, PAUSED, (), "VM is already created"),
        Cell("info", NONE, VmNotCreated, NONE, (), "VM is not created", not_created=True),
        Cell("info", CREATED, OK, CREATED),
        Cell("info", RUNNING, OK, RUNNING),
        Cell("info", PAUSED, OK, PAUSED),
        Cell("pause", NONE, Conflict, NONE, (), "VM is not running"),
        Cell("pause", CREATED, Conflict, CREATED, (), "VM is not running"),
        Cell("pause", RUNNING, OK, PAUSED, ("vm:pausing", "vm:paused")),
        Cell("pause", PAUSED, Conflict, PAUSED, (), "InvalidStateTransition(Paused, Paused)", already=True),
        Cell("resume", NONE, Conflict, NONE, (), "VM is not running"),
        Cell("resume", CREATED, Conflict, CREATED, (), "VM is not running"),
        Cell("resume", RUNNING, Conflict, RUNNING, (), "InvalidStateTransition(Running, Running)", already=True),
        Cell("resume", PAUSED, OK, RUNNING, ("vm:resuming", "vm:resumed")),
        Cell("shutdown", NONE, Conflict, NONE, (), "VM is not running", already=True),
        Cell("shutdown", CREATED, Conflict, CREATED, (), "VM is not running", already=True),
        Cell("shutdown", RUNNING, OK, CREATED, ("vm:shutdown",)),
        Cell("shutdown", PAUSED, OK, CREATED, ("vm:shutdown",)),
        Cell("reboot", NONE, VmNotCreated, NONE, ("vm:rebooting",), "VM is not created", not_created=True),
        Cell("reboot", CREATED, VmNotCreated, CREATED, ("vm:rebooting",), "VM is not created", not_created=True),
        Cell("reboot", RUNNING, OK, RUNNING, ("vm:rebooting", "vm:rebooted")),
        Cell("reboot", PAUSED, OK, RUNNING, ("vm:rebooting", "vm:rebooted")),
        Cell("power_button", NONE, Conflict, NONE, (), "VM is not running", already=True),
        Cell("power_button", CREATED, Conflict, CREATED, (), "VM is not running", already=True),
        Cell("power_button", RUNNING, OK, RUNNING),
        Cell("power_button", PAUSED, OK, PAUSED),
        Cell("counters", NONE, Conflict, NONE, (), "VM is not running"),
        Cell("counters", CREATED, Conflict, CREATED, (), "VM is not running"),
        Cell("counters", RUNNING, OK, RUNNING),
        Cell("counters", PAUSED, OK, PAUSED),
        Cell("delete", NONE, OK, NONE),
        Cell("delete", CREATED, OK, NONE, ("vm:deleted",)),
        Cell("delete", RUNNING, OK, NONE, ("vm:shutdown", "vm:deleted")),
        Cell("delete", PAUSED, OK, NONE, ("vm:shutdown", "vm:deleted")),
        Cell("resize", NONE, VmNotCreated, NONE, (), "VM is not created", not_created=True),
        Cell("resize", CREATED, OK, CREATED),
        Cell("resize", RUNNING, OK, RUNNING, ("vm:resizing", "vm:resized")),
        Cell("add_disk", NONE, VmNotCreated, NONE, (), "VM is not created", not_created=True),
        Cell("add_disk", CREATED, OK, CREATED),
        Cell("add_disk", RUNNING, OK, RUNNING),
        Cell("add_disk", PAUSED, OK, PAUSED),
        Cell("remove_device", NONE, VmNotCreated, NONE, (), "VM is not created", not_created=True),
        Cell("remove_device", CREATED, OK, CREATED),
        # the device leaves the config at once; vm:device-removed waits for the guest's eject
        Cell("remove_device", RUNNING, OK, RUNNING),
        Cell("snapshot", NONE, Conflict, NONE, (), "VM is not running"),
        Cell("snapshot", CREATED, Conflict, CREATED, (), "VM is not running"),
        Cell("snapshot", RUNNING, Conflict, RUNNING, (), "Trying to snapshot while VM is running"),
        Cell("snapshot", PAUSED, OK, PAUSED, ("vm:snapshotting", "vm:snapshotted")),
        Cell("restore", NONE, OK, PAUSED, ("vm:restoring", "vm:restored")),
    ]
    for s in (CREATED, RUNNING, PAUSED):
        c.append(Cell("restore", s, Conflict, s, (), "VM is already created"))
    return c


CELLS = _cells()

# /dev/kvm on PVM (the kvm_pvm module: a VM inside a VM without VT-x) gives no nested state, so a
# real VMM there cannot snapshot (and so has nothing to restore): there the real variant asserts
# the real error. On real KVM the cells above hold.
PVM = os.path.isdir("/sys/module/kvm_pvm")
PVM_CELLS = {
    "snapshot-Paused": Cell("snapshot", PAUSED, InternalError, PAUSED, ("vm:snapshotting",),
                            "Could not get vCPU state GetNestedState"),
    "restore-NONE": Cell("restore", NONE, InternalError, NONE, (), "Error opening VM config snapshot file"),
}


def _real_cell(cell: Cell) -> Cell:
    return PVM_CELLS[cell.id] if PVM and cell.id in PVM_CELLS else cell


FAKE_VERSIONS = ("46.0.0", "52.0.0", "53.0.0", "54.0.0")


class Table:
    """One VMM serving every cell, and the files the calls need."""

    def __init__(self, vmm: Vmm) -> None:
        self.vmm = vmm
        self.c = vmm.client
        d = vmm.dir
        self.disk = os.path.join(d, "data.img")
        self.extra = os.path.join(d, "extra.img")
        for path in (self.disk, self.extra):
            with open(path, "wb") as f:
                f.truncate(1 << 20)
        self.snapshot_dir = os.path.join(d, "snap")
        self.scratch = os.path.join(d, "scratch")

    def config(self) -> dict[str, Any]:
        return self.vmm.config(disks=[{"id": "data", "path": self.disk, "image_type": "Raw"}])

    def reach(self, state: str) -> None:
        self.c.delete()
        if state == NONE:
            return
        self.c.create(self.config())
        if state in (RUNNING, PAUSED):
            self.c.boot()
        if state == PAUSED:
            self.c.pause()

    def state(self) -> str:
        try:
            return self.c.info().state
        except VmNotCreated:
            return NONE

    def ensure_snapshot(self) -> None:
        if not os.path.exists(os.path.join(self.snapshot_dir, "config.json")):
            os.makedirs(self.snapshot_dir, exist_ok=True)
            self.reach(PAUSED)
            self.c.snapshot(f"file://{self.snapshot_dir}")
            self.c.delete()

    def call(self, cell: Cell) -> Any:
        c = self.c
        if cell.call == "create":
            return c.create(self.config())
        if cell.call == "resize":
            return c.resize(desired_vcpus=2)
        if cell.call == "add_disk":
            return c.add_disk({"id": "extra", "path": self.extra, "image_type": "Raw", "readonly": True})
        if cell.call == "remove_device":
            return c.remove_device("data")
        if cell.call == "snapshot":
            os.makedirs(self.scratch, exist_ok=True)
            return c.snapshot(f"file://{self.scratch}")
        if cell.call == "restore":
            os.makedirs(self.snapshot_dir, exist_ok=True)
            return c.restore(f"file://{self.snapshot_dir}")
        return getattr(c, cell.call)()


def _tables() -> list[Any]:
    params = [pytest.param(("fake", v), id=f"fake-v{v.split('.')[0]}") for v in FAKE_VERSIONS]
    params.append(pytest.param(("real", None), id="real", marks=pytest.mark.real_vmm))
    return params


@pytest.fixture(scope="module", params=_tables())
def table(request: pytest.FixtureRequest) -> Iterator[Table]:
    kind, version = request.param
    if kind == "real":
        reason = real_vmm_unavailable()
        if reason:
            pytest.skip(f"real cloud-hypervisor: {reason}")
        backend = real_backend()
    else:
        backend = FAKE
    directory = short_dir()
    # --no-shutdown and a guest that ignores ACPI: the power-button cells must not end the VMM.
    # A vCPU removal pending for a minute: the 429 test cannot outrun it on a busy machine, and
    # the next cell's vm.delete drops it with the VM.
    env = {"FAKE_CH_ACPI_DELAY": "never", "FAKE_CH_VCPU_REMOVAL_DELAY": "60"}
    vmm = launch(backend, directory, version=version, no_shutdown=True, env=env)
    try:
        yield Table(vmm)
    finally:
        vmm.stop()
        remove_tree(directory)


@pytest.mark.parametrize("cell", CELLS, ids=[c.id for c in CELLS])
def test_state_table_cell_behaves_as_the_real_vmm(table: Table, cell: Cell) -> None:
    if table.vmm.backend.real:
        cell = _real_cell(cell)
    if cell.call == "restore" and cell.state == NONE and cell.error is None:
        table.ensure_snapshot()
    table.reach(cell.state)
    table.vmm.events.set_mark()

    if cell.error is None:
        result = table.call(cell)
        if cell.call == "info":
            assert isinstance(result, VmInfo) and result.state == cell.end
        if cell.call == "counters":
            assert result == {} or all(isinstance(v, dict) for v in result.values())
            if not table.vmm.backend.real:
                assert "data" in result and "read_bytes" in result["data"]
        if cell.call == "add_disk":
            if cell.state == CREATED:
                assert result is None  # cold add: 204, no body
            else:
                assert isinstance(result, PciDeviceInfo) and result.id == "extra"
    else:
        with pytest.raises(ChApiError) as info:
            table.call(cell)
        err = info.value
        assert type(err) is cell.error, f"{type(err).__name__}: {err}"
        assert err.mentions(cell.text), err.messages
        major = table.vmm.major
        expected = 404 if cell.not_created and major >= 53 else 500
        assert err.status == expected
        if isinstance(err, Conflict):
            assert err.already_in_state() is cell.already
        assert err.endpoint == "vm." + cell.call.replace("_", "-")

    if cell.events:
        table.vmm.events.wait_for(cell.events[-1])
    seen = [n for n in table.vmm.events.since_mark() if n.startswith("vm:")]
    if table.vmm.backend.real:
        it = iter(seen)
        assert all(e in it for e in cell.events), seen
    else:
        assert seen == list(cell.events)
    assert table.state() == cell.end


def test_cold_added_disk_is_in_the_config_and_gets_its_id_at_boot(table: Table) -> None:
    table.reach(CREATED)
    assert table.c.add_disk({"path": table.extra, "image_type": "Raw", "readonly": True}) is None
    table.c.boot()
    disks = table.c.info().config["disks"]
    assert [d["path"] for d in disks] == [table.disk, table.extra]
    assert disks[0]["id"] == "data"
    assert disks[1]["id"].startswith("_disk")


def test_resize_of_a_created_vm_edits_its_config(table: Table) -> None:
    table.reach(CREATED)
    table.c.resize(desired_vcpus=2)
    assert table.c.info().config["cpus"]["boot_vcpus"] == 2


def test_vm_shutdown_keeps_the_config_so_the_vm_boots_again(table: Table) -> None:
    table.reach(RUNNING)
    table.c.shutdown()
    assert table.state() == CREATED
    table.c.boot()
    assert table.state() == RUNNING


def test_a_resize_while_a_vcpu_removal_is_pending_is_429_and_a_conflict(table: Table) -> None:
    # The removal must stay pending: the simulated VMM's takes a minute (the table's
    # FAKE_CH_VCPU_REMOVAL_DELAY); the tiny guest ejects a removed vCPU as Linux does, at its own
    # pace (on a loaded machine before the calls below were made), unless told to ignore ejects.
    # One console connection throughout (a client reconnecting at once may miss the first bytes).
    with contextlib.ExitStack() as stack:
        table.c.delete()
        table.c.create(table.vmm.guest_config())
        table.c.boot()
        if table.vmm.backend.real:
            console = stack.enter_context(GuestConsole(table.vmm.serial_socket))
            console.hello()
            console.command("ignore-eject")
        _resize_while_a_vcpu_removal_is_pending(table)


def _resize_while_a_vcpu_removal_is_pending(table: Table) -> None:
    table.c.resize(desired_vcpus=2)
    table.c.resize(desired_vcpus=1)  # the guest now removes a vCPU, asynchronously
    assert table.c.info().config["cpus"]["boot_vcpus"] == 1
    # CpuManager::resize compares with the vCPUs present: 2 are, so asking for 2 changes nothing
    table.c.resize(desired_vcpus=2)
    with pytest.raises(Conflict) as info:
        table.c.resize(desired_vcpus=3)  # the pending removal is checked before the maximum
    assert info.value.status == 429
    assert info.value.mentions("Too Many Requests")
    assert not info.value.already_in_state()
    table.c.resize(desired_vcpus=2)  # the count still present: accepted, nothing to do
    assert table.c.info().config["cpus"]["boot_vcpus"] == 2
    with pytest.raises(Conflict) as info:  # the removal is still pending
        table.c.resize(desired_vcpus=1)
    assert info.value.status == 429


def test_resize_disk_exists_from_v50_and_needs_a_booted_vm_and_a_known_disk(table: Table) -> None:
    def resize_disk(disk_id: str) -> None:
        table.c._put("vm.resize-disk", {"id": disk_id, "desired_size": 2 << 20})

    if table.vmm.major < 50:
        with pytest.raises(InvalidRequest, match="Not Found"):
            resize_disk("data")
        return
    table.reach(CREATED)
    with pytest.raises(InternalError) as info:
        resize_disk("data")
    assert info.value.mentions("Failed resizing a disk image")
    table.reach(RUNNING)
    resize_disk("data")
    # An unknown id: 500 on v53 ("Failed to find device ..."), 404 on main: a Conflict (the VM is
    # there, the device is not), not VmNotCreated.
    with pytest.raises(Conflict):
        resize_disk("ghost")
