"""The VMM's life: a VMM that answers (`ensure`), stopping it (`stop`, `discard`), and its end
(`gone`), whoever brings it about: a command, the boot, the supervision, a live migration.

`VmmLife` is below the boot and the supervision, which both start and stop VMMs, and above the
record and the sessions. It also holds the live migration in progress (`migration`), which hears
the VMM's exit (and, through the supervision, its events) before anything else.

Every method that awaits runs under the manager's lock (a command's step, or work started through
`Runner.background`); `ensure` raises CommandFailed with the in-band message, the others never
raise. `gone` is idempotent per VMM: the exit seen by the supervision and a stop that waited for
the same exit report it once.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Protocol

from ch_launcher import lifecycle
from ch_launcher.ch import versions
from ch_launcher.kubevirt.domain import Reason
from ch_launcher.kubevirt.log import log_subcomponent_line
from ch_launcher.lifecycle import ALIVE, UP, VmState
from ch_launcher.manager import features
from ch_launcher.manager.settings import CommandFailed
from ch_launcher.manager.view import describe_exit

if TYPE_CHECKING:
    from ch_launcher.ch.events import Event
    from ch_launcher.manager.record import DomainRecord
    from ch_launcher.manager.settings import ManagerSettings
    from ch_launcher.manager.vmm import VmmHost, VmmSession

log = logging.getLogger(__name__)


class Migration(Protocol):
    """A live migration of this VM (`migration_source.Outgoing` or `migration_target.Incoming`),
    from the moment it begins: it hears the VMM first."""

    uid: str
    ended: bool

    def on_event(self, event: Event) -> bool:
        """A VMM event, before the supervision sees it; True when the migration consumed it."""

    def on_vmm_exit(self, code: int | None) -> None:
        """The VMM exited (`code`: its status), before its end is reported."""

    def job_info(self) -> dict[str, Any] | None:
        """`MigrateDomainJobInfo` while sending; None when there is no job to report."""

    async def close(self) -> None:
        """The manager is closing: end what the migration still runs (its timers and tasks are
        the runner's, cancelled with it)."""


class VmmLife:
    """Starts, stops and buries the host's VMMs, keeping the record in step with their end."""

    def __init__(self, settings: ManagerSettings, record: DomainRecord, host: VmmHost) -> None:
        self.settings = settings
        self._record = record
        self._host = host
        self.migration: Migration | None = None  # the live migration that began last (it may have ended)
        self.closing = False         # the manager is closing: a VMM's exit is its doing, not news
        self.model_problem: str | None = None  # why virt-handler would not find the VMM (procmodel)

    @property
    def current(self) -> VmmSession | None:
        """The VMM of the VM (None: none runs)."""
        return self._host.current

    @property
    def version(self) -> str | None:
        """The VMM's version from `vmm.ping` ("53.0.0"), once a VMM has answered."""
        return self._host.version

    # --- a VMM that answers ----------------------------------------------------------------------

    async def ensure(self) -> VmmSession:
        """The current VMM, or a new one once it answers. Raises CommandFailed when it cannot
        start or is a version this launcher refuses (then it is stopped)."""
        session = self._host.current
        if session is not None and not session.exited():
            return session
        if session is not None:
            await self.gone(session)
        process = features.process
        try:
            session = await self._host.spawn()
        except process.VmmStartError as e:
            raise CommandFailed(f"cannot start cloud-hypervisor: {e}") from None
        try:
            version = await self._host.wait_ready(session)
        except process.VmmStartError as e:
            await self.discard(session)
            raise CommandFailed(f"cloud-hypervisor did not start: {e}") from None
        refusal = versions.refusal(version)
        if refusal is not None:
            await self.discard(session)
            raise CommandFailed(refusal)
        log.info("cloud-hypervisor %s is up (pid %d)", version, session.pid)
        self._check_process_model(session)
        self._record.bump()
        return session

    def _check_process_model(self, session: VmmSession) -> None:
        spawning = self.settings.spawning
        if spawning is None:
            return  # no runtime process tree asked for: Boot.fit_vmm says so to a VMI that needs it
        procmodel = features.procmodel
        self.model_problem = procmodel.model_problem(spawning, session.pid)
        if self.model_problem is None:
            log.info("process model: %s", procmodel.describe_model(spawning, session.pid))
        else:
            log.error("virt-handler will not find this pod's VMM: %s. VMIs with VFIO devices, dedicated or "
                      "realtime CPUs or memLock: Required cannot run here (%s)", self.model_problem, procmodel.DOC)

    # --- its end ---------------------------------------------------------------------------------

    async def discard(self, session: VmmSession) -> None:
        """A VMM that never became the VM's (it did not start right): stopped at once."""
        session.killing = True
        await session.terminate(1.0, 1.0)
        await self.gone(session)

    async def stop(self) -> None:
        """Stop the current VMM (vmm.shutdown, SIGTERM, SIGKILL) and report its end."""
        session = self._host.current
        if session is None:
            return
        session.killing = True
        timeout = self.settings.stop_timeout
        await session.terminate(timeout, timeout)
        await self.gone(session)

    async def gone(self, session: VmmSession) -> bool:
        """The VMM exited (or was stopped): reap it, read its last events, update the Domain.
        True when the guest shut down for a soft reboot (the caller boots the VM again; the
        domain stays Running meanwhile). Idempotent per VMM (False after the first time)."""
        code = session.process.poll()
        if code is None:  # another thread is reaping it (terminate): wait for that
            code = await asyncio.to_thread(session.process.wait, 30.0)
        if session is not self._host.current:
            return False
        self._host.read_events()
        if self.migration is not None:
            self.migration.on_vmm_exit(code)
        self._host.release(session)
        record = self._record
        how = describe_exit(code)
        self.check_failure(session)  # its vm:shutdown may have been lost
        # exit 0 is an orderly shutdown even when CH's event thread had no time to write vm:shutdown
        guest_shut_down = session.saw_shutdown or code == 0
        if (record.soft_reboot and guest_shut_down and not session.killing and session.failure is None
                and record.state in UP):
            log.info("the guest shut down for a soft reboot; booting it again")
            record.soft_reboot = False
            return True
        if record.state in ALIVE:
            down = lifecycle.down_reason(saw_shutdown=session.saw_shutdown, killing=session.killing,
                                         state=record.state, exit_code=code, vmm_failed=session.failure is not None,
                                         crash_destroy=session.crash_destroy)
            record.set_state(VmState.DOWN, down=down, force=True)
            if down in (Reason.CRASHED, Reason.PANICKED) and session.failure is None and not session.crash_destroy:
                message = f"cloud-hypervisor (pid {session.pid}) {how} while the VM was running"
                log.error("%s", message)
                for line in session.process.log_tail(5).splitlines():  # its last words, as virt-launcher logs QEMU's
                    log_subcomponent_line(log, "cloud-hypervisor", line)
                record.k8s_event("Warning", "VMMCrashed", message)
        elif record.state is not VmState.DOWN and not session.killing and not self.closing:
            # No VM ran on it (a VM that stopped has announced vm:shutdown and is DOWN already).
            log.warning("cloud-hypervisor (pid %d) %s with no VM running", session.pid, how)
        if record.state is VmState.DOWN:
            log.info("VM is down: %s", record.down.value if record.down else "?")
        record.bump()
        return False

    def check_failure(self, session: VmmSession) -> None:
        """While the VM is up and not being stopped by us: did the VMM stop it on an internal
        failure (a vCPU error, a thread that panicked)? CH then says `vm:shutdown` and exits 0 as
        after a guest poweroff; only its log tells (ch.vmmlog). Once per VMM: logged, and a
        Warning event as for a VMM crash."""
        if session.failure is not None or session.killing or self._record.state not in ALIVE:
            return
        failure = session.process.failure()
        if failure is None:
            return
        session.failure = failure
        message = f"cloud-hypervisor (pid {session.pid}) stopped the VM on an internal failure: {failure}"
        log.error("%s", message)
        self._record.k8s_event("Warning", "VMMCrashed", message)

    def close(self) -> None:
        """The manager is closing: its VMM's exit is the launcher's doing, not news."""
        self.closing = True
        if self._host.current is not None:
            self._host.current.killing = True
