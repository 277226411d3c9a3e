"""One rule for who changes the VM: the work the manager does in the background (a device leaving,
a migration's end, a soft reboot, a panic's destroy) goes through the manager's lock like every
command, and a closed manager leaves nothing behind on the event loop.

Each story starts what would otherwise race and watches who holds the lock when the VM or its
record changes (`Runner.busy_with`: "" when nobody does), on the simulated VMM in this process.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from ch_launcher.convert.plan import DhcpSpec
from ch_launcher.kubevirt.domain_view import DomainInterface
from ch_launcher.kubevirt.vmi import parse_vmi
from ch_launcher.lifecycle import Intent, VmState
from ch_launcher.manager import DomainManager, features
from ch_launcher.manager.guest import GuestServices
from ch_launcher.manager.record import DomainRecord
from ch_launcher.manager.vmm import VmmSession
from tests.builders import with_devices
from tests.framework.launcher import LauncherLayout
from tests.framework.managers import RecordingSink, manager_for, manager_pair
from tests.functional.harness import make_vmi
from tests.functional.migration_handler import DEFAULT_OPTIONS, migratable_vmi, migrating
from tests.polling import until

NIC = "net1"


def nic_leaves(manager: DomainManager) -> None:
    """The VMM tells the launcher that the guest ejected NIC `net1` (as CH writes
    `vm:device-removed` to its event monitor); the plan had a DHCP server for it."""
    plan = manager._record.plan
    assert plan is not None
    plan.interfaces.append(DomainInterface(alias=NIC, mac="02:00:00:00:00:01", tap="tap1"))
    plan.dhcp.append(DhcpSpec(field="spec.domain.devices.interfaces[1]", interface=NIC, binding="bridge",
                              pod_interface="net1", bridge="k6t-net1", mac="02:00:00:00:00:01",
                              server_ip="169.254.75.11"))
    event = {"timestamp": {"secs": 1, "nanos": 0}, "source": "vm", "event": "device-removed",
             "properties": {"id": NIC}}
    fd = os.open(manager.settings.vmm_paths[1], os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.write(fd, json.dumps(event, indent=2).encode() + b"\n\n")
    finally:
        os.close(fd)


def nic_gone(manager: DomainManager) -> bool:
    plan = manager._record.plan
    return plan is not None and all(i.alias != NIC for i in plan.interfaces)


def watch_dhcp_restarts(monkeypatch: pytest.MonkeyPatch, manager: DomainManager) -> list[tuple[str, int]]:
    """Every DHCP restart of `manager`, as (who held the lock, how many restarts ran at once)."""
    seen: list[tuple[str, int]] = []
    running = 0
    restart = GuestServices.restart_dhcp

    async def watched(self: GuestServices, *args: Any, **kwargs: Any) -> None:
        nonlocal running
        running += 1
        seen.append((manager._runner.busy_with, running))
        try:
            await asyncio.sleep(0.05)  # a server's stop and start take their time (two threads)
            await restart(self, *args, **kwargs)
        finally:
            running -= 1

    monkeypatch.setattr(GuestServices, "restart_dhcp", watched)
    return seen


def test_a_nic_the_guest_ejects_restarts_dhcp_under_the_lock_never_beside_a_syncs_restart(
        layout: LauncherLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    # A Sync that hot-plugs a NIC restarts the DHCP server under the lock; the guest ejecting
    # another NIC meanwhile restarts it too. Two restarts at once each stop what they find and
    # start a server: one of the two is dropped, still serving, never stopped.
    raw = make_vmi()
    manager, _ = manager_for(layout, raw)
    restarts = watch_dhcp_restarts(monkeypatch, manager)

    async def story() -> None:
        await manager.start()
        try:
            await manager.execute(Intent.SYNC, parse_vmi(raw), budget=15)
            released = asyncio.Event()

            async def syncs_hotplug() -> None:
                plan, vmi = manager._record.plan, manager._record.vmi
                assert plan is not None
                await manager._guest.restart_dhcp(plan, vmi)
                await released.wait()

            sync = asyncio.ensure_future(manager._runner.locked("SyncVMI", syncs_hotplug))
            await until(lambda: restarts, 5)
            nic_leaves(manager)
            await manager.wait_until(lambda: nic_gone(manager), 5)
            await asyncio.sleep(0.2)  # the ejected NIC's restart, if it ran beside the Sync's, has begun
            released.set()
            await sync
            await until(lambda: len(restarts) == 2, 5)
            assert [running for _, running in restarts] == [1, 1], "two DHCP restarts ran at once"
            assert all(holder for holder, _ in restarts), f"a DHCP restart ran without the lock: {restarts}"
        finally:
            await manager.close()

    asyncio.run(story())


def test_a_vm_deleted_while_a_nic_leaves_gets_no_dhcp_server_after_it_is_gone(
        layout: LauncherLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    # The guest ejects a NIC (its DHCP server is restarted without it) and virt-handler deletes
    # the VM at the same time: a restart still starting its server when the VM is forgotten
    # would serve DHCP for a VM that no longer exists, on a socket nobody closes.
    raw = make_vmi()
    manager, _ = manager_for(layout, raw)
    forgotten, booted = threading.Event(), threading.Event()
    started_after_forget: list[bool] = []
    start_dhcp = features.dhcp.start_dhcp
    forget = DomainRecord.forget

    def spied_forget(self: DomainRecord) -> None:
        forget(self)
        forgotten.set()

    def slow_start(plan: Any, env: Any, **kwargs: Any) -> Any:
        if not booted.is_set():
            return start_dhcp(plan, env, **kwargs)  # the boot's server (none: the VM has no NIC)
        forgotten.wait(2)  # a restart's server (in a worker thread) is still starting when the VM is forgotten
        started_after_forget.append(forgotten.is_set())
        plan.dhcp = []  # the spec names a bridge this host does not have: start nothing, but start
        return start_dhcp(plan, env, **kwargs)

    monkeypatch.setattr(DomainRecord, "forget", spied_forget)
    monkeypatch.setattr(features.dhcp, "start_dhcp", slow_start)

    async def story() -> None:
        await manager.start()
        try:
            await manager.execute(Intent.SYNC, parse_vmi(raw), budget=15)
            booted.set()
            nic_leaves(manager)
            await manager.wait_until(lambda: nic_gone(manager), 5)
            await manager.execute(Intent.DELETE, parse_vmi(raw), budget=15)
            forgotten.set()  # (with the fix no restart waits for it)
            assert await manager._runner.idle(10), "what the manager started by itself has ended"
            assert started_after_forget in ([], [False]), "a DHCP server was started for a VM that is gone"
        finally:
            forgotten.set()
            await manager.close()

    asyncio.run(story())


def _watch_lock_at(monkeypatch: pytest.MonkeyPatch, owner: type, name: str,
                   managers: Callable[[], list[DomainManager]]) -> list[str]:
    """Who held the lock (of the manager whose object it is) at each call of `owner.name`."""
    holders: list[str] = []
    original = getattr(owner, name)

    def holder_of(obj: object) -> str:
        for manager in managers():
            if obj is manager._record or (isinstance(obj, VmmSession) and obj in manager._host._spawned):
                return manager._runner.busy_with or "(nobody)"
        return "(another manager)"

    if asyncio.iscoroutinefunction(original):
        async def awatched(self: Any, *args: Any, **kwargs: Any) -> Any:
            holders.append(holder_of(self))
            return await original(self, *args, **kwargs)
        monkeypatch.setattr(owner, name, awatched)
    else:
        def watched(self: Any, *args: Any, **kwargs: Any) -> Any:
            holders.append(holder_of(self))
            return original(self, *args, **kwargs)
        monkeypatch.setattr(owner, name, watched)
    return holders


def _migration(layouts: tuple[LauncherLayout, LauncherLayout], source_env: dict[str, str] | None = None
               ) -> tuple[DomainManager, DomainManager, RecordingSink, dict[str, Any], dict[str, Any]]:
    """A migratable VMI without a serial console (both VMMs share one filesystem here, where the
    target's would have to bind the console socket the source's still holds) and its managers."""
    raw = migratable_vmi(with_devices(autoattachSerialConsole=False))
    source, target, _, target_sink = manager_pair(layouts, raw, source_env=source_env)
    return source, target, target_sink, raw, migrating(raw, str(uuid.uuid4()))


async def _migrate(source: DomainManager, target: DomainManager, raw: dict[str, Any], vmi: dict[str, Any],
                   options: dict[str, Any] | None = None) -> None:
    await source.execute(Intent.SYNC, parse_vmi(raw), budget=15)
    assert await target.prepare_migration_target(parse_vmi(vmi), None) == "prepared: waiting for the source"
    assert await source.migrate(parse_vmi(vmi), json.dumps({**DEFAULT_OPTIONS, **(options or {})}).encode()) \
        == "migration started"


def _both(source: DomainManager, target: DomainManager, story: Callable[[], Awaitable[None]]) -> None:
    async def run() -> None:
        await source.start()
        await target.start()
        try:
            await story()
        finally:
            await target.close()
            await source.close()

    asyncio.run(run())


def test_an_incoming_migration_that_fails_withdraws_the_domain_under_the_lock(
        layouts: tuple[LauncherLayout, LauncherLayout], monkeypatch: pytest.MonkeyPatch) -> None:
    # The source goes away in the middle of the stream: the target kills its VMM and withdraws the
    # domain it had announced, which is a change of the VM and of its record like a Delete's.
    source, target, target_sink, raw, vmi = _migration(layouts)
    forgets = _watch_lock_at(monkeypatch, DomainRecord, "forget", lambda: [source, target])

    async def story() -> None:
        await _migrate(source, target, raw, vmi, {"Bandwidth": "8Mi"})
        assert await target.wait_until(lambda: target.state is VmState.PAUSED, 20)
        source_vmm = source.vmm_pid
        assert source_vmm is not None
        os.kill(source_vmm, 9)
        assert await target.wait_until(target.forgotten.is_set, 20)
        assert forgets == ["migration-target"], f"the domain was withdrawn by {forgets}"
        assert target_sink.domains[-1][0]["ObjectMeta"]["deletionTimestamp"], "the announced domain is withdrawn"

    _both(source, target, story)


def test_a_source_that_missed_the_targets_ok_to_complete_stops_its_vmm_under_the_lock(
        layouts: tuple[LauncherLayout, LauncherLayout], monkeypatch: pytest.MonkeyPatch) -> None:
    # The target acknowledged Complete and runs the VM; the source VMM did not read that answer,
    # reports the migration failed and resumes its copy. The launcher stops it so that the VM
    # never runs twice: a stop of the VMM like a Kill's.
    source, target, _, raw, vmi = _migration(layouts, {"FAKE_CH_MIGRATION_FAIL": "complete"})
    stops = _watch_lock_at(monkeypatch, VmmSession, "terminate", lambda: [source, target])

    async def story() -> None:
        await _migrate(source, target, raw, vmi)
        assert await target.wait_until(lambda: target.state is VmState.RUNNING, 20)
        assert await source.wait_until(lambda: source.state is VmState.DOWN and source.vmm_pid is None, 20)
        assert stops == ["migration-source"], f"the source's VMM was stopped by {stops}"

    _both(source, target, story)


def leftovers(loop: asyncio.AbstractEventLoop) -> list[str]:
    """The launcher's timers still armed and its tasks still pending on `loop`."""
    timers = [repr(h) for h in getattr(loop, "_scheduled", []) if not h.cancelled()
              and getattr(getattr(h, "_callback", None), "__module__", "").startswith("ch_launcher")]
    tasks = [repr(t) for t in asyncio.all_tasks(loop) if t is not asyncio.current_task() and not t.done()]
    return timers + tasks


def test_a_closed_manager_leaves_no_timer_nor_task_behind_after_a_migration(
        layouts: tuple[LauncherLayout, LauncherLayout], monkeypatch: pytest.MonkeyPatch) -> None:
    # The source arms a timer when the stream completes (the VMM's migration-finished should
    # follow it); a manager closed right after must not have it fire later, on a closed manager.
    source, target, _, raw, vmi = _migration(layouts)

    async def story() -> None:
        await _migrate(source, target, raw, vmi)
        assert await source.wait_until(lambda: source.state is VmState.DOWN, 20)
        assert await target.wait_until(lambda: target.state is VmState.RUNNING, 20)
        await source.close()
        await target.close()
        for _ in range(3):
            await asyncio.sleep(0)  # cancelled tasks end at their next step
        assert leftovers(asyncio.get_running_loop()) == []

    _both(source, target, story)

