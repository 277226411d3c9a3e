"""The domain manager driven directly (no gRPC): budgets, background boots, pod facts."""

from __future__ import annotations

import asyncio
import gc
import json
import os
from pathlib import Path

import pytest

from ch_launcher.kubevirt.vmi import parse_vmi
from ch_launcher.lifecycle import Intent, VmState
from ch_launcher.manager import CommandFailed, read_pod_facts
from tests.framework.managers import manager_for
from tests.functional.harness import make_vmi
from tests.polling import until


def test_a_boot_longer_than_the_budget_answers_and_its_failure_comes_with_the_next_sync(layout):
    raw = make_vmi()
    manager, sink = manager_for(layout, raw, boot_timeout=1.5, stop_timeout=0.5,
                             vmm_env={"FAKE_CH_HANG_ENDPOINT": "vm.boot"})
    vmi = parse_vmi(raw)

    async def story():
        await manager.start()
        try:
            assert await manager.wait_until(lambda: manager.vmm_version is not None, 10)
            done = await manager.execute(Intent.SYNC, vmi, budget=0.5)
            assert done == "still starting the VM in the background"
            with pytest.raises(CommandFailed, match="busy with SyncVMI"):
                await manager.execute(Intent.PAUSE, vmi, budget=0.2)
            # The next Sync waits for the boot; its failure, kept before the lock is released, is the answer.
            with pytest.raises(CommandFailed, match="booting the VM failed"):
                await manager.execute(Intent.SYNC, vmi, budget=5)
            assert manager.domain_json == "" and sink.domains == []
            assert [e["reason"] for e in sink.k8s] == ["BootFailed"]
        finally:
            await manager.close()

    asyncio.run(story())


def _requests(layout, endpoint):
    log = layout.root / "requests.jsonl"
    lines = log.read_text().splitlines() if log.exists() else []
    return [json.loads(line) for line in lines if json.loads(line)["path"].endswith("/" + endpoint)]


def test_a_sync_whose_caller_hung_up_keeps_its_failure_for_the_next_sync(layout):
    # virt-handler hanging up mid-call cancels the RPC's handler: the boot goes on, and its
    # failure comes with the next Sync, as for a boot that outlived its budget (not a second boot).
    raw = make_vmi()
    manager, sink = manager_for(layout, raw, boot_timeout=1.5, stop_timeout=0.5, vmm_env={
        "FAKE_CH_HANG_ENDPOINT": "vm.boot", "FAKE_CH_REQUEST_LOG": str(layout.root / "requests.jsonl")})
    vmi = parse_vmi(raw)

    async def story():
        await manager.start()
        try:
            rpc = asyncio.ensure_future(manager.execute(Intent.SYNC, vmi, budget=15))
            await until(lambda: _requests(layout, "vm.boot"), 10, 0.02)  # the simulated VMM's own record
            rpc.cancel()
            with pytest.raises(asyncio.CancelledError):
                await rpc
            with pytest.raises(CommandFailed, match="booting the VM failed"):
                await manager.execute(Intent.SYNC, vmi, budget=10)
            assert len(_requests(layout, "vm.boot")) == 1
            assert [e["reason"] for e in sink.k8s] == ["BootFailed"] and manager.domain_json == ""
        finally:
            await manager.close()

    asyncio.run(story())


def test_commands_wait_for_each_other_and_never_interleave(layout):
    raw = make_vmi()
    manager, sink = manager_for(layout, raw)
    vmi = parse_vmi(raw)

    async def story():
        await manager.start()
        try:
            await manager.execute(Intent.SYNC, vmi, budget=15)
            results = await asyncio.gather(
                manager.execute(Intent.PAUSE, vmi), manager.execute(Intent.SYNC, vmi),
                manager.execute(Intent.UNPAUSE, vmi), manager.execute(Intent.PAUSE, vmi))
            assert len(results) == 4
            assert manager.state is VmState.PAUSED
            statuses = [(d["Status"]["Status"], d["Status"]["Reason"], kind) for d, kind in sink.domains]
            assert statuses == [("Running", "Unknown", "ADDED"), ("Paused", "User", "MODIFIED"),
                                ("Running", "Unknown", "MODIFIED"), ("Paused", "User", "MODIFIED")]
        finally:
            await manager.close()

    asyncio.run(story())


def test_close_leaves_no_vmm_behind(layout):
    raw = make_vmi()
    manager, _ = manager_for(layout, raw)

    async def story():
        await manager.start()
        await manager.execute(Intent.SYNC, parse_vmi(raw), budget=15)
        pid = manager.vmm_pid
        await manager.close()
        return pid

    pid = asyncio.run(story())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_vmi_without_identity_takes_the_launchers_flags(layout):
    raw = make_vmi()
    raw["metadata"] = {"name": "", "namespace": ""}
    manager, _sink = manager_for(layout, make_vmi(), name="fromflags", namespace="ns1", uid="uid-1")

    async def story():
        await manager.start()
        try:
            await manager.execute(Intent.SYNC, parse_vmi(raw), budget=15)
            domain = json.loads(manager.domain_json)
            assert domain["ObjectMeta"]["name"] == "fromflags" and domain["ObjectMeta"]["uid"] == "uid-1"
        finally:
            await manager.close()

    asyncio.run(story())


