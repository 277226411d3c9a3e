"""The target side of a live migration (docs/migration.md §3.4, §5): SyncMigrationTarget,
FinalizeVirtualMachineMigration, and what the receiving VMM's events and answer mean.

Imported on first use by `manager.core` (the RPCs), never by a launcher that does not migrate. It
works with the manager's own objects (`parts.ManagerParts`). The receive call blocks the
VMM's API for the whole migration, so it runs in a thread of its own (not the REST worker); its
answer, the relay's end and the VMM's exit all come back to the event loop, and what they lead to
(the guest services after a completion, withdrawing a failed one) runs under the manager's lock.

The Domain (as the Go launcher's target, `live-migration-target.go@d923fdb815cd`, and libvirt's
incoming domain): nothing until the source connects; then ADDED `Paused`/`Migration` with the
metadata; `Running` once the VM was resumed (`Paused`/`User` for a VM that was paused); and
`EndTimestamp` when the receive answered. A receive that fails, a source that vanishes, or a VMM
that dies: the VMM is SIGKILLed (a v53.0 receiver without its sender spins and ignores SIGTERM)
and a domain already announced is withdrawn (final MODIFIED with `deletionTimestamp`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from ch_launcher.ch.api import ChApiError
from ch_launcher.kubevirt import migration as km
from ch_launcher.kubevirt.domain import now_rfc3339
from ch_launcher.lifecycle import VmState
from ch_launcher.manager.settings import CommandFailed
from ch_launcher.migration.relay import Relay

if TYPE_CHECKING:
    from ch_launcher.ch.events import Event
    from ch_launcher.convert import LauncherOptions, Plan
    from ch_launcher.kubevirt.vmi import VirtualMachineInstance
    from ch_launcher.manager.parts import ManagerParts
    from ch_launcher.manager.record import DomainRecord
    from ch_launcher.manager.vmm import VmmSession

log = logging.getLogger(__name__)

READY_WAIT = 10.0          # s for the VMM to listen after vm.receive-migration
RECEIVE_TIMEOUT = 24 * 3600.0  # the receive answers when the migration ends, however long
PAUSED_CONDITION = "Paused"
WORK = "migration-target"  # what holds the manager's lock while this side's work runs


async def prepare(parts: ManagerParts, vmi: VirtualMachineInstance, options: LauncherOptions | None) -> str:
    """`prepareMigrationTarget`: translate and prepare as for a start (the plan and its devices
    as a boot records them), a VMM waiting to receive, the relay on virt-handler's socket.
    Idempotent once prepared."""
    incoming = parts.life.migration
    if isinstance(incoming, Incoming) and not incoming.failed:
        return "the migration target is already prepared"
    record = parts.record
    if record.state not in (VmState.UNDEFINED, VmState.DOWN):
        raise CommandFailed("a VM already runs in this pod: it cannot be a migration target")
    record.set_vmi(vmi)
    await parts.boot.plan(vmi, options)
    await parts.boot.prepare_files()
    vmm = await parts.life.ensure()
    incoming = Incoming(parts, vmi, vmm)
    parts.life.migration = incoming  # it hears the VMM first from now on
    record.migration = km.MigrationMetadata(uid=km.migration_uid(vmi), start=now_rfc3339())
    # A VMI paused on the source stays paused here (Go: `l.paused.add` for the Paused condition).
    record.user_paused = any(c.type == PAUSED_CONDITION and c.status == "True" for c in vmi.status.conditions)
    await incoming.start()
    return "prepared: waiting for the source"


async def finalize(parts: ManagerParts, vmi: VirtualMachineInstance, interface_migration: dict[str, str]) -> str:
    """`finalizeMigrationTarget`: succeeds once the incoming migration completed, as often as
    virt-handler calls it. Interface link refresh and guest time are not available here."""
    incoming = parts.life.migration
    if not isinstance(incoming, Incoming) or not incoming.completed:
        raise CommandFailed("no migration has completed into this pod")
    refresh = sorted(name for name, method in interface_migration.items() if method == "LinkRefresh")
    if refresh:
        log.info("interfaces %s ask for a link refresh after the migration: Cloud Hypervisor has no link state "
                 "to toggle; the guest keeps its lease until it renews it", ", ".join(refresh))
    return "migration finalized"


class Incoming:
    """One incoming migration."""

    def __init__(self, parts: ManagerParts, vmi: VirtualMachineInstance, vmm: VmmSession) -> None:
        self.parts = parts
        self.record: DomainRecord = parts.record
        self.uid = km.migration_uid(vmi)
        self.vmi = vmi
        self.vmm = vmm
        self.relay: Relay | None = None
        self.ready = False       # the VMM listens
        self.started = False     # the source connected: the domain is announced
        self.completed = False
        self.failed = False
        self.ended = False
        self._receive: threading.Thread | None = None

    async def start(self) -> None:
        settings = self.parts.settings
        api_socket = settings.vmm_paths[0]
        ch_listen = os.path.join(os.path.dirname(api_socket), "migration-in.sock")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(ch_listen)
        proxy = km.proxy_socket(settings.share_dir, km.target_proxy_uid(self.vmi))
        try:
            os.makedirs(os.path.dirname(proxy), exist_ok=True)
        except OSError as e:
            raise CommandFailed(f"cannot create the migration sockets directory {os.path.dirname(proxy)}: "
                                f"{e.strerror or e}") from None
        loop = asyncio.get_running_loop()
        client = self.vmm.client

        def receive() -> None:
            try:
                client.receive_migration(f"unix:{ch_listen}", timeout=RECEIVE_TIMEOUT)
                error = None
            except ChApiError as e:
                error = str(e)
            loop.call_soon_threadsafe(self._received, error)

        self._receive = threading.Thread(target=receive, name="ch-receive-migration", daemon=True)
        self._receive.start()
        if not await self.record.wait_until(lambda: self.ready or self.ended, READY_WAIT) or not self.ready:
            self.fail("cloud-hypervisor did not start listening for the migration")
            raise CommandFailed(f"cloud-hypervisor did not start receiving the migration within {READY_WAIT:g} s")
        relay = Relay(proxy, ch_listen, name="receive", close_on_end=False,
                      on_end=self._from_relay_thread(loop))
        try:
            relay.start()
        except OSError as e:
            self.fail(f"cannot listen on {proxy}")
            raise CommandFailed(f"cannot listen on {proxy} for the migration: {e.strerror or e}") from None
        self.relay = relay
        log.info("migration target ready: %s -> %s", proxy, ch_listen)

    # --- what happens --------------------------------------------------------------------------

    def on_event(self, event: Event) -> bool:
        if self.ended:
            return False
        record = self.record
        name = event.name
        if name == "vm:migration-receive-ready":
            self.ready = True
            record.bump()
            return True
        if name == "vm:migration-receive-started":
            self.started = True
            record.migration_paused = True
            record.booted_once.set()  # the domain is defined from here on (`waitForDomainUUID`)
            record.set_state(VmState.PAUSED, force=True)
            return True
        if name == "vm:resumed":
            record.migration_paused = False
            record.set_state(VmState.RUNNING, force=True)
            return True
        return name in ("vm:restoring", "vm:restored", "vm:resuming", "vm:migration-receive-finished",
                        "vm:migration-receive-failed", "virtio-device:activated")

    def _received(self, error: str | None) -> None:
        if self.ended:
            return
        if error is None:
            self.complete()
        else:
            self.fail(f"the receive failed: {error}")

    def _from_relay_thread(self, loop: asyncio.AbstractEventLoop) -> Callable[[str, str], None]:
        """The relay's `on_end`, called in its thread: `_relay_ended` on the event loop."""
        def on_end(outcome: str, detail: str) -> None:
            loop.call_soon_threadsafe(self._relay_ended, outcome, detail)

        return on_end

    def _relay_ended(self, outcome: str, detail: str) -> None:
        if self.ended or outcome == "completed":
            return
        # The source went away (or broke the stream): the receiver would wait, or spin, for ever.
        self.fail(f"the migration stream ended: {detail}")

    def on_vmm_exit(self, code: int | None) -> None:
        if not self.ended:
            self.fail(f"cloud-hypervisor exited during the migration ({code})", vmm_gone=True)

    # --- ends ----------------------------------------------------------------------------------

    def complete(self) -> None:
        """The VM runs here: EndTimestamp; then the guest-facing services, with the MACs the
        received configuration carries."""
        record, runner = self.record, self.parts.runner
        self.ended = self.completed = True
        if self.relay is not None:
            runner.watch("migration relay", self._close_relay_once_done(self.relay))
        if record.migration_paused:
            # CompletePaused: the source's VM was paused (by the user); it stays so here.
            record.migration_paused = False
            record.user_paused = True
        if record.migration is not None:
            record.migration = record.migration.finished(now_rfc3339(), failed=False)
        record.booted_once.set()
        record.set_state(VmState.RUNNING if record.state is VmState.RUNNING else VmState.PAUSED, force=True)
        log.info("the incoming migration %s completed", self.uid)
        runner.background(WORK, self._after_completion)

    async def _close_relay_once_done(self, relay: Relay) -> None:
        """The receive call returns once the VMM has written its answer to `Complete`, which the
        relay may not have forwarded yet: closing it now would cut that answer, and the source
        VMM would fail a migration that completed here ("failed to fill whole buffer"). The relay
        ends by itself once it has (outcome `completed`); wait for that, a few seconds at most."""
        await asyncio.to_thread(relay.join, 5.0)
        relay.close()

    async def _after_completion(self) -> None:
        parts = self.parts
        try:
            info = await self.vmm.call(self.vmm.client.info)
            _adopt_macs(self.record.plan, info.config)
        except ChApiError as e:
            log.warning("vm.info after the migration: %s; the guest services use this pod's MACs", e)
        try:
            await parts.boot.start_guest_services()
        except CommandFailed as e:
            log.error("after the migration: %s", e)
        parts.guest.attach_console()

    def fail(self, why: str, *, vmm_gone: bool = False) -> None:
        """The migration did not complete here: kill the VMM, withdraw the domain."""
        if self.ended:
            return
        parts, record = self.parts, self.record
        self.ended = self.failed = True
        log.error("the incoming migration failed: %s", why)
        relay = self.relay
        meta = record.migration
        if meta is not None:
            record.migration = replace(meta.finished(now_rfc3339(), failed=True, reason=why))
        record.migration_paused = False
        # No VM here any more: the VMM's exit must not read as a crash of a running VM. The
        # domain is withdrawn below (forgotten), never published in between.
        record.set_state(VmState.UNDEFINED, publish=False)
        self.vmm.killing = True

        async def withdraw() -> None:
            try:
                if not vmm_gone:
                    # SIGKILL at once: the API is held by the receive and SIGTERM is not acted on.
                    await asyncio.to_thread(self.vmm.process.kill)
            finally:
                if relay is not None:
                    relay.close()  # only now: a receiver without its sender would spin
            if self.started:
                await parts.supervision.forget()
            else:
                record.bump()

        parts.runner.background(WORK, withdraw)

    def job_info(self) -> None:
        """No outgoing migration job here: the stats carry zeros (`MigrateDomainJobInfo`)."""

    async def close(self) -> None:
        if self.relay is not None:
            self.relay.close()


def _adopt_macs(plan: Plan | None, config: dict[str, object]) -> None:
    """After a migration the guest keeps the MACs it had: the configuration the source sent.
    The plan takes them everywhere it names a NIC's MAC: the DHCP server answers them, the Domain
    shows them, and a VM made afresh from the plan (a soft reboot's `vm.create`) has them, not
    the ones this pod would have chosen."""
    nets = config.get("net")
    if plan is None or not isinstance(nets, list):
        return
    macs = {n["id"]: n["mac"] for n in nets if isinstance(n, dict) and n.get("id") and n.get("mac")}
    if not macs:
        return
    plan.dhcp = [replace(spec, mac=macs.get(spec.interface, spec.mac)) for spec in plan.dhcp]
    plan.interfaces = [replace(i, mac=macs.get(i.alias, i.mac)) for i in plan.interfaces]
    if plan.config.net:
        plan.config.net = [replace(n, mac=macs.get(n.id or "", n.mac)) for n in plan.config.net]
