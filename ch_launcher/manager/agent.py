"""The VM's QEMU guest agent, reached over its vsock (imported on first use: `features.agent`).

`GuestAgent` is one of the guest services (`guest.GuestServices` starts it with the console and
stops it when the VM is forgotten). It keeps one connection to qemu-ga in the guest
(`ch.vsock`, `qga.connection`): while the VM runs and no connection is open, it tries every
`RETRY` seconds once the guest's driver has taken the vsock device (the VMM's
`virtio-device:activated`, which the supervision hands on), and before that rarely (a backoff
up to `MAX_BACKOFF`: such a connection is never answered and stays in the VMM's socket backlog);
an open connection is closed by the guest when the agent exits (and by the VMM when the VM
stops), which the link hears at once. While connected it polls the agent as
virt-launcher's agent poller does (kubevirt `pkg/virt-launcher/virtwrap/agent-poller`
@d923fdb815cd: each group of commands at once, then every 10 s doubling up to its interval:
the agent's version and commands and the filesystems every 300 s, the freeze status every 5 s,
the OS, host name, time zone and interfaces every 120 s, the users every 10 s), not while the
VM is paused. It serves the RPCs that ask the agent (ping, exec, freeze, thaw), and propagates
the VMI's access credentials through it as virt-launcher's access-credential manager does
(`pkg/virt-launcher/virtwrap/access-credentials`: on connection, then every `CREDENTIALS_CHECK`
seconds when the Secret's files changed, and every `CREDENTIALS_RESYNC` seconds regardless).

State it owns: the connection, what the agent last said (`GuestAgentData`), the access
credentials' last result and the safety thaw's timer. What virt-handler sees of it (the channel
`connected`/`disconnected`, OS info, interfaces, freeze status, the credentials' result) it hands
to the record (`DomainRecord.set_guest_agent`) as an observation, applied at once. A paused VM
keeps the channel as it was (libvirt keeps the agent connected while QEMU is paused); a VM that
is not up shows it disconnected.

Failure behaviour: nothing here raises into the manager's objects; the RPC methods raise
`AgentUnavailable` with the text the Go launcher answers (libvirt's errors as virt-launcher
formats them).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ch_launcher.ch import vsock
from ch_launcher.kubevirt.domain_view import AccessCredentialResult, GuestAgentView
from ch_launcher.kubevirt.guest_info import GuestAgentData
from ch_launcher.lifecycle import VmState
from ch_launcher.manager.view import no_guest_agent
from ch_launcher.qga import info
from ch_launcher.qga.connection import AgentConnection, AgentGone
from ch_launcher.qga.guest_exec import Completed, GuestExecFailed, guest_exec
from ch_launcher.qga.protocol import AgentError

if TYPE_CHECKING:
    from ch_launcher.convert.plan import AgentCredential, GuestAgentSpec
    from ch_launcher.manager.record import DomainRecord
    from ch_launcher.manager.runner import Runner

log = logging.getLogger(__name__)

RETRY = 1.0               # seconds between attempts to reach an agent that is not there
MAX_BACKOFF = 60.0        # ... while the guest has not activated its vsock device (the wait doubles up to this)
CONNECT_TIMEOUT = 5.0     # the guest's answer to a vsock connection, and to the first sync
CALL_TIMEOUT = 5.0        # libvirt's default wait for an agent reply
INITIAL_INTERVAL = 10.0   # the agent poller's first interval, doubled up to each group's own
CREDENTIALS_CHECK = 15.0  # virt-launcher's resyncCheckIntervalSeconds
CREDENTIALS_RESYNC = 300.0  # and its forced resync
# (group, seconds): virt-launcher's defaults for --qemu-agent-version-interval, -file-interval,
# --qemu-fsfreeze-status-interval, --qemu-agent-sys-interval, --qemu-agent-user-interval
POLLS = (("version", 300.0), ("filesystems", 300.0), ("freeze", 5.0), ("system", 120.0), ("users", 10.0))


class AgentUnavailable(Exception):
    """A request to the agent failed; `str()` is what the Go launcher answers."""


def libvirt_error(code: int, domain: int, message: str) -> str:
    """An error as virt-launcher passes libvirt's on (`LibvirtError(Code=..., Domain=..., Message='...')`)."""
    return f"LibvirtError(Code={code}, Domain={domain}, Message='{message}')"


