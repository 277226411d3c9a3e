"""Live migration between two domain managers in one process, on the simulated VMM: the source's
relay dials the socket the target's relay listens on (both pods' share directory is one, as
virt-handler's proxies join them in a cluster). The stories of whole launcher pods are
tests/functional/test_migration_stories.py; these check what the manager keeps afterwards."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

import ch_launcher.convert
from ch_launcher.kubevirt.vmi import parse_vmi
from ch_launcher.lifecycle import Intent, VmState
from ch_launcher.manager.settings import CommandFailed
from tests.builders import with_devices
from tests.framework.managers import manager_for, manager_pair
from tests.functional.migration_handler import DEFAULT_OPTIONS, migratable_vmi, migrating


def _vmi():
    """A migratable VMI without a serial console: both VMMs share one filesystem here, where the
    target's would have to bind the console socket the source's still holds."""
    return migratable_vmi(with_devices(autoattachSerialConsole=False))


def _domain(manager):
    return json.loads(manager.domain_json) if manager.domain_json else None


def _after_a_migration(layouts, then):
    """Boot on the source, migrate to the target, then `await then(target, vmi)`."""
    raw = _vmi()
    source, target, _, _ = manager_pair(layouts, raw)
    vmi = parse_vmi(migrating(raw, str(uuid.uuid4())))

    async def story():
        await source.start()
        await target.start()
        try:
            await source.execute(Intent.SYNC, parse_vmi(raw), budget=15)
            assert await target.prepare_migration_target(vmi, None) == "prepared: waiting for the source"
            assert await source.migrate(vmi, json.dumps(DEFAULT_OPTIONS).encode()) == "migration started"
            assert await target.wait_until(lambda: target.state is VmState.RUNNING and (
                _domain(target)["Spec"]["Metadata"]["KubeVirt"]["Migration"]["EndTimestamp"]), 20)
            assert await source.wait_until(lambda: source.state is VmState.DOWN, 20)
            await then(target, vmi)
        finally:
            await target.close()
            await source.close()

    asyncio.run(story())


def test_a_received_vm_is_not_translated_again_by_the_first_sync(layouts, monkeypatch):
    # The target translates the VMI when it prepares; the first Sync after the migration must
    # find the VM's devices as they were planned (as after a boot), not translate again and load
    # the hotplug modules a VM whose devices did not change never needs.
    async def then(target, vmi):
        translations = []
        translate = ch_launcher.convert.translate
        monkeypatch.setattr(ch_launcher.convert, "translate",
                            lambda *args: translations.append(args) or translate(*args))
        assert await target.execute(Intent.SYNC, vmi, budget=15) == "refresh-grace"
        assert translations == []

    _after_a_migration(layouts, then)


def test_the_received_vms_stats_are_served_with_no_migration_job(layouts):
    # virt-handler scrapes GetDomainStats of every running VMI, the one that moved here included.
    async def then(target, vmi):
        stats = json.loads(await target.domain_stats(timeout=5))
        assert stats["Name"] == "default_migvmi" and stats["MigrateDomainJobInfo"]["DataProcessedSet"] is False

    _after_a_migration(layouts, then)


@pytest.mark.parametrize("state", [
    {"sourceNode": "node-a", "targetNode": "node-b"},
    {"migrationUID": "m-1", "sourceNode": "node-a"},  # the decentralized states' key, at the wrong level
    {"migrationUid": "m-1", "sourceState": {"node": "node-a"}},  # decentralized: sourceState's UID, here none
], ids=["no-uid", "peer-key-at-top-level", "decentralized-without-uid"])
def test_a_migrate_call_without_a_migration_uid_is_refused_in_band_and_nothing_is_published(layouts, state):
    # virt-handler reads the Domain's migration result only under the VMI's migration UID: a
    # result published under "" is never read, and virt-handler calls Migrate for ever.
    raw = _vmi()
    source, sink = manager_for(layouts[0], raw)
    vmi = migrating(raw, "unused")
    vmi["status"]["migrationState"] = state

    async def story():
        await source.start()
        try:
            await source.execute(Intent.SYNC, parse_vmi(raw), budget=15)
            published = len(sink.domains)
            with pytest.raises(CommandFailed) as refused:
                await source.migrate(parse_vmi(vmi), json.dumps(DEFAULT_OPTIONS).encode())
            assert str(refused.value) == (
                "cannot migrate VMI without a migration UID: status.migrationState.migrationUid "
                "(sourceState.migrationUID for a decentralized migration) is empty, so virt-handler could "
                "never match this migration's result")
            assert _domain(source)["Spec"]["Metadata"]["KubeVirt"].get("Migration") is None
            assert len(sink.domains) == published
            assert source.state is VmState.RUNNING
        finally:
            await source.close()

    asyncio.run(story())
