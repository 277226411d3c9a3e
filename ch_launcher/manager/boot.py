"""The boot: from a VMI to a running VM, the steps of `lifecycle.START` (translate, prepare, spawn,
create, boot), and the same from spawn on for a soft reboot's fresh VMM.

`Planner` turns the VMI into a plan (`convert.translate` with the pod's facts) and makes the
plan's files (`prepare`), in a worker thread of its own; the reconfiguration of a running VM
translates through it too. `Boot` does the rest: the guest-facing services and swtpm, a VMM
that answers and can run this VM (`procmodel`), `vm.create` and `vm.boot`.

Every step runs under the manager's lock (a command's step, or a background task the manager
started) and raises CommandFailed with the in-band message, leaving no half-made VM behind: a
VMM that did not answer is stopped, so the next Sync starts a fresh one; a VM config an attempt
left is deleted.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ch_launcher.ch import versions
from ch_launcher.lifecycle import VmState
from ch_launcher.manager import features
from ch_launcher.manager.pod import read_pod_facts, release_memory
from ch_launcher.manager.settings import CommandFailed
from ch_launcher.manager.view import cause

if TYPE_CHECKING:
    from ch_launcher.convert import LauncherOptions, Plan
    from ch_launcher.kubevirt.vmi import VirtualMachineInstance
    from ch_launcher.manager.guest import GuestServices
    from ch_launcher.manager.reconfig import Reconfiguration
    from ch_launcher.manager.record import DomainRecord
    from ch_launcher.manager.runner import Runner
    from ch_launcher.manager.settings import ManagerSettings
    from ch_launcher.manager.supervision import Supervision
    from ch_launcher.manager.tpm import Swtpm
    from ch_launcher.manager.vmm import VmmHost, VmmSession

log = logging.getLogger(__name__)
T = TypeVar("T")

RELEASE_WAIT = 5.0  # seconds a boot's release_memory() waits for its Domain event to reach virt-handler


class Planner:
    """VMI -> Plan, and the plan's files. `options` are the launcher options the VM was planned
    with (None until then); a later translation of the same VM without options uses them."""

    def __init__(self, settings: ManagerSettings) -> None:
        self.settings = settings
        self.options: LauncherOptions | None = None
        self._work = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="prepare")

    async def plan(self, vmi: VirtualMachineInstance, options: LauncherOptions | None) -> Plan:
        """The plan of a VM to boot (or to receive) with `options` (None: the defaults)."""
        self.options = options or features.convert.LauncherOptions()
        return await self.translate(vmi, self.options)

    async def translate(self, vmi: VirtualMachineInstance, options: LauncherOptions | None = None) -> Plan:
        """Raises CommandFailed naming every field Cloud Hypervisor cannot run."""
        options = options or self.options or features.convert.LauncherOptions()
        env = self.settings.launcher_env(read_pod_facts())
        try:
            return await self._in_worker(features.convert.translate, vmi, env, options)
        except features.convert.UnsupportedFeatures as e:
            causes = "; ".join(cause(p.field, p.message) for p in e.problems)
            raise CommandFailed(f"the VMI cannot run on Cloud Hypervisor: {causes}") from None

    async def prepare_files(self, plan: Plan) -> None:
        """The plan's preparation steps (disks, ISOs, ...), before the VMM opens them."""
        prepare = features.prepare
        try:
            await self._in_worker(functools.partial(prepare.execute, plan, timeout=self.settings.prepare_timeout))
        except prepare.PreparationError as e:
            raise CommandFailed(f"preparing the VM failed: {cause(e.field, e.message)}") from None

    async def _in_worker(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._work, functools.partial(fn, *args))

    def close(self) -> None:
        self._work.shutdown(wait=False, cancel_futures=True)


