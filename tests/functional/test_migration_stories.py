"""Live migration stories between two ch-launchers, each in its own pod, through a stand-in of
virt-handler's migration proxies, on the simulated VMM and on the real one (the tiny guest).

On this project's PVM machines the real VMM cannot complete a switch-over (docs/migration.md §2):
its story then asserts what the real failure does to both pods; the simulation tells both
endings apart with `FAKE_CH_MIGRATION_FAIL`.

virt-handler's source controller and virt-controller are played with their own rules
(`migration_controllers.py`): a migration that fails must end `Failed` in the VMI's
`status.migrationState` and in the migration object, with the launcher's reason, after exactly
one MigrateVirtualMachine call, as KubeVirt would see it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from tests.builders import with_masquerade
from tests.contract.migration_support import host_snapshots_vcpus
from tests.functional.harness import RealVmm
from tests.functional.migration_controllers import domain_status
from tests.functional.migration_handler import MigrationPair, migratable_vmi, migration_of
from tests.functional.pod_fixtures import real_vmm_reason, vmm_info
from tests.functional.pod_probes import udhcpc
from tests.functional.pod_sandbox import missing_requirements
from tests.guest.console import GuestConsole
from tests.polling import until

pytestmark = pytest.mark.root


@pytest.fixture(params=["simulated", "real"])
def kind(request):
    reason = missing_requirements()
    if reason:
        pytest.skip(reason)
    if request.param == "real":
        reason = real_vmm_reason()
        if reason:
            pytest.skip(reason)
    return request.param


def make_pair(kind: str, vmi=None, **kwargs) -> MigrationPair:
    real = None
    if kind == "real":  # the tiny guest as the pods' hypervisor-fw
        found = RealVmm.from_environment(tiny_guest=True)
        assert not isinstance(found, str), found
        real = found
    return MigrationPair(vmi or migratable_vmi(), real=real, **kwargs)


@pytest.fixture
def pair_factory(kind):
    made: list[MigrationPair] = []

    def make(**kwargs) -> MigrationPair:
        pair = make_pair(kind, **kwargs)
        made.append(pair)
        return pair

    yield make
    for pair in made:
        pair.close()


def completes(kind: str) -> bool:
    return kind == "simulated" or host_snapshots_vcpus()


def assert_failed_once_as_kubevirt_sees_it(pair: MigrationPair, state: dict, reason: str) -> None:
    """What KubeVirt records of a failed migration: the VMI's migrationState failed and ended with
    the launcher's reason, the migration object Failed, one Migrate call, virt-handler's own
    `Migrated` warning once (the launcher sends none)."""
    assert state["failed"] and state["completed"] and state["endTimestamp"] and state["startTimestamp"], state
    assert reason in state["failureReason"], state
    assert pair.vmim.phase == "Failed", pair.vmim
    handler = pair.handler
    assert handler is not None
    assert len(handler.migrate_calls()) == 1, handler.calls
    warnings = [e for e in handler.events if e.reason == "Migrated"]
    assert [e.message for e in warnings] == [(f"VirtualMachineInstance migration uid {pair.migration_uid} failed. "
                                              f"reason:{state['failureReason']}")], handler.events
    assert not [e for e in pair.source.recorder.k8s_events if e.get("reason") == "Migrated"], \
        "virt-handler sends the Migrated warning; a second one from the launcher would be a duplicate"


def test_a_running_vm_moves_to_the_target_pod(kind, pair_factory):
    """The whole story as virt-handler plays it: the target prepares and publishes its ports,
    the source sends through the proxies; the source reports Paused/Migration then
    Shutoff/Migrated with EndTimestamp; the target's domain appears Paused/Migration, runs, gets
    EndTimestamp, is finalized; the source is deleted and its launcher exits; the VM goes on."""
    pair = pair_factory()
    src, tgt = pair.source, pair.target

    async def story():
        await src.boot()
        ports = await pair.prepare_target()
        assert sorted(ports.values()) == [0, 49152]
        reply = await pair.migrate(ports)
        assert reply.success, reply.message
        started = await src.recorder.wait_for(lambda e: (migration_of(e) or {}).get("StartTimestamp"), timeout=10)
        assert migration_of(started)["UID"] == pair.migration_uid and migration_of(started)["Mode"] == "PreCopy"
        assert started.status == "Running"
        if not completes(kind):
            state = await pair.play_source(timeout=60)
            assert_failed_once_as_kubevirt_sees_it(pair, state, "GetNestedState")
            failed = await src.recorder.wait_for(lambda e: (migration_of(e) or {}).get("Failed"))
            assert failed.status == "Running", "the source resumed its VM"
            # No Paused/Migration is required here: the failed switch-over pauses the guest for
            # 2-8 ms, and the real VMM can write its pause, the failure and the resume so close
            # together (from its own event thread, sometimes after vm.info shows Running again)
            # that the launcher only ever sees Running; virt-handler needs only the outcome.
            assert all(e.status != "Shutoff" for e in src.recorder.events)
            assert (await src.client.get_domain())["Status"]["Status"] == "Running"
            def guest_answers() -> None:  # the resumed guest runs on, on its console in the source pod
                with GuestConsole(str(src.layout.console_socket(pair.uid))) as guest:
                    guest.hello()

            await asyncio.to_thread(guest_answers)
            # The proxies never close the target's leg (upstream's handleConnection): the target
            # pod waits until virt-handler's finalCleanup signals it.
            first = tgt.recorder.events[0]
            assert first.event_type == "ADDED" and (first.status, first.reason) == ("Paused", "Migration")
            await pair.target_command("SignalTargetPodCleanup")
            assert (await tgt.launcher.wait_exit(30)) == 2, tgt.log_text()
            assert not tgt.launcher.children(), "the target's VMM went with its launcher"
            return
        state = await pair.play_source(lambda: domain_status(pair.source_domain()) == ("Shutoff", "Migrated"),
                                       timeout=60)
        assert state["startTimestamp"] and not state.get("failed"), state
        assert pair.vmim.phase == "Running", "the migration object runs once the VMI has its start"
        assert len(pair.handler.migrate_calls()) == 1, pair.handler.calls
        moved = await src.recorder.wait_for_status("Shutoff", "Migrated")
        assert migration_of(moved)["EndTimestamp"] and not migration_of(moved)["Failed"]
        assert any(e.status == "Paused" and e.reason == "Migration" for e in src.recorder.events), \
            [str(e) for e in src.recorder.events]
        first = tgt.recorder.events[0]
        assert first.event_type == "ADDED" and (first.status, first.reason) == ("Paused", "Migration")
        running = await tgt.recorder.wait_for(lambda e: e.status == "Running" and (migration_of(e) or {}).get(
            "EndTimestamp"), timeout=30)
        assert migration_of(running)["UID"] == pair.migration_uid
        for _ in range(2):  # finalizeMigration, then finalCleanup
            await pair.target_command("FinalizeVirtualMachineMigration")
        await pair.source_command("DeleteVirtualMachine")
        await src.recorder.wait_for_deleted(timeout=20)
        assert (await src.launcher.wait_exit(30)) == 0, src.log_text()
        domain = await tgt.client.get_domain()
        assert domain["Status"]["Status"] == "Running"
        await tgt.client.sync(pair.migrating_vmi())  # now a reconcile of a running VM
        assert (await tgt.client.get_domain())["Status"]["Status"] == "Running"
        assert tgt.launcher.poll() is None
        # virtctl console reaches the guest in its new pod (the simulated guest echoes).
        reader, writer = await asyncio.open_unix_connection(str(tgt.layout.console_socket(pair.uid)))
        writer.write(b"still-here")
        seen = b""
        async with asyncio.timeout(10):
            while b"still-here" not in seen:
                seen += await reader.read(4096)
        writer.close()

    src.run(story())


SLOW = {"Bandwidth": "8Mi"}  # 64 MiB then take ~8 s: time to act in the middle of the stream


async def wait_for_progress(pair: MigrationPair, at_least: int, timeout: float = 30.0) -> dict:
    """GetDomainStats' MigrateDomainJobInfo once `DataProcessed` reaches `at_least` bytes."""
    deadline = time.monotonic() + timeout
    while True:
        stats = await pair.source.client.get_domain_stats()
        job = (stats or {}).get("MigrateDomainJobInfo") or {}
        if job.get("DataProcessed", 0) >= at_least:
            return job
        assert time.monotonic() < deadline, f"the migration did not progress: {job}"
        await asyncio.sleep(0.1)


