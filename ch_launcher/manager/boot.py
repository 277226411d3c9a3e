"""The boot: from a VMI to a running VM, the steps of `lifecycle.START` (translate, prepare, spawn,
create, boot), and the same from spawn on for a soft reboot's fresh VMM.

The planner (`planner.Planner`) turns the VMI into a plan and makes the plan's files; `Boot` does
the rest: the guest-facing services and swtpm, a VMM that answers (`life.VmmLife`) and can run
this VM (`procmodel`), `vm.create` and `vm.boot`.

Every step runs under the manager's lock (a command's step, or work started through
`Runner.background`) and raises CommandFailed with the in-band message, leaving no half-made VM
behind: a VMM that did not answer is stopped (`VmmLife`), so the next Sync starts a fresh one; a
VM config an attempt left is deleted.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import TYPE_CHECKING

from ch_launcher.lifecycle import VmState
from ch_launcher.manager import features
from ch_launcher.manager.pod import release_memory
from ch_launcher.manager.settings import CommandFailed

if TYPE_CHECKING:
    from ch_launcher.convert import LauncherOptions, Plan
    from ch_launcher.kubevirt.vmi import VirtualMachineInstance
    from ch_launcher.manager.guest import GuestServices
    from ch_launcher.manager.life import VmmLife
    from ch_launcher.manager.planner import Planner
    from ch_launcher.manager.reconfig import Reconfiguration
    from ch_launcher.manager.record import DomainRecord
    from ch_launcher.manager.runner import Runner
    from ch_launcher.manager.settings import ManagerSettings
    from ch_launcher.manager.tpm import Swtpm
    from ch_launcher.manager.vmm import VmmSession

log = logging.getLogger(__name__)

RELEASE_WAIT = 5.0  # seconds a boot's release_memory() waits for its Domain event to reach virt-handler


def kvm_unavailable(path: str) -> str | None:
    """Why `path` (the pod's /dev/kvm) cannot be opened read-write by this process, or None when
    it can or does not exist (a VMM without a kvm device says itself why it cannot start)."""
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CLOEXEC))
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"{path} cannot be opened read-write ({e.strerror})"
    return None


def ready_vsock(plan: Plan) -> None:
    """The VM's vsock socket can be bound by the VMM that is about to get the VM: its directory
    exists (the VMI directory, which nothing else makes without a console), and no socket is
    left there by an earlier VMM that was killed (cloud-hypervisor binds without removing one,
    and the boot fails: `Error binding to the host-side Unix socket`; before vm.create, or a
    migration's restore, no VM owns it). Raises CommandFailed."""
    vsock = plan.config.vsock
    if vsock is None:
        return
    try:
        os.makedirs(os.path.dirname(vsock.socket), mode=0o700, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(vsock.socket)
    except OSError as e:
        raise CommandFailed(f"cannot prepare the VM's vsock socket {vsock.socket}: {e.strerror or e}") from None


class Boot:
    """Brings the VM of the record's VMI up, on the current VMM of its life."""

    def __init__(self, settings: ManagerSettings, record: DomainRecord, life: VmmLife, planner: Planner,
                 guest: GuestServices, reconfig: Reconfiguration, runner: Runner) -> None:
        self.settings = settings
        self._record = record
        self._life = life
        self._planner = planner
        self._guest = guest
        self._reconfig = reconfig
        self._runner = runner
        self._swtpm: Swtpm | None = None        # the TPM of a VM that has one; kept across VMMs

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
        """The plan's files only (a migration target: the VM arrives with its own state), and
        room for its vsock socket."""
        plan = self._record.plan
        assert plan is not None
        await self._planner.prepare_files(plan)
        ready_vsock(plan)

    async def start_guest_services(self) -> None:
        """The console and DHCP of the plan, as `prepare` starts them (a VM that arrived)."""
        plan, vmi = self._record.plan, self._record.vmi
        assert plan is not None and vmi is not None
        await self._guest.start(plan, vmi, self._planner.options)

    async def stop_swtpm(self) -> None:
        swtpm, self._swtpm = self._swtpm, None
        if swtpm is not None:
            await swtpm.stop()

    # --- spawn ---------------------------------------------------------------------------------

    async def ensure_vmm(self) -> VmmSession:
        """SPAWN: the current VMM, or a new one once it answers (`VmmLife.ensure`)."""
        return await self._life.ensure()

    async def ensure_vmm_quietly(self) -> None:
        """The warm-up start, so the first Sync finds a VMM answering. While the pod's /dev/kvm
        cannot be opened read-write (a non-root VMI's pod, before virt-handler gives the device
        to its uid just ahead of the first Sync) no VMM is started: it says so at info level and
        the first Sync starts it. A VMM that cannot start otherwise is logged here at error level
        and reported by the first Sync."""
        waiting = kvm_unavailable(self.settings.kvm_device)
        if waiting is not None:
            log.info("cloud-hypervisor starts at the first Sync: %s (virt-handler gives a non-root VMI's "
                     "pod the device before that Sync)", waiting)
            return
        try:
            await self._life.ensure()
        except CommandFailed as e:
            log.error("%s", e)

    async def fit_vmm(self) -> None:
        """Before vm.create: the VMM must be where virt-handler looks for it and able to lock the
        memory the VM pins, if this VM needs either (HostTuning); else fail with the reason,
        leaving no VM behind. A VMM started before virt-handler raised the spawner's memlock
        limit is replaced by one that inherits it."""
        plan, session = self._record.plan, self._life.current
        assert plan is not None and session is not None
        host = plan.host
        if not (host.finds_vmm or host.lock_memory or host.housekeeping_cpus):
            return  # nothing of the process model matters to this VMI
        procmodel = features.procmodel
        if self.settings.spawning is None:
            self._life.model_problem = procmodel.model_problem(None, session.pid)
        if host.finds_vmm and self._life.model_problem is not None:
            raise CommandFailed(f"virt-handler would not find this VMI's VMM and would fail its reconcile: "
                                f"{self._life.model_problem} ({procmodel.DOC})")
        if host.lock_memory:
            if procmodel.lock_problem(session.pid, host.lock_memory) and procmodel.spawner_can_lock(
                    self.settings.spawning, host.lock_memory):
                log.info("the VMM (pid %d) started before virt-handler raised the memlock limit; starting one "
                         "that inherits it", session.pid)
                await self._life.stop()
                session = await self._life.ensure()
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
        plan, session = self._record.plan, self._life.current
        assert plan is not None and session is not None
        client = session.client
        ready_vsock(plan)
        for attempt in (1, 2):
            try:
                await session.call(client.create, plan.config)
                return
            except api.Conflict:
                if attempt == 2:
                    raise CommandFailed("cloud-hypervisor keeps a VM that cannot be replaced") from None
                await session.call(client.delete)  # a config left by an earlier attempt: replace it
            except api.VmmUnavailable as e:
                await self._life.stop()
                raise CommandFailed(f"cloud-hypervisor did not take the VM configuration: {e}") from None
            except api.ChApiError as e:
                raise CommandFailed(f"cloud-hypervisor refused the VM configuration: {e}") from None

    async def boot(self) -> None:
        """BOOT: `vm.boot`; the VM runs (or is paused, for startStrategy Paused) and the Domain
        is announced. Raises CommandFailed (and a BootFailed event) when it does not boot."""
        api = features.api
        record, session, vmi = self._record, self._life.current, self._record.vmi
        assert session is not None and vmi is not None
        client = session.client
        # startStrategy Paused: virt-launcher starts the domain paused and records the pause as
        # the user's (kubevirt pkg/virt-launcher/virtwrap/manager.go@d923fdb815cd; libvirt then
        # reports Paused/User), so only `virtctl unpause` resumes it. Cloud Hypervisor cannot boot
        # paused: pause right after vm.boot, before the Domain is first announced.
        start_paused = not record.booted_once.is_set() and vmi.spec.startStrategy == "Paused"
        try:
            await session.call(client.boot, timeout=self.settings.boot_timeout)
            if not record.booted_once.is_set():
                log.info("vm.boot returned")  # bench/cluster.py's timeline
            if start_paused:
                heard = session.events_heard()
                await session.call(client.pause)
                session.answered("pause", heard)  # its vm:paused may come after an unpause
        except api.ChApiError as e:
            # Leave no half-made VM, so the next Sync starts clean: a VMM that did not answer is
            # stopped (the next Sync spawns another), otherwise its VM config is deleted.
            if isinstance(e, api.VmmUnavailable):
                await self._life.stop()
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
        self._runner.watch("release memory", self._release_memory_once_told())

    async def boot_again(self) -> None:
        """A soft reboot's fresh VMM and VM (the guest shut down; the domain stays Running)."""
        await self._life.ensure()
        await self.create()
        await self.boot()

    async def _release_memory_once_told(self) -> None:
        """`release_memory()` once virt-handler has heard of the boot (or RELEASE_WAIT has
        passed): it holds the event loop for ~100 ms and pages out what the delivery then
        needs, so done right after the boot it delayed the first Domain event and the Sync's
        answer by as much (bench/real_vmm.py)."""
        await self._record.flush(RELEASE_WAIT)
        release_memory()