class Boot:
    """Brings the VM of the record's VMI up, on the host's current VMM."""

    def __init__(self, settings: ManagerSettings, record: DomainRecord, host: VmmHost, planner: Planner,
                 guest: GuestServices, reconfig: Reconfiguration, supervision: Supervision, runner: Runner) -> None:
        self.settings = settings
        self._record = record
        self._host = host
        self._planner = planner
        self._guest = guest
        self._reconfig = reconfig
        self._supervision = supervision
        self._runner = runner
        self._swtpm: Swtpm | None = None        # the TPM of a VM that has one; kept across VMMs
        self._model_problem: str | None = None  # why virt-handler would not find the VMM (procmodel)

    @property
    def swtpm_pid(self) -> int | None:
        return self._swtpm.pid if self._swtpm is not None else None

    # --- translate, prepare --------------------------------------------------------------------

    async def plan(self, vmi: VirtualMachineInstance, options: LauncherOptions | None) -> None:
        """TRANSLATE: the record's plan, and the devices the VM is made with (a later Sync has
        no device work until they change)."""
        self._record.set_plan(await self._planner.plan(vmi, options))
        self._reconfig.booting_with(vmi)

    async def prepare(self) -> None:
        """PREPARE: the plan's files, the console and DHCP, swtpm."""
        plan, vmi = self._record.plan, self._record.vmi
        assert plan is not None and vmi is not None
        await self._planner.prepare_files(plan)
        await self._guest.start(plan, vmi, self._planner.options)
        if plan.tpm is not None:
            if self._swtpm is None:
                self._swtpm = features.tpm.Swtpm(plan.tpm)
            await self._swtpm.start()

    async def prepare_files(self) -> None:
        plan = self._record.plan
        assert plan is not None
        await self._planner.prepare_files(plan)

    async def stop_swtpm(self) -> None:
        swtpm, self._swtpm = self._swtpm, None
        if swtpm is not None:
            await swtpm.stop()

    # --- spawn ---------------------------------------------------------------------------------

    async def ensure_vmm(self) -> VmmSession:
        """SPAWN: the current VMM, or a new one once it answers. Raises CommandFailed when it
        cannot start or is a version this launcher refuses (then it is stopped)."""
        session = self._host.current
        if session is not None and not session.exited():
            return session
        if session is not None:
            await self._supervision.vmm_gone(session)
        process = features.process
        try:
            session = await self._host.spawn()
        except process.VmmStartError as e:
            raise CommandFailed(f"cannot start cloud-hypervisor: {e}") from None
        try:
            version = await self._host.wait_ready(session)
        except process.VmmStartError as e:
            await self._discard(session)
            raise CommandFailed(f"cloud-hypervisor did not start: {e}") from None
        refusal = versions.refusal(version)
        if refusal is not None:
            await self._discard(session)
            raise CommandFailed(refusal)
        log.info("cloud-hypervisor %s is up (pid %d)", version, session.pid)
        self._check_process_model(session)
        self._record.bump()
        return session

    async def _discard(self, session: VmmSession) -> None:
        session.killing = True
        await session.terminate(1.0, 1.0)
        await self._supervision.vmm_gone(session)

    async def ensure_vmm_quietly(self) -> None:
        """The warm-up start: a VMM that cannot start is logged here and reported by the first Sync."""
        try:
            await self.ensure_vmm()
        except CommandFailed as e:
            log.error("%s", e)

    def _check_process_model(self, session: VmmSession) -> None:
        spawning = self.settings.spawning
        if spawning is None:
            return  # no runtime process tree asked for: fit_vmm says so to a VMI that needs it
        procmodel = features.procmodel
        self._model_problem = procmodel.model_problem(spawning, session.pid)
        if self._model_problem is None:
            log.info("process model: %s", procmodel.describe_model(spawning, session.pid))
        else:
            log.error("virt-handler will not find this pod's VMM: %s. VMIs with VFIO devices, dedicated or "
                      "realtime CPUs or memLock: Required cannot run here (%s)", self._model_problem, procmodel.DOC)

    async def fit_vmm(self) -> None:
        """Before vm.create: the VMM must be where virt-handler looks for it and able to lock the
        memory the VM pins, if this VM needs either (HostTuning); else fail with the reason,
        leaving no VM behind. A VMM started before virt-handler raised the spawner's memlock
        limit is replaced by one that inherits it."""
        plan, session = self._record.plan, self._host.current
        assert plan is not None and session is not None
        host = plan.host
        if not (host.finds_vmm or host.lock_memory or host.housekeeping_cpus):
            return  # nothing of the process model matters to this VMI
        procmodel = features.procmodel
        if self.settings.spawning is None:
            self._model_problem = procmodel.model_problem(None, session.pid)
        if host.finds_vmm and self._model_problem is not None:
            raise CommandFailed(f"virt-handler would not find this VMI's VMM and would fail its reconcile: "
                                f"{self._model_problem} ({procmodel.DOC})")
        if host.lock_memory:
            if procmodel.lock_problem(session.pid, host.lock_memory) and procmodel.spawner_can_lock(
                    self.settings.spawning, host.lock_memory):
                log.info("the VMM (pid %d) started before virt-handler raised the memlock limit; starting one "
                         "that inherits it", session.pid)
                await self._supervision.stop_vmm()
                session = await self.ensure_vmm()
            problem = procmodel.lock_problem(session.pid, host.lock_memory)
            if problem is not None:
                raise CommandFailed(problem)
        if host.housekeeping_cpus:
            features.tuning.pin_housekeeping(self.settings.spawning, session.pid, host.housekeeping_cpus)

    # --- create, boot --------------------------------------------------------------------------

    async def create(self) -> None:
        """CREATE: `vm.create`, replacing a config an earlier attempt left. A VMM that does not
        answer (hung, or gone between calls) is stopped, as `boot` does, so that the next Sync
        starts a fresh one instead of asking the same stalled VMM again. Raises CommandFailed."""
        api = features.api
        plan, session = self._record.plan, self._host.current
        assert plan is not None and session is not None
        client = session.client
        for attempt in (1, 2):
            try:
                await session.call(client.create, plan.config)
                return
            except api.Conflict:
                if attempt == 2:
                    raise CommandFailed("cloud-hypervisor keeps a VM that cannot be replaced") from None
                await session.call(client.delete)  # a config left by an earlier attempt: replace it
            except api.VmmUnavailable as e:
                await self._supervision.stop_vmm()
                raise CommandFailed(f"cloud-hypervisor did not take the VM configuration: {e}") from None
            except api.ChApiError as e:
                raise CommandFailed(f"cloud-hypervisor refused the VM configuration: {e}") from None

    async def boot(self) -> None:
        """BOOT: `vm.boot`; the VM runs (or is paused, for startStrategy Paused) and the Domain
        is announced. Raises CommandFailed (and a BootFailed event) when it does not boot."""
        api = features.api
        record, session, vmi = self._record, self._host.current, self._record.vmi
        assert session is not None and vmi is not None
        client = session.client
        # startStrategy Paused: virt-launcher starts the domain paused and records the pause as
        # the user's (kubevirt pkg/virt-launcher/virtwrap/manager.go@d923fdb815cd; libvirt then
        # reports Paused/User), so only `virtctl unpause` resumes it. Cloud Hypervisor cannot boot
        # paused: pause right after vm.boot, before the Domain is first announced.
        start_paused = not record.booted_once.is_set() and vmi.spec.startStrategy == "Paused"
        try:
            await session.call(client.boot, timeout=self.settings.boot_timeout)
            if start_paused:
                heard = session.events_heard()
                await session.call(client.pause)
                session.answered("pause", heard)  # its vm:paused may come after an unpause
        except api.ChApiError as e:
            # Leave no half-made VM, so the next Sync starts clean: a VMM that did not answer is
            # stopped (the next Sync spawns another), otherwise its VM config is deleted.
            if isinstance(e, api.VmmUnavailable):
                await self._supervision.stop_vmm()
            else:
                with contextlib.suppress(api.ChApiError):
                    await session.call(client.delete)
            message = f"booting the VM failed: {e}"
            record.k8s_event("Warning", "BootFailed", message)
            raise CommandFailed(message) from None
        record.user_paused = start_paused  # a pause of an earlier boot does not carry over
        self._reconfig.rebuilt()
        record.set_state(VmState.PAUSED if start_paused else VmState.RUNNING, force=True)
        record.booted_once.set()
        self._guest.attach_console()
        plan = record.plan
        host = plan.host if plan is not None else None
        if host is not None and (host.housekeeping_cpus or host.realtime_vcpus):
            features.tuning.after_boot(self.settings.spawning, session.pid, host)
        self._runner.background(self._release_memory_once_told())

    async def boot_again(self) -> None:
        """A soft reboot's fresh VMM and VM (the guest shut down; the domain stays Running)."""
        await self.ensure_vmm()
        await self.create()
        await self.boot()

    async def _release_memory_once_told(self) -> None:
        """`release_memory()` once virt-handler has heard of the boot (or RELEASE_WAIT has
        passed): it holds the event loop for ~100 ms and pages out what the delivery then
        needs, so done right after the boot it delayed the first Domain event and the Sync's
        answer by as much (bench/real_vmm.py)."""
        await self._record.flush(RELEASE_WAIT)
        release_memory()