def test_cancel_aborts_the_stream_and_the_vm_keeps_running_on_the_source(kind, pair_factory):
    pair = pair_factory()
    src, tgt = pair.source, pair.target

    async def story():
        await src.boot()
        stats = await src.client.get_domain_stats()
        assert stats["MigrateDomainJobInfo"]["DataProcessedSet"] is False, "zeros, never null, without a migration"
        ports = await pair.prepare_target()
        assert (await pair.migrate(ports, SLOW)).success
        job = await wait_for_progress(pair, 4 << 20)
        assert job["DataTotalSet"] and job["DataTotal"] == 64 << 20 and job["DataRemainingSet"]
        await pair.play_source(lambda: pair.vmim.phase == "Running")
        # virtctl migrate-cancel: virt-controller asks the VMI for the abort; virt-handler cancels once.
        assert pair.cancel_migration()
        since = len(src.recorder.events)
        state = await pair.play_source(timeout=30)
        assert state["abortStatus"] == "Succeeded" and state["failureReason"] == "Live migration has been aborted"
        assert state["failed"] and state["endTimestamp"] and pair.vmim.phase == "Failed"
        assert [rpc for rpc, _ in pair.handler.calls] == ["MigrateVirtualMachine", "CancelVirtualMachineMigration"]
        aborted = await src.recorder.wait_for(lambda e: (migration_of(e) or {}).get("Failed"), since=since)
        assert aborted.status == "Running"
        await pair.source_command("CancelVirtualMachineMigration")  # again: nothing to do, success
        assert (await src.client.get_domain())["Status"]["Status"] == "Running"
        vmm = tgt.vmm_pid()
        await pair.target_command("SignalTargetPodCleanup")
        assert (await tgt.launcher.wait_exit(30)) == 2, tgt.log_text()
        assert not os.path.exists(f"/proc/{vmm}"), "the receiving VMM went with its launcher"
        # The same migration cannot run twice (initializeMigrationMetadata).
        reply = await pair.call_migrate()
        assert not reply.success and f"migration job {pair.migration_uid} already executed" in reply.message
        assert reply.message.endswith("failed: true, abortStatus: Succeeded"), reply.message

    pair.run(story())