def agent_error(e: AgentError) -> str:
    # libvirt's qemuAgentCheckError: VIR_ERR_INTERNAL_ERROR (1) from the QEMU driver (10)
    return libvirt_error(1, 10, f"internal error: {e}")


class GuestAgent:
    """The agent of one VM (see the module docstring). `start()` once; `await stop()` at the end."""

    def __init__(self, spec: GuestAgentSpec, record: DomainRecord, runner: Runner) -> None:
        self._spec = spec
        self._record = record
        self._runner = runner
        self._connection: AgentConnection | None = None
        self._connected = False                  # what the Domain's channel says
        self.data = GuestAgentData()             # what the agent last said
        self._credentials: AccessCredentialResult | None = None
        self._applied: tuple[Any, ...] | None = None  # the credentials last written, and when
        self._thaw_timer: asyncio.TimerHandle | None = None
        self._link_task: asyncio.Task[Any] | None = None
        self._why_not = ""                       # why the last attempt to connect failed
        self._activated = False                  # the guest's driver has taken the vsock device
        self._activation = asyncio.Event()       # set when that becomes known: a waiting link tries at once

    # --- life ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start looking for the agent (idempotent); nothing is tried before the VM runs."""
        if self._link_task is None:
            self._link_task = self._runner.watch("guest agent", self._link())

    async def stop(self) -> None:
        """Close the connection and stop looking (idempotent); the channel shows disconnected."""
        task, self._link_task = self._link_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._cancel_thaw()
        if self._connection is not None:
            self._connection.close("the VM is gone")
            self._connection = None
        self._connected = False

    @property
    def connected(self) -> bool:
        return self._connected

    @property
    def device(self) -> str:
        """The id of the vsock device the agent is reached through."""
        return self._spec.device

    def device_activated(self) -> None:
        """The guest's vsock driver took the device (`virtio-device:activated`): its agent can be
        reached; a link waiting out a backoff tries at once."""
        self._activated = True
        self._activation.set()

    def device_gone(self) -> None:
        """The device is new (a VM booted or rebooted) or the guest reset it: not driven until
        it says so again."""
        self._activated = False

    # --- the link --------------------------------------------------------------------------

    def _running(self) -> bool:
        return self._record.state is VmState.RUNNING

    async def _link(self) -> None:
        backoff = RETRY
        while True:
            await self._record.wait_until(self._running)
            try:
                connection = await self._open()
            except (vsock.VsockError, AgentGone) as e:
                if str(e) != self._why_not:
                    self._why_not = str(e)
                    log.info("guest agent not reached on vsock port %d: %s", self._spec.port, e)
                if self._record.state is not VmState.PAUSED:
                    self._show(connected=False)
                if isinstance(e, vsock.VsockRefused):
                    self._activated = True  # the guest answered: its driver runs (an event may have been missed)
                backoff = RETRY if self._activated else min(backoff * 2, MAX_BACKOFF)
                await self._wait_to_retry(RETRY if self._activated else backoff)
                continue
            backoff = RETRY
            self._why_not = ""
            self._connection = connection
            log.info("guest agent connected (vsock port %d)", self._spec.port)
            self._show(connected=True)
            work = [asyncio.ensure_future(self._poll(connection))]
            if self._spec.credentials:
                work.append(asyncio.ensure_future(self._propagate(connection)))
            try:
                await connection.lost.wait()
            finally:
                for task in work:
                    task.cancel()
                self._connection = None
            log.info("guest agent disconnected: %s", connection.why_lost)
            if self._record.state is not VmState.PAUSED:  # a paused VM keeps its agent, as libvirt's does
                self._show(connected=False)

    async def _wait_to_retry(self, delay: float) -> None:
        """`delay` seconds, or until the device is known to be driven. Before that a connection
        gets no answer and stays in the VMM's socket backlog until the device runs: a guest
        without the driver is asked rarely (the delay doubles up to MAX_BACKOFF)."""
        self._activation.clear()
        if self._activated:
            await asyncio.sleep(delay)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._activation.wait(), delay)

    async def _open(self) -> AgentConnection:
        reader, writer = await vsock.connect(self._spec.socket, self._spec.port, CONNECT_TIMEOUT)
        connection = AgentConnection(reader, writer)
        try:
            await connection.open(CONNECT_TIMEOUT)
        except BaseException:
            connection.close("not synchronised")
            raise
        return connection

    def _show(self, *, connected: bool | None = None) -> None:
        """Hand the record what the Domain shows of the agent now."""
        if connected is not None:
            self._connected = connected
        data = self.data
        self._record.set_guest_agent(GuestAgentView(
            connected=self._connected, os_info=data.os_info, interfaces=data.interfaces,
            fs_freeze_status=data.fs_freeze_status, access_credential=self._credentials))

    # --- polling ---------------------------------------------------------------------------

    async def _poll(self, connection: AgentConnection) -> None:
        loop = asyncio.get_running_loop()
        interval = {name: min(INITIAL_INTERVAL, tick) for name, tick in POLLS}
        due = dict.fromkeys(interval, loop.time())
        while True:
            await self._record.wait_until(self._running)
            for name, tick in POLLS:
                if due[name] <= loop.time():
                    await self._poll_group(connection, name)
                    due[name] = loop.time() + interval[name]
                    interval[name] = min(interval[name] * 2, tick)
            await asyncio.sleep(max(0.0, min(due.values()) - loop.time()))

    async def _ask(self, connection: AgentConnection, command: str) -> Any:
        """The agent's answer to `command`, or None when it answered an error (not vital: the
        poller goes on, as virt-launcher's does). AgentGone ends the polling."""
        try:
            return await connection.call(command, timeout=CALL_TIMEOUT)
        except AgentError as e:
            log.debug("guest agent: %s", e)
            return None

    async def _poll_group(self, connection: AgentConnection, group: str) -> None:
        """Ask one group's commands and apply the answers to what the agent last said as it is
        then: a freeze or thaw answered meanwhile is not overwritten with what was known before."""
        changes: dict[str, Any] = {}
        try:
            if group == "version":
                answer = await self._ask(connection, "guest-info")
                if answer is not None:
                    changes["version"], changes["supported_commands"] = info.agent_info(answer)
            elif group == "filesystems":
                answer = await self._ask(connection, "guest-get-fsinfo")
                if answer is not None:
                    changes["filesystems"] = info.filesystems(answer)
            elif group == "freeze":
                answer = await self._ask(connection, "guest-fsfreeze-status")
                if answer is not None:
                    changes["fs_freeze_status"] = info.fs_freeze_status(answer)
            elif group == "users":
                answer = await self._ask(connection, "guest-get-users")
                if answer is not None:
                    changes["users"] = info.users(answer)
            else:
                changes = await self._poll_system(connection)
        except ValueError as e:
            log.error("Cannot parse guest agent %s: %s", group, e)
            return
        data = replace(self.data, **changes)
        if data != self.data:
            self.data = data
            self._show()

    async def _poll_system(self, connection: AgentConnection) -> dict[str, Any]:
        """What libvirt's virDomainGetGuestInfo asks for the OS, host name, time zone and NICs."""
        changes: dict[str, Any] = {}
        for command, field, parse in (("guest-get-osinfo", "os_info", info.os_info),
                                      ("guest-get-host-name", "hostname", info.hostname),
                                      ("guest-get-timezone", "timezone", info.timezone),
                                      ("guest-network-get-interfaces", "interfaces", info.interfaces)):
            answer = await self._ask(connection, command)
            if answer is not None:
                changes[field] = parse(answer)
        return changes

    # --- requests (the RPCs) ----------------------------------------------------------------

    def _ready(self, domain_name: str) -> AgentConnection:
        """The open connection, or AgentUnavailable with libvirt's error for the domain's state."""
        connection = self._connection
        if connection is None or connection.lost.is_set() or self._record.state is not VmState.RUNNING:
            raise AgentUnavailable(no_guest_agent(self._record.state, domain_name))
        return connection

    async def _call(self, domain_name: str, command: str, arguments: dict[str, Any] | None = None,
                    timeout: float = CALL_TIMEOUT) -> Any:
        connection = self._ready(domain_name)
        try:
            return await connection.call(command, arguments, timeout=timeout)
        except AgentError as e:
            raise AgentUnavailable(agent_error(e)) from None
        except AgentGone as e:
            raise AgentUnavailable(libvirt_error(86, 10, f"Guest agent is not responding: {e}")) from None

    async def ping(self, domain_name: str, timeout: float) -> None:
        """`guest-ping`. Raises AgentUnavailable."""
        await self._call(domain_name, "guest-ping", timeout=min(timeout, CALL_TIMEOUT))

    async def exec(self, domain_name: str, command: str, args: list[str], timeout_seconds: int) -> Completed:
        """Run a command in the guest (virt-probe's exec probes). Raises AgentUnavailable when it
        could not be run or did not end within `timeout_seconds`."""
        connection = self._ready(domain_name)
        try:
            return await guest_exec(connection, command, args, timeout_seconds, call_timeout=CALL_TIMEOUT)
        except AgentError as e:
            raise AgentUnavailable(agent_error(e)) from None
        except AgentGone as e:
            raise AgentUnavailable(libvirt_error(86, 10, f"Guest agent is not responding: {e}")) from None
        except GuestExecFailed as e:
            raise AgentUnavailable(str(e)) from None

    async def freeze(self, domain_name: str, unfreeze_timeout: float, budget: float) -> None:
        """virt-launcher's FreezeVMI (pkg/virt-launcher/virtwrap/storage/fsfreeze.go): nothing
        when already frozen, else `guest-fsfreeze-freeze`, and a thaw after `unfreeze_timeout`
        seconds unless thawed before (0: none). Raises AgentUnavailable."""
        if await self._freeze_status(domain_name) == "frozen":
            return
        await self._call(domain_name, "guest-fsfreeze-freeze", timeout=max(CALL_TIMEOUT, budget))
        self._cancel_thaw()
        if unfreeze_timeout > 0:
            self._thaw_timer = self._runner.later(unfreeze_timeout, "safety unfreeze",
                                                  lambda: self._safety_thaw(domain_name, unfreeze_timeout))
        await self._freeze_status(domain_name)

    async def thaw(self, domain_name: str) -> None:
        """virt-launcher's UnfreezeVMI: nothing when thawed, else `guest-fsfreeze-thaw`."""
        self._cancel_thaw()
        with contextlib.suppress(AgentUnavailable):
            if await self._freeze_status(domain_name) == "thawed":
                return
        await self._call(domain_name, "guest-fsfreeze-thaw")
        with contextlib.suppress(AgentUnavailable):
            await self._freeze_status(domain_name)

    async def _freeze_status(self, domain_name: str) -> str:
        try:
            status = info.fs_freeze_status(await self._call(domain_name, "guest-fsfreeze-status"))
        except ValueError as e:
            raise AgentUnavailable(f"failed to parse the guest's freeze status: {e}") from None
        if status != self.data.fs_freeze_status:
            self.data = replace(self.data, fs_freeze_status=status)
            self._show()
        return status

    async def _safety_thaw(self, domain_name: str, after: float) -> None:
        self._thaw_timer = None
        log.warning("Unfreeze was not called for vmi %s for more then %gs, initiating unfreeze", domain_name, after)
        try:
            await self.thaw(domain_name)
        except AgentUnavailable as e:
            log.error("the safety unfreeze failed: %s", e)

    def _cancel_thaw(self) -> None:
        if self._thaw_timer is not None:
            self._thaw_timer.cancel()
            self._thaw_timer = None

    # --- access credentials ----------------------------------------------------------------

    async def _propagate(self, connection: AgentConnection) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._record.wait_until(self._running)
            try:
                wanted = await asyncio.to_thread(read_credentials, self._spec.credentials)
            except OSError as e:
                self._report_credentials(False, str(e))
                await asyncio.sleep(CREDENTIALS_CHECK)
                continue
            previous = self._applied
            if previous is None or previous[0] != wanted or loop.time() - previous[1] >= CREDENTIALS_RESYNC:
                if await self._write_credentials(connection, wanted):
                    self._applied = (wanted, loop.time())
                else:
                    self._applied = None  # retried at the next check
            await asyncio.sleep(CREDENTIALS_CHECK)

    async def _write_credentials(self, connection: AgentConnection, wanted: Credentials) -> bool:
        keys, passwords = wanted
        failure = ""
        for user, user_keys in keys:
            try:
                # libvirt's virDomainAuthorizedSSHKeysSet without flags: the file becomes these keys
                await connection.call("guest-ssh-add-authorized-keys",
                                      {"username": user, "keys": list(user_keys), "reset": True}, timeout=CALL_TIMEOUT)
            except AgentError as e:
                failure = f"Error encountered writing ssh pub key access credentials for user [{user}]: {e}"
                log.error("%s", failure)
        for user, password in passwords:
            try:
                await connection.call("guest-set-user-password",
                                      {"username": user, "password": base64.b64encode(password.encode()).decode(),
                                       "crypted": False}, timeout=CALL_TIMEOUT)
            except AgentError as e:
                failure = f"Error encountered setting password for user [{user}]: {e}"
                log.error("%s", failure)
        self._report_credentials(not failure, failure)
        return not failure

    def _report_credentials(self, succeeded: bool, message: str) -> None:
        result = AccessCredentialResult(succeeded=succeeded, message=message)
        if result != self._credentials:
            self._credentials = result
            self._show()


