"""The guest-facing services around the VM: its serial console, for bridge/masquerade interfaces
its DHCP server, and its QEMU guest agent (`agent.GuestAgent`, imported on first use). Started
once per plan before boot, stopped when the VM is forgotten."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from ch_launcher.console import ConsoleError, SerialConsole, console_paths
from ch_launcher.manager import features
from ch_launcher.manager.settings import CommandFailed, ManagerSettings

if TYPE_CHECKING:
    from ch_launcher.convert import LauncherEnv, LauncherOptions, Plan
    from ch_launcher.dhcp.server import DhcpHandle
    from ch_launcher.kubevirt.vmi import VirtualMachineInstance
    from ch_launcher.manager.agent import GuestAgent
    from ch_launcher.manager.record import DomainRecord
    from ch_launcher.manager.runner import Runner

log = logging.getLogger(__name__)


def serial_log_enabled(vmi: VirtualMachineInstance, options: LauncherOptions | None) -> bool:
    """Whether the guest's serial output goes to `virt-serial0-log`: the VMI's
    `devices.logSerialConsole` when set, else the cluster's (not `SerialConsoleLogDisabled`),
    as kubevirt pkg/virt-launcher/virtwrap/manager.go@d923fdb815cd `isSerialConsoleLogEnabled`."""
    per_vmi = vmi.spec.domain.devices.logSerialConsole
    if per_vmi is not None:
        return per_vmi
    return not (options is not None and options.serial_console_log_disabled)


class GuestServices:
    """Console bridge (`<private-dir>/<uid>/virt-serial0`, log `virt-serial0-log`), DHCP and the
    guest agent (which hands what it hears to `record`; its work is owned by `runner`)."""

    def __init__(self, settings: ManagerSettings, record: DomainRecord, runner: Runner) -> None:
        self.settings = settings
        self._record = record
        self._runner = runner
        self._console: SerialConsole | None = None
        self._dhcp: DhcpHandle | None = None
        self._agent: GuestAgent | None = None
        self._serving = False  # started for a plan and not stopped since: what a restart serves again
        self._attach: asyncio.Task[None] | None = None

    def _env(self) -> LauncherEnv:
        return features.convert.LauncherEnv(**self.settings.directories())

    @property
    def agent(self) -> GuestAgent | None:
        """The guest agent of the VM (None before the services start, or once they stopped)."""
        return self._agent

    def vsock_event(self, device: str, activated: bool) -> None:
        """The VMM said the guest's driver took (`virtio-device:activated`) or reset a device;
        the guest agent listens for its vsock device's."""
        agent = self._agent
        if agent is None or device != agent.device:
            return
        if activated:
            agent.device_activated()
        else:
            agent.device_gone()

    def vm_started(self) -> None:
        """A VM booted or rebooted: its devices are new, not driven yet."""
        if self._agent is not None:
            self._agent.device_gone()

    async def start(self, plan: Plan, vmi: VirtualMachineInstance, options: LauncherOptions | None) -> None:
        """Listen on the console socket, serve DHCP, look for the guest agent (idempotent).
        Raises CommandFailed."""
        await self._start_console(plan, vmi, options)
        self._start_dhcp(plan, vmi)
        if self._agent is None and plan.guest_agent is not None:
            self._agent = features.agent.GuestAgent(plan.guest_agent, self._record, self._runner)
            self._agent.start()
        self._serving = True

    async def _start_console(self, plan: Plan, vmi: VirtualMachineInstance, options: LauncherOptions | None) -> None:
        if self._console is not None or not plan.serial_socket:
            return
        socket, log_file = console_paths(self.settings.private_dir, vmi.metadata.uid)
        console = SerialConsole(plan.serial_socket, socket, log_file if serial_log_enabled(vmi, options) else None)
        try:
            await console.start()
        except ConsoleError as e:
            raise CommandFailed(str(e)) from None
        self._console = console

    def attach_console(self) -> None:
        """Connect the console to the VMM's serial socket (after every boot or reboot), in the
        background; a failure is logged (the VM runs without a console)."""
        console = self._console
        if console is None:
            return
        if self._attach is not None:
            self._attach.cancel()  # a reboot during an attach: two would each keep a connection

        async def attach() -> None:
            try:
                await console.attach_vmm()
            except ConsoleError as e:
                log.warning("serial console: %s", e)

        self._attach = asyncio.ensure_future(attach())

    def _start_dhcp(self, plan: Plan, vmi: VirtualMachineInstance) -> None:
        if self._dhcp is not None:
            return
        hostname = vmi.spec.hostname or vmi.metadata.name  # what virt-launcher offers the guest
        try:
            self._dhcp = features.dhcp.start_dhcp(plan, self._env(), hostname=hostname)
        except features.dhcp.DhcpError as e:
            raise CommandFailed(f"cannot serve DHCP to the guest: {e}") from None

    async def restart_dhcp(self, plan: Plan, vmi: VirtualMachineInstance | None) -> None:
        """Serve `plan.dhcp` as it is now (an interface was hot-plugged or has gone): the server
        is stopped and started again with every lease (stateless: each answers one MAC).
        Raises CommandFailed when it cannot start; then no lease is served until the next
        restart (the caller restarts with what it served before). Nothing happens once the
        services were stopped (the VM is gone), until they are started again. The caller holds
        the manager's lock, so two restarts never interleave."""
        if vmi is None or not self._serving:
            return
        dhcp, self._dhcp = self._dhcp, None
        if dhcp is not None:
            await asyncio.to_thread(dhcp.stop)
        hostname = vmi.spec.hostname or vmi.metadata.name
        try:
            self._dhcp = await asyncio.to_thread(features.dhcp.start_dhcp, plan, self._env(),
                                                 hostname=hostname)
        except features.dhcp.DhcpError as e:
            raise CommandFailed(f"cannot serve DHCP to the guest: {e}") from None

    async def stop(self) -> None:
        """Stop the console, DHCP and the guest agent (idempotent): nothing serves the guest any more."""
        self._serving = False
        agent, self._agent = self._agent, None
        if agent is not None:
            await agent.stop()
        if self._attach is not None:
            self._attach.cancel()
            self._attach = None
        console, self._console = self._console, None
        if console is not None:
            with contextlib.suppress(Exception):
                await console.close()
        dhcp, self._dhcp = self._dhcp, None
        if dhcp is not None:
            with contextlib.suppress(Exception):
                dhcp.stop()