def test_a_target_vmm_that_dies_fails_the_migration_and_the_source_keeps_its_vm(kind, pair_factory):
    pair = pair_factory()
    src, tgt = pair.source, pair.target

    async def story():
        await src.boot()
        ports = await pair.prepare_target()
        assert (await pair.migrate(ports, SLOW)).success
        await wait_for_progress(pair, 4 << 20)
        os.kill(tgt.vmm_pid(), signal.SIGKILL)
        state = await pair.play_source(timeout=30)
        assert_failed_once_as_kubevirt_sees_it(pair, state, "Broken pipe")
        failed = await src.recorder.wait_for(lambda e: (migration_of(e) or {}).get("Failed"))
        assert failed.status == "Running"
        gone = await tgt.recorder.wait_for_deleted(timeout=30)
        assert gone.event_type == "MODIFIED", "the target's announced domain is withdrawn"
        assert (await tgt.launcher.wait_exit(30)) == 0, tgt.log_text()
        assert (await src.client.get_domain())["Status"]["Status"] == "Running"

    pair.run(story())


def test_a_source_vmm_that_dies_mid_way_is_a_crash_and_the_target_is_cleaned_up(kind, pair_factory):
    pair = pair_factory()
    src, tgt = pair.source, pair.target

    async def story():
        await src.boot()
        ports = await pair.prepare_target()
        assert (await pair.migrate(ports, SLOW)).success
        await wait_for_progress(pair, 4 << 20)
        os.kill(src.vmm_pid(), signal.SIGKILL)
        state = await pair.play_source(timeout=30)
        assert_failed_once_as_kubevirt_sees_it(pair, state, "during the migration")
        crashed = await src.recorder.wait_for_status("Shutoff", "Crashed")
        assert migration_of(crashed)["Failed"]
        # The source proxy never closes its outbound leg, so the target sees nothing yet; once
        # that socket is closed (Go's finaliser), the receive relay notices the stream ended
        # inside a memory range and SIGKILLs the receiving VMM, which would otherwise spin.
        vmm = tgt.vmm_pid()
        pair.proxies.close_leaked()
        await tgt.recorder.wait_for_deleted(timeout=30)
        assert (await tgt.launcher.wait_exit(30)) == 0, tgt.log_text()
        assert not os.path.exists(f"/proc/{vmm}")

    pair.run(story())