Credentials = tuple[tuple[tuple[str, tuple[str, ...]], ...], tuple[tuple[str, str], ...]]


def read_credentials(credentials: tuple[AgentCredential, ...]) -> Credentials:
    """The SSH keys per user and the passwords per user the Secrets hold now, as virt-launcher
    reads them: every file of a Secret's directory but Kubernetes' own `..` entries; each line
    of an SSH Secret's files a key, each file of a password Secret a user's password (trimmed).
    Raises OSError naming the directory or file that cannot be read."""
    keys: dict[str, list[str]] = {}
    passwords: dict[str, str] = {}
    for cred in credentials:
        try:
            names = sorted(os.listdir(cred.secret_dir))
        except OSError as e:
            raise OSError(f"error occurred while reading the list of secrets files from the base directory "
                          f"{cred.secret_dir}: {e.strerror}") from None
        for name in names:
            path = os.path.join(cred.secret_dir, name)
            if name.startswith("..") or os.path.isdir(path):
                continue
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
            except OSError as e:
                raise OSError(f"error occurred while reading the access credential secret file [{path}]: "
                              f"{e.strerror}") from None
            if cred.kind == "ssh":
                found = [line.strip() for line in text.split("\n") if line.strip()]
                for user in cred.users:
                    keys.setdefault(user, []).extend(found)
            else:
                passwords[name] = text.strip()
    return tuple((user, tuple(k)) for user, k in sorted(keys.items())), tuple(sorted(passwords.items()))
