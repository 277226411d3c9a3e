"""The launcher's check of its own process tree (manager/procmodel.py): each way the tree can
differ from what virt-handler's lookups need gives its own reason."""

from __future__ import annotations

import os

import pytest

from ch_launcher.ch import procinfo
from ch_launcher.ch.process import VmmSpawning
from ch_launcher.manager import procmodel

MONITOR, SPAWNER, VMM = 1000, 1002, 1003


class _Spawner:
    pid = SPAWNER


def spawning(subreaper: bool = True) -> VmmSpawning:
    return VmmSpawning(spawner=_Spawner(), exits=None, monitor_pid=MONITOR, subreaper=subreaper)  # type: ignore[arg-type]


@pytest.fixture
def tree(monkeypatch):
    """A process table: pid -> (comm, parent); this process is the launcher."""
    monkeypatch.setattr(os, "getppid", lambda: MONITOR)
    table = {os.getpid(): ("ch-launcher", MONITOR), MONITOR: ("ch-launcher", 1),
             SPAWNER: ("virtqemud", os.getpid()), VMM: ("qemu-system-clo", MONITOR)}
    monkeypatch.setattr(procinfo, "comm", lambda pid: table.get(pid, (None, None))[0])
    monkeypatch.setattr(procinfo, "parent", lambda pid: table.get(pid, (None, None))[1])
    return table


def test_the_model_virt_handler_expects_has_no_problem(tree):
    assert procmodel.model_problem(spawning(), VMM) is None


@pytest.mark.parametrize("change, says", [
    ({VMM: ("qemu-system-clo", 4242)}, "is a child of pid 4242, not of the launcher's parent"),
    ({VMM: ("cloud-hyperviso", MONITOR)}, "is named 'cloud-hyperviso', not qemu-system*"),
    ({SPAWNER: ("python3", None)}, "is named 'python3'"),
])
def test_each_difference_is_named(tree, change, says):
    for pid, entry in change.items():
        tree[pid] = entry
    assert says in procmodel.model_problem(spawning(), VMM)


def test_a_launcher_whose_parent_is_not_the_monitor_is_named(tree, monkeypatch):
    monkeypatch.setattr(os, "getppid", lambda: 77)
    assert "the launcher's parent is pid 77, not the monitor" in procmodel.model_problem(spawning(), VMM)


def test_no_monitor_and_no_subreaper_are_named(tree):
    assert "without its VMM spawner" in procmodel.model_problem(None, VMM)
    assert "could not become a child subreaper" in procmodel.model_problem(spawning(subreaper=False), VMM)


def test_a_vmm_that_cannot_lock_the_guest_memory_is_named_with_both_figures(monkeypatch):
    monkeypatch.setattr(procinfo, "has_capability", lambda pid, cap: False)
    monkeypatch.setattr(procinfo, "memlock", lambda pid: 8 << 20)
    problem = procmodel.lock_problem(VMM, 1 << 30)
    assert "may lock 8388608 bytes, but this VM needs 1073741824 bytes" in problem
    monkeypatch.setattr(procinfo, "memlock", lambda pid: -1)
    assert procmodel.lock_problem(VMM, 1 << 30) is None
    monkeypatch.setattr(procinfo, "memlock", lambda pid: 0)
    monkeypatch.setattr(procinfo, "has_capability", lambda pid, cap: cap == procinfo.CAP_IPC_LOCK)
    assert procmodel.lock_problem(VMM, 1 << 30) is None  # CAP_IPC_LOCK needs no limit