@pytest.mark.parametrize("lagging", [False, True], ids=["handler-keeps-up", "handler-lags"])
def test_a_vmi_cloud_hypervisor_cannot_migrate_fails_at_once_with_kubevirts_reason(kind, pair_factory, lagging):
    """The launcher accepts the migration (Start published, as the Go launcher's
    initializeMigrationMetadata), then fails it with the translator's reason. Whether virt-handler
    synced on the start before the failure arrived or sees only the failure (its informer keeps
    the last Domain), the migration ends Failed once, with the reason, and virt-handler stops; in
    the second case its next sync calls Migrate once more (`isMigrationInProgress` is false for a
    Domain that already ended) and gets virt-launcher's "already executed" answer, as with Go."""
    vmi = migratable_vmi()
    vmi["spec"]["domain"]["devices"]["disks"].append({"name": "scratch", "disk": {"bus": "virtio"}})
    vmi["spec"]["volumes"].append({"name": "scratch", "emptyDisk": {"capacity": "16Mi"}})
    pair = pair_factory(vmi=vmi)
    src, tgt = pair.source, pair.target
    reason = ("DisksNotLiveMigratable: volume 'scratch' (emptyDisk) is local to the pod and writable: Cloud "
              "Hypervisor cannot copy disks during a migration")

    async def story():
        await src.boot()
        ports = await pair.prepare_target()
        assert (await pair.migrate(ports)).success, "accepted, then failed as a migration (not retried)"
        if lagging:  # virt-handler was busy until the failure had arrived too
            await src.recorder.wait_for(lambda e: (migration_of(e) or {}).get("Failed"), timeout=20)
        state = await pair.play_source(timeout=20, lagging=lagging)
        assert state["failureReason"] == reason, state
        announced = [migration_of(e) for e in src.recorder.events if migration_of(e)]
        assert announced[0]["StartTimestamp"] and not announced[0]["EndTimestamp"], "first in progress, as Go"
        assert announced[-1]["Failed"] and announced[-1]["EndTimestamp"] and announced[-1]["UID"] == pair.migration_uid
        assert all(e.status == "Running" for e in src.recorder.events[-len(announced):])
        assert not tgt.recorder.events, "nothing reached the target"
        handler = pair.handler
        calls = handler.migrate_calls()
        assert len(calls) == (2 if lagging else 1), handler.calls
        if lagging:
            again = calls[1]
            assert not again.success and f"migration job {pair.migration_uid} already executed, finished at " \
                in again.message and again.message.endswith(", failed: true, abortStatus: "), again.message
            assert [e.reason for e in handler.events].count("SyncFailed") == 1, handler.events
            del handler.calls[1]  # the rest is as when virt-handler kept up
        assert_failed_once_as_kubevirt_sees_it(pair, state, reason)
        assert lagging or "SyncFailed" not in [e.reason for e in handler.events], handler.events
        # Called again for this migration later (a stale resync), the launcher answers as Go's.
        again = await pair.call_migrate()
        assert not again.success and again.message.endswith(
            f"migration job {pair.migration_uid} already executed, finished at "
            f"{' '.join(state['endTimestamp'].rstrip('Z').split('T'))} +0000 UTC, failed: true, abortStatus: "), \
            again.message
        await pair.target_command("SignalTargetPodCleanup")
        assert (await tgt.launcher.wait_exit(30)) == 2

    pair.run(story())


def test_a_vm_the_user_paused_arrives_paused(kind, pair_factory):
    """virt-launcher keeps a paused VMI paused on the target (`l.paused.add`); Cloud Hypervisor
    sends `CompletePaused` for a VM that was paused, so nothing resumes it."""
    pair = pair_factory()
    src, tgt = pair.source, pair.target

    async def story():
        await src.boot()
        await src.client.vmi_command("PauseVirtualMachine", src.vmi)
        await src.recorder.wait_for_status("Paused", "User", timeout=15)
        src.vmi["status"]["conditions"] = [{"type": "Paused", "status": "True", "reason": "PausedByUser"}]
        ports = await pair.prepare_target()
        assert (await pair.migrate(ports)).success
        if not completes(kind):
            state = await pair.play_source(timeout=60)
            assert_failed_once_as_kubevirt_sees_it(pair, state, "GetNestedState")
            failed = await src.recorder.wait_for(lambda e: (migration_of(e) or {}).get("Failed"))
            assert (failed.status, failed.reason) == ("Paused", "User"), "still the user's pause"
            return
        moved = await src.recorder.wait_for_status("Shutoff", "Migrated", timeout=60)
        assert migration_of(moved)["EndTimestamp"]
        assert not any(e.reason == "Migration" for e in src.recorder.events), "a paused VM has no switch-over pause"
        arrived = await tgt.recorder.wait_for(lambda e: (migration_of(e) or {}).get("EndTimestamp"), timeout=30)
        assert (arrived.status, arrived.reason) == ("Paused", "User")
        await tgt.client.sync(pair.migrating_vmi())
        assert (await tgt.client.get_domain())["Status"]["Reason"] == "User", "a Sync does not resume it"

    pair.run(story())