def test_pod_facts_come_from_the_cgroup_cpuset_and_link_mtus(tmp_path):
    (tmp_path / "fs" / "cgroup").mkdir(parents=True)
    (tmp_path / "fs" / "cgroup" / "cpuset.cpus.effective").write_text("2-3\n")
    for link, mtu in (("eth0", "1450"), ("tap0", "1450"), ("lo", "65536")):
        (tmp_path / "class" / "net" / link).mkdir(parents=True)
        (tmp_path / "class" / "net" / link / "mtu").write_text(mtu + "\n")
    facts = read_pod_facts({"POD_NAME": "virt-launcher-x"}, sys_root=str(tmp_path))
    assert facts.cpuset == (2, 3)
    assert facts.link_mtu == {"eth0": 1450, "tap0": 1450, "lo": 65536}
    assert facts.environ == {"POD_NAME": "virt-launcher-x"}


def test_pod_facts_fall_back_to_the_process_affinity(tmp_path):
    facts = read_pod_facts({}, sys_root=str(tmp_path))
    assert facts.cpuset == tuple(sorted(os.sched_getaffinity(0)))
    assert facts.link_mtu == {}


@pytest.mark.parametrize("per_vmi,cluster_disabled,logged", [
    (None, False, True), (None, True, False), (True, True, True), (False, False, False)])
def test_the_serial_log_follows_the_vmi_then_the_cluster_setting(per_vmi, cluster_disabled, logged):
    from ch_launcher.convert import LauncherOptions
    from ch_launcher.manager.guest import serial_log_enabled

    raw = make_vmi()
    if per_vmi is not None:
        raw["spec"]["domain"]["devices"]["logSerialConsole"] = per_vmi
    options = LauncherOptions(serial_console_log_disabled=cluster_disabled)
    assert serial_log_enabled(parse_vmi(raw), options) is logged


def test_releasing_memory_advises_every_file_mapping_and_nothing_else(tmp_path):
    from ch_launcher.manager.pod import release_memory

    maps = tmp_path / "maps"
    own = Path("/proc/self/maps").read_text().splitlines()
    files = [line for line in own if line.split(maxsplit=5)[5:] and line.split(maxsplit=5)[5].startswith("/")
             and not line.split(maxsplit=5)[5].startswith("/dev/")]
    anonymous = [line for line in own if len(line.split()) < 6 or line.split()[5].startswith("[")]
    maps.write_text("\n".join(files + anonymous) + "\n")
    try:
        assert release_memory(str(maps)) == len(files)  # anonymous memory and [heap]/[stack] are left alone
        assert gc.get_freeze_count() > 0  # what is left is out of the collector's way
    finally:
        gc.unfreeze()


def test_releasing_memory_never_fails(tmp_path):
    from ch_launcher.manager.pod import release_memory

    try:
        assert release_memory(str(tmp_path / "absent")) == 0
    finally:
        gc.unfreeze()


def test_memory_is_released_only_once_virt_handler_has_heard_of_the_boot(layout, monkeypatch):
    # release_memory() holds the event loop for ~100 ms and pages out what sending needs: right
    # after the boot it delayed the first Domain event (and the Sync's answer) by as much.
    import ch_launcher.manager.boot as steps  # where the boot step calls it

    happened: list[str] = []
    monkeypatch.setattr(steps, "release_memory", lambda: happened.append("memory released"))
    raw = make_vmi()
    manager, sink = manager_for(layout, raw)
    send_domain = sink.send_domain

    def recording_send_domain(domain_json, event_type="MODIFIED"):
        happened.append(f"{event_type} {json.loads(domain_json)['Status']['Status']}")
        send_domain(domain_json, event_type)

    sink.send_domain = recording_send_domain

    async def story():
        await manager.start()
        try:
            await manager.execute(Intent.SYNC, parse_vmi(raw), budget=15)
            await until(lambda: "memory released" in happened, 10)
            assert happened == ["ADDED Running", "memory released"]
        finally:
            await manager.close()

    asyncio.run(story())


def test_a_vmm_that_does_not_answer_vm_create_is_replaced_by_the_next_sync(layout):
    # As after a vm.boot without an answer: the stalled VMM is stopped, so the next Sync asks a
    # fresh one (it asked the same stalled VMM again, for ever).
    raw = make_vmi()
    manager, sink = manager_for(layout, raw, api_timeout=0.5, stop_timeout=0.5,
                             vmm_env={"FAKE_CH_HANG_ENDPOINT": "vm.create"})
    vmi = parse_vmi(raw)

    async def story():
        pids: list[int] = []

        def note_vmm() -> bool:  # every VMM that answered, as the manager announces each
            if manager.vmm_pid is not None and manager.vmm_pid not in pids:
                pids.append(manager.vmm_pid)
            return False

        watcher = asyncio.ensure_future(manager.wait_until(note_vmm))
        await manager.start()
        try:
            assert await manager.wait_until(lambda: manager.vmm_pid is not None, 10)
            first = manager.vmm_pid
            with pytest.raises(CommandFailed, match=r"cloud-hypervisor did not take the VM configuration: "
                                                    r"vm\.create failed: no answer from the VMM within 0\.5 s"):
                await manager.execute(Intent.SYNC, vmi, budget=15)
            assert manager.vmm_pid is None and manager.state is VmState.UNDEFINED
            with pytest.raises(CommandFailed, match="did not take the VM configuration"):
                await manager.execute(Intent.SYNC, vmi, budget=15)  # this VMM hangs too, but it is another
            assert pids[0] == first and len(pids) == 2
            assert sink.domains == []
        finally:
            watcher.cancel()
            await manager.close()

    asyncio.run(story())