def test_a_failed_switch_over_resumes_the_vm_even_with_rust_backtrace_in_the_pod(pair_factory, kind):
    """The launcher starts its VMM without RUST_BACKTRACE: with it, the PVM switch-over failure
    would get the VMM killed by its own seccomp filter (docs/migration.md §2)."""
    if kind == "real" and host_snapshots_vcpus():
        pytest.skip("this host completes real switch-overs; the simulated variant shows the failure")
    env = {"RUST_BACKTRACE": "1", "RUST_LIB_BACKTRACE": "1"}
    if kind == "simulated":
        env["FAKE_CH_MIGRATION_FAIL"] = "snapshot"
    pair = pair_factory(source_env=env)
    src = pair.source

    async def story():
        await src.boot()
        ports = await pair.prepare_target()
        assert (await pair.migrate(ports)).success
        state = await pair.play_source(timeout=60)
        assert_failed_once_as_kubevirt_sees_it(pair, state, "GetNestedState")
        failed = await src.recorder.wait_for(lambda e: (migration_of(e) or {}).get("Failed"))
        assert failed.status == "Running"
        assert src.launcher.children(), "the VMM is alive"

    pair.run(story())


SOURCE_POD_MAC, TARGET_POD_MAC = "0a:58:0a:f4:01:05", "0a:58:0a:f4:02:07"


@pytest.mark.parametrize("kind", ["simulated"], indirect=True)
def test_a_vm_received_without_a_mac_keeps_the_sources_mac_and_its_lease_across_a_soft_reboot(
        kind, pair_factory, tmp_path):
    """A masquerade interface without `macAddress` takes its pod link's MAC, which differs between
    the two pods. After the migration the guest keeps the source's MAC (the configuration it was
    sent), and the target's DHCP server answers that one; a soft reboot there makes a fresh VM
    from the target's plan, whose NIC must still carry it, or the guest gets no lease."""
    pair = pair_factory(vmi=migratable_vmi(with_masquerade()))
    src, tgt = pair.source, pair.target
    assert src.pod is not None and tgt.pod is not None
    src.pod.masquerade(mac=SOURCE_POD_MAC)
    tgt.pod.masquerade(mac=TARGET_POD_MAC)

    async def story():
        await src.boot()
        moved_mac = [n["mac"] for n in vmm_info(src)["config"]["net"]]
        assert moved_mac == [SOURCE_POD_MAC]
        ports = await pair.prepare_target()
        assert (await pair.migrate(ports)).success
        await pair.play_source(lambda: domain_status(pair.source_domain()) == ("Shutoff", "Migrated"), timeout=60)
        await tgt.recorder.wait_for(lambda e: e.status == "Running" and (migration_of(e) or {}).get("EndTimestamp"),
                                    timeout=30)
        assert [n["mac"] for n in vmm_info(tgt)["config"]["net"]] == moved_mac
        received_vmm = tgt.vmm_pid()
        await pair.target_command("SoftRebootVirtualMachine")

        def rebooted() -> bool:  # a fresh VMM runs the VM again
            assert tgt.launcher is not None
            if tgt.launcher.children() in ([], [received_vmm]):
                return False
            try:
                return vmm_info(tgt)["state"] == "Running"
            except (OSError, RuntimeError):  # not answering yet, or no VM created yet
                return False

        await until(rebooted, 30, 0.05)
        assert [n["mac"] for n in vmm_info(tgt)["config"]["net"]] == moved_mac, "the fresh VM's NIC (vm.create)"
        lease = await asyncio.to_thread(udhcpc, tgt.pod.guest_port("k6t-eth0", moved_mac[0]), tmp_path)
        assert lease is not None, f"no lease for the guest's MAC after the soft reboot\n{tgt.log_text()}"
        assert lease["ip"] == "10.0.2.2"

    pair.run(story())
