"""The command server: KubeVirt's `CmdInfo` + `Cmd` v1 on the launcher's unix socket (contract §2, §7.1).

Each servicer method only decodes, calls the domain manager and encodes (KubeVirt's cmd-server
habit). Failures go back in-band as `Response{success=false, message}` with a non-empty message;
only bugs surface as gRPC errors. Every RPC answers inside virt-handler's deadline: the budget
is the call's remaining time (or the contract's deadline when the client set none) minus a
margin, and the manager never overruns it (a Sync whose boot takes longer answers and lets
the boot finish in the background).

Implemented: Info, Ping, SyncVirtualMachine, GetDomain, PauseVirtualMachine,
UnpauseVirtualMachine, ShutdownVirtualMachine, KillVirtualMachine, DeleteVirtualMachine,
ResetVirtualMachine, SoftRebootVirtualMachine, SyncVirtualMachineCPUs, SyncVirtualMachineMemory,
GetDomainStats, GetDomainDirtyRateStats (page sampling,
`ch_launcher.dirtyrate`), GetQemuVersion ("cloud-hypervisor <version>"),
MigrateVirtualMachine, CancelVirtualMachineMigration, SyncMigrationTarget,
FinalizeVirtualMachineMigration (docs/migration.md), SignalTargetPodCleanup, and through the QEMU
guest agent on the VM's vsock (`manager.agent`): GetGuestInfo, GetUsers, GetFilesystems (what the
agent last told, as virt-launcher answers from its agent poller), GuestPing, Exec,
FreezeVirtualMachine and UnfreezeVirtualMachine (the Go launcher's texts when the agent is not
connected: `manager.view.no_guest_agent`). Every other RPC answers `success=false` naming the RPC
and why (`NOT_SERVED`).

Readiness (§7.1): listen on `<share-dir>/sockets/launcher-init-sock` (a stale file is removed
first), answer our own Ping, then rename the socket to `launcher-sock`. The listening socket is
this process's, so virt-handler's SO_PEERCRED finds the launcher (§7.2).

Contact: every RPC that arrives once the socket is ready (virt-handler's, not our own Ping)
calls `on_contact` first, so the launcher can connect to the notify pipe virt-handler injects
right after its first connection (§7.3) ahead of the first Domain event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

import grpc

from ch_launcher._proto import kubevirt_cmd_info_pb2 as info_pb2
from ch_launcher._proto import kubevirt_cmd_info_pb2_grpc as info_grpc
from ch_launcher._proto import kubevirt_cmd_v1_pb2 as pb
from ch_launcher._proto import kubevirt_cmd_v1_pb2_grpc as cmd_grpc
from ch_launcher.kubevirt.guest_info import filesystems_json, guest_info_json, users_json
from ch_launcher.lifecycle import Intent
from ch_launcher.manager import CommandFailed, DomainManager

if TYPE_CHECKING:  # imported when first needed: readiness must not wait for the VMI model
    from grpc.aio import ServicerContext as Context  # generic in (request, response) in the stubs only

    from ch_launcher.convert import LauncherOptions
    from ch_launcher.convert.topology import HostTopology
    from ch_launcher.kubevirt.vmi import VirtualMachineInstance

    VmiContext = Context[pb.VMIRequest, pb.Response]  # most Cmd RPCs: a VMI in, a Response out

log = logging.getLogger(__name__)
_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")

SUPPORTED_CMD_VERSIONS = [1]  # pkg/handler-launcher-com/cmd/v1/version.go: CmdVersion = 1
INIT_SOCKET = "launcher-init-sock"
READY_SOCKET = "launcher-sock"
INVALID_VMI = "No valid vmi object present in command server request"  # the Go launcher's text
SHORT, LONG = 5.0, 20.0  # virt-handler's shortTimeout / longTimeout (cmd-client/client.go)
FREEZE = 60.0  # FreezeVirtualMachine's deadline (contract §7.1)

_BACKEND = "the Cloud Hypervisor backend"
_NO_SEV = f"AMD SEV is not supported by {_BACKEND}"
_NO_BACKUP = f"backups (changed block tracking) are not supported by {_BACKEND}"

# RPC -> why it is not served. Each answers success=false (CmdServicer._refuse), never
# UNIMPLEMENTED, so virt-handler's error reads "command <Name> failed: "<RPC> is not supported ...: <why>"".
NOT_SERVED: dict[str, str] = {
    "HotplugHostDevices": f"hot-plugging host devices (SR-IOV interfaces added to a running VMI) "
                          f"is not supported by {_BACKEND}: they are passed at boot only",
    "VirtualMachineMemoryDump": "memory dumps are not supported: Cloud Hypervisor's vm.coredump "
                                "exists only in guest_debug builds",
    "GetSEVInfo": _NO_SEV,
    "GetLaunchMeasurement": _NO_SEV,
    "InjectLaunchSecret": _NO_SEV,
    "GetScreenshot": "Cloud Hypervisor has no graphics device (no VNC), so there is no screen to capture",
    "BackupVirtualMachine": _NO_BACKUP,
    "RedefineCheckpoint": _NO_BACKUP,
    "GetVMStats": "the VMStatsCollector call is not served; GetDomainStats serves the metrics",
}

# Cmd RPC -> the intent it asks the manager for (each has virt-handler's 20 s deadline, LONG)
COMMANDS: dict[str, Intent] = {
    "SyncVirtualMachine": Intent.SYNC,
    "PauseVirtualMachine": Intent.PAUSE,
    "UnpauseVirtualMachine": Intent.UNPAUSE,
    "ShutdownVirtualMachine": Intent.SHUTDOWN,
    "KillVirtualMachine": Intent.KILL,
    "DeleteVirtualMachine": Intent.DELETE,
    "ResetVirtualMachine": Intent.RESET,
    "SoftRebootVirtualMachine": Intent.SOFT_REBOOT,
}


class Deadline(Protocol):
    """What `budget` reads of a servicer context."""

    def time_remaining(self) -> float | None: ...


def budget(context: Deadline, default: float) -> float:
    """Seconds a handler may take: the call's remaining time (the contract's deadline if the
    client set none), less a margin for encoding and transport."""
    remaining = context.time_remaining()
    limit = default if remaining is None else min(remaining, default)
    return max(0.05, limit - min(1.5, 0.1 * limit + 0.2))


class _CarriesVmi(Protocol):
    """A Cmd request with a VMI (VMIRequest, FreezeRequest, MigrationRequest)."""

    @property
    def vmi(self) -> pb.VMI: ...


def failure(message: str) -> pb.Response:
    return pb.Response(success=False, message=message or "failed (no detail)")


def launcher_options(options: pb.VirtualMachineOptions) -> LauncherOptions:
    """The parts of `VirtualMachineOptions` translation uses."""
    from ch_launcher.convert import LauncherOptions, SMBios

    sm = options.VirtualMachineSMBios
    return LauncherOptions(
        smbios=SMBios(manufacturer=sm.manufacturer, product=sm.product, version=sm.version, sku=sm.sku,
                      family=sm.family),
        interface_domain_attachment=dict(options.interfaceDomainAttachment),
        preallocated_volumes=tuple(options.PreallocatedVolumes),
        serial_console_log_disabled=options.clusterConfig.SerialConsoleLogDisabled,
        free_page_reporting_disabled=options.clusterConfig.FreePageReportingDisabled,
        topology=host_topology(options.topology) if options.HasField("topology") else None,
    )


def host_topology(topology: pb.Topology) -> HostTopology | None:
    """virt-handler's node topology (cells, their CPUs with core siblings, distances); None
    when it has no cell (then the launcher reads the host's own)."""
    from ch_launcher.convert.topology import HostCell, HostCpu, HostTopology

    cells = tuple(
        HostCell(id=cell.id, cpus=tuple(HostCpu(cpu.id, tuple(cpu.siblings)) for cpu in cell.cpus),
                 distances=tuple((d.id, d.value) for d in cell.distances))
        for cell in topology.numa_cells
    )
    return HostTopology(cells) if cells else None


def decode_vmi(payload: bytes) -> VirtualMachineInstance:
    """The VMI of a request; raises CommandFailed with the Go launcher's text (details logged)."""
    from ch_launcher.kubevirt.vmi import InvalidVMI, parse_vmi

    try:
        return parse_vmi(payload)
    except InvalidVMI as e:
        log.error("%s: %s", INVALID_VMI, e)
        raise CommandFailed(INVALID_VMI) from None


class CmdInfoServicer(info_grpc.CmdInfoServicer):
    async def Info(self, request: info_pb2.CmdInfoRequest,  # noqa: N802
                   context: Context[info_pb2.CmdInfoRequest, info_pb2.CmdInfoResponse]) -> info_pb2.CmdInfoResponse:
        return info_pb2.CmdInfoResponse(supportedCmdVersions=SUPPORTED_CMD_VERSIONS)


class CmdServicer(cmd_grpc.CmdServicer):
    """kubevirt.cmd.v1.Cmd over a `DomainManager`."""

    def __init__(self, manager: DomainManager, *, on_early_exit: Callable[[], None] | None = None) -> None:
        self._manager = manager
        self._on_early_exit = on_early_exit
        self._synced = False

    async def _command(self, rpc: str, request: pb.VMIRequest, context: Deadline) -> pb.Response:
        intent = COMMANDS[rpc]
        started = time.monotonic()
        if intent is Intent.SYNC and not self._synced:
            self._synced = True
            log.info("first SyncVirtualMachine received")  # bench/cluster.py's timeline
        try:
            vmi = decode_vmi(request.vmi.vmiJson)
            options = launcher_options(request.options) if intent is Intent.SYNC else None
            done = await self._manager.execute(intent, vmi, options, budget=budget(context, LONG))
        except CommandFailed as e:
            log.warning("%s failed: %s", rpc, e)
            return failure(str(e))
        log.info("%s: %s (%.0f ms)", rpc, done, (time.monotonic() - started) * 1000,
                 extra={"v": 2 if intent is not Intent.SYNC else 3})
        return pb.Response(success=True)

    async def SyncVirtualMachine(self, request: pb.VMIRequest, context: VmiContext) -> pb.Response:  # noqa: N802
        return await self._command("SyncVirtualMachine", request, context)

    async def PauseVirtualMachine(self, request: pb.VMIRequest, context: VmiContext) -> pb.Response:  # noqa: N802
        return await self._command("PauseVirtualMachine", request, context)

    async def UnpauseVirtualMachine(self, request: pb.VMIRequest, context: VmiContext) -> pb.Response:  # noqa: N802
        return await self._command("UnpauseVirtualMachine", request, context)

    async def ShutdownVirtualMachine(self, request: pb.VMIRequest, context: VmiContext) -> pb.Response:  # noqa: N802
        return await self._command("ShutdownVirtualMachine", request, context)

    async def KillVirtualMachine(self, request: pb.VMIRequest, context: VmiContext) -> pb.Response:  # noqa: N802
        return await self._command("KillVirtualMachine", request, context)

    async def DeleteVirtualMachine(self, request: pb.VMIRequest, context: VmiContext) -> pb.Response:  # noqa: N802
        return await self._command("DeleteVirtualMachine", request, context)

    async def ResetVirtualMachine(self, request: pb.VMIRequest, context: VmiContext) -> pb.Response:  # noqa: N802
        return await self._command("ResetVirtualMachine", request, context)

    async def SoftRebootVirtualMachine(self, request: pb.VMIRequest, context: VmiContext) -> pb.Response:  # noqa: N802
        return await self._command("SoftRebootVirtualMachine", request, context)

    async def _vmi_call(self, rpc: str, request: _CarriesVmi, context: Deadline,
                        call: Callable[[VirtualMachineInstance, float], Awaitable[str]]) -> pb.Response:
        """An RPC that carries a VMI and is served by one manager call, `call(vmi, budget)`: a
        refusal (CommandFailed) is a failed Response naming the RPC, as virt-handler logs it with
        its warning event; a malformed VMI is refused the same way (decode_vmi)."""
        try:
            vmi = decode_vmi(request.vmi.vmiJson)
            done = await call(vmi, budget(context, LONG))
        except CommandFailed as e:
            log.warning("%s failed: %s", rpc, e)
            return failure(f"{rpc}: {e}")
        log.info("%s: %s", rpc, done)
        return pb.Response(success=True)

    async def _resize(self, rpc: str, what: str, request: pb.VMIRequest, context: Deadline) -> pb.Response:
        return await self._vmi_call(
            rpc, request, context,
            lambda vmi, b: self._manager.resize(what, vmi, launcher_options(request.options), budget=b))

    async def SyncVirtualMachineCPUs(self, request: pb.VMIRequest, context: VmiContext) -> pb.Response:  # noqa: N802
        return await self._resize("SyncVirtualMachineCPUs", "vcpus", request, context)

    async def SyncVirtualMachineMemory(self, request: pb.VMIRequest, context: VmiContext) -> pb.Response:  # noqa: N802
        return await self._resize("SyncVirtualMachineMemory", "memory", request, context)

    async def _freezing(self, rpc: str, request: _CarriesVmi, context: Deadline, deadline: float,
                        call: Callable[[VirtualMachineInstance, float], Awaitable[str]]) -> pb.Response:
        """Freeze/Unfreeze through the guest agent; a failure answers the Go launcher's text
        (libvirt's error), which virt-handler passes on ("Failed to freeze vmi")."""
        try:
            vmi = decode_vmi(request.vmi.vmiJson)
            done = await call(vmi, budget(context, deadline))
        except CommandFailed as e:
            log.error("%s failed: %s", rpc, e)
            return failure(str(e))
        log.info("%s: %s", rpc, done)
        return pb.Response(success=True)

    async def FreezeVirtualMachine(self, request: pb.FreezeRequest,  # noqa: N802
                                   context: Context[pb.FreezeRequest, pb.Response]) -> pb.Response:
        return await self._freezing("FreezeVirtualMachine", request, context, FREEZE,
                                    lambda vmi, b: self._manager.freeze(vmi, float(request.unfreezeTimeoutSeconds),
                                                                        budget=b))

    async def UnfreezeVirtualMachine(self, request: pb.VMIRequest, context: VmiContext) -> pb.Response:  # noqa: N802
        return await self._freezing("UnfreezeVirtualMachine", request, context, LONG,
                                    lambda vmi, b: self._manager.unfreeze(vmi, budget=b))

    async def Ping(self, request: pb.EmptyRequest, context: Context[pb.EmptyRequest, pb.Response]) -> pb.Response:  # noqa: N802
        return pb.Response(success=True)

    async def GetDomain(self, request: pb.EmptyRequest,  # noqa: N802
                        context: Context[pb.EmptyRequest, pb.DomainResponse]) -> pb.DomainResponse:
        return pb.DomainResponse(response=pb.Response(success=True), domain=self._manager.domain_json)

    async def GetDomainStats(self, request: pb.EmptyRequest,  # noqa: N802
                             context: Context[pb.EmptyRequest, pb.DomainStatsResponse]) -> pb.DomainStatsResponse:
        stats = await self._manager.domain_stats(timeout=budget(context, SHORT) * 0.8)
        return pb.DomainStatsResponse(response=pb.Response(success=True), domainStats=stats)

    async def GetDomainDirtyRateStats(self, request: pb.EmptyRequest,  # noqa: N802
                                      context: Context[pb.EmptyRequest, pb.DirtyRateStatsResponse],
                                      ) -> pb.DirtyRateStatsResponse:
        # virt-handler's dirty-rate collector calls this for every Running VMI on every scrape
        # and logs an error for each failure: measured by page sampling (ch_launcher.dirtyrate).
        try:
            limit = budget(context, LONG)
            rate = await asyncio.wait_for(self._manager.dirty_rate(timeout=limit / 2), limit)
        except CommandFailed as e:
            log.info("GetDomainDirtyRateStats: %s", e)
            return pb.DirtyRateStatsResponse(response=failure(str(e)))
        except TimeoutError:
            return pb.DirtyRateStatsResponse(response=failure("the dirty-rate measurement did not finish in time"))
        return pb.DirtyRateStatsResponse(response=pb.Response(success=True), dirtyRateMbs=rate)

    # What the guest agent last told (empty lists before it is reached); these never fail:
    # GetFilesystems must succeed, or virt-handler drops the VMI's metrics (contract §12).
    async def GetFilesystems(self, request: pb.EmptyRequest,  # noqa: N802
                             context: Context[pb.EmptyRequest, pb.GuestFilesystemsResponse],
                             ) -> pb.GuestFilesystemsResponse:
        return pb.GuestFilesystemsResponse(response=pb.Response(success=True),
                                           guestFilesystemsResponse=filesystems_json(self._manager.guest_agent_data()))

    async def GetGuestInfo(self, request: pb.EmptyRequest,  # noqa: N802
                           context: Context[pb.EmptyRequest, pb.GuestInfoResponse]) -> pb.GuestInfoResponse:
        return pb.GuestInfoResponse(response=pb.Response(success=True),
                                    guestInfoResponse=guest_info_json(self._manager.guest_agent_data()))

    async def GetUsers(self, request: pb.EmptyRequest,  # noqa: N802
                       context: Context[pb.EmptyRequest, pb.GuestUserListResponse]) -> pb.GuestUserListResponse:
        return pb.GuestUserListResponse(response=pb.Response(success=True),
                                        guestUserListResponse=users_json(self._manager.guest_agent_data()))

    async def Exec(self, request: pb.ExecRequest,  # noqa: N802
                   context: Context[pb.ExecRequest, pb.ExecResponse]) -> pb.ExecResponse:
        # virt-probe exits with the response's exitCode even when the call failed (cmd/virt-probe,
        # cmd-client Exec@d923fdb815cd), so a failure carries -1, as virt-probe's own default for
        # a call that returned nothing: the probe fails.
        try:
            code, out = await asyncio.wait_for(self._manager.guest_exec(
                request.domainName, request.Command, list(request.Args), max(1, request.timeoutSeconds)),
                budget(context, request.timeoutSeconds + SHORT))
        except CommandFailed as e:
            log.warning("Exec failed: %s", e)
            return pb.ExecResponse(response=failure(str(e)), exitCode=-1)
        except TimeoutError:
            return pb.ExecResponse(response=failure(f"the command did not end within {request.timeoutSeconds} s"),
                                   exitCode=-1)
        return pb.ExecResponse(response=pb.Response(success=True), exitCode=code, stdOut=out)

    async def GuestPing(self, request: pb.GuestPingRequest,  # noqa: N802
                        context: Context[pb.GuestPingRequest, pb.GuestPingResponse]) -> pb.GuestPingResponse:
        try:
            await self._manager.guest_ping(request.domainName,
                                           budget(context, max(1, request.timeoutSeconds) + SHORT))
        except CommandFailed as e:
            log.warning("GuestAgentPing probe failed: %s", e)
            return pb.GuestPingResponse(response=failure(str(e)))
        return pb.GuestPingResponse(response=pb.Response(success=True))

    async def GetQemuVersion(self, request: pb.EmptyRequest,  # noqa: N802
                             context: Context[pb.EmptyRequest, pb.QemuVersionResponse]) -> pb.QemuVersionResponse:
        # Honest: the hypervisor is Cloud Hypervisor, so say its version, not a QEMU one.
        version = self._manager.vmm_version
        if not version:
            return pb.QemuVersionResponse(response=failure(
                "GetQemuVersion: the Cloud Hypervisor version is not known yet: no VMM has answered"))
        return pb.QemuVersionResponse(response=pb.Response(success=True), version=f"cloud-hypervisor {version}")

    async def MigrateVirtualMachine(self, request: pb.MigrationRequest,  # noqa: N802
                                    context: Context[pb.MigrationRequest, pb.Response]) -> pb.Response:
        return await self._vmi_call("MigrateVirtualMachine", request, context,
                                    lambda vmi, b: self._manager.migrate(vmi, request.options, budget=b))

    async def CancelVirtualMachineMigration(self, request: pb.VMIRequest, context: VmiContext) -> pb.Response:  # noqa: N802
        return await self._vmi_call("CancelVirtualMachineMigration", request, context,
                                    lambda vmi, b: self._manager.cancel_migration(vmi, budget=b))

    async def SyncMigrationTarget(self, request: pb.VMIRequest, context: VmiContext) -> pb.Response:  # noqa: N802
        return await self._vmi_call(
            "SyncMigrationTarget", request, context,
            lambda vmi, b: self._manager.prepare_migration_target(vmi, launcher_options(request.options), budget=b))

    async def FinalizeVirtualMachineMigration(self, request: pb.VMIRequest, context: VmiContext) -> pb.Response:  # noqa: N802
        methods = {name: entry.Method for name, entry in request.options.interfaceMigration.items()}
        return await self._vmi_call("FinalizeVirtualMachineMigration", request, context,
                                    lambda vmi, b: self._manager.finalize_migration(vmi, methods, budget=b))

    async def SignalTargetPodCleanup(self, request: pb.VMIRequest, context: VmiContext) -> pb.Response:  # noqa: N802
        # For a migration target pod (kubevirt cmd-server/server.go@d923fdb815cd): when POD_NAME is
        # the VMI's migration target pod, the launcher exits early (its VMM with it), in any phase.
        try:
            vmi = decode_vmi(request.vmi.vmiJson)
        except CommandFailed as e:
            return failure(str(e))
        target = vmi.status.migrationState.targetPod if vmi.status.migrationState else ""
        pod = os.environ.get("POD_NAME", "")
        if pod and target == pod and self._on_early_exit is not None:
            log.info("SignalTargetPodCleanup: this pod (%s) is the migration target; exiting early", pod)
            self._on_early_exit()
        return pb.Response(success=True)

    # The RPCs of NOT_SERVED, each refused in-band in its own response type.
    def _refuse(self, rpc: str) -> pb.Response:
        why = NOT_SERVED[rpc]
        log.info("%s refused: %s", rpc, why)
        return failure(f"{rpc} is not supported by {_BACKEND}: {why}")

    async def HotplugHostDevices(self, request: pb.VMIRequest, context: VmiContext) -> pb.Response:  # noqa: N802
        return self._refuse("HotplugHostDevices")

    async def VirtualMachineMemoryDump(self, request: pb.MemoryDumpRequest,  # noqa: N802
                                       context: Context[pb.MemoryDumpRequest, pb.Response]) -> pb.Response:
        return self._refuse("VirtualMachineMemoryDump")

    async def GetSEVInfo(self, request: pb.EmptyRequest,  # noqa: N802
                         context: Context[pb.EmptyRequest, pb.SEVInfoResponse]) -> pb.SEVInfoResponse:
        return pb.SEVInfoResponse(response=self._refuse("GetSEVInfo"))

    async def GetLaunchMeasurement(self, request: pb.VMIRequest,  # noqa: N802
                                   context: Context[pb.VMIRequest, pb.LaunchMeasurementResponse],
                                   ) -> pb.LaunchMeasurementResponse:
        return pb.LaunchMeasurementResponse(response=self._refuse("GetLaunchMeasurement"))

    async def InjectLaunchSecret(self, request: pb.InjectLaunchSecretRequest,  # noqa: N802
                                 context: Context[pb.InjectLaunchSecretRequest, pb.Response]) -> pb.Response:
        return self._refuse("InjectLaunchSecret")

    async def GetScreenshot(self, request: pb.VMIRequest,  # noqa: N802
                            context: Context[pb.VMIRequest, pb.ScreenshotResponse]) -> pb.ScreenshotResponse:
        return pb.ScreenshotResponse(response=self._refuse("GetScreenshot"))

    async def BackupVirtualMachine(self, request: pb.BackupRequest,  # noqa: N802
                                   context: Context[pb.BackupRequest, pb.Response]) -> pb.Response:
        return self._refuse("BackupVirtualMachine")

    async def RedefineCheckpoint(self, request: pb.RedefineCheckpointRequest,  # noqa: N802
                                 context: Context[pb.RedefineCheckpointRequest, pb.RedefineCheckpointResponse],
                                 ) -> pb.RedefineCheckpointResponse:
        return pb.RedefineCheckpointResponse(response=self._refuse("RedefineCheckpoint"))

    async def GetVMStats(self, request: pb.VMStatsRequest,  # noqa: N802
                         context: Context[pb.VMStatsRequest, pb.VMStatsResponse]) -> pb.VMStatsResponse:
        return pb.VMStatsResponse(response=self._refuse("GetVMStats"))


class _Contact(grpc.aio.ServerInterceptor):
    """Calls `callback` before each RPC once `armed` (a failing callback is logged, never fails the RPC)."""

    def __init__(self, callback: Callable[[], None] | None) -> None:
        self.callback = callback
        self.armed = False
        self.called = False

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[_Req, _Resp] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[_Req, _Resp] | None:
        if self.armed and not self.called:
            self.called = True
            log.info("virt-handler's first call: %s", handler_call_details.method)  # bench/cluster.py's timeline
        if self.armed and self.callback is not None:
            try:
                self.callback()
            except Exception:  # an observer must not break the command server
                log.exception("the contact callback failed")
        return await continuation(handler_call_details)


class LauncherServer:
    """The gRPC server on the command socket. `await start()` returns once `launcher-sock`
    exists (ready); `await stop()` ends it. `on_contact`: see the module doc."""

    def __init__(self, manager: DomainManager, sockets_dir: str, *,
                 on_early_exit: Callable[[], None] | None = None,
                 on_contact: Callable[[], None] | None = None) -> None:
        self.sockets_dir = sockets_dir
        self.init_socket = os.path.join(sockets_dir, INIT_SOCKET)
        self.ready_socket = os.path.join(sockets_dir, READY_SOCKET)
        self._contact = _Contact(on_contact)
        self._server = grpc.aio.server(options=[("grpc.max_receive_message_length", 4 << 20)],
                                       interceptors=[self._contact])
        info_grpc.add_CmdInfoServicer_to_server(CmdInfoServicer(), self._server)
        cmd_grpc.add_CmdServicer_to_server(CmdServicer(manager, on_early_exit=on_early_exit), self._server)

    async def start(self, ready_timeout: float = 15.0) -> None:
        """Listen, self-Ping (up to `ready_timeout` s, as the Go launcher), then rename to
        `launcher-sock`. Raises RuntimeError with the reason when any of it fails."""
        os.makedirs(self.sockets_dir, exist_ok=True)
        if len(self.init_socket.encode()) > 107:
            raise RuntimeError(f"command socket path {self.init_socket} is longer than 107 bytes")
        for stale in (self.init_socket, self.ready_socket):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(stale)
        if self._server.add_insecure_port(f"unix:{self.init_socket}") == 0:
            raise RuntimeError(f"cannot listen on {self.init_socket}")
        await self._server.start()
        await self._self_ping(ready_timeout)
        self._contact.armed = True  # whoever calls from now on found launcher-sock
        os.rename(self.init_socket, self.ready_socket)
        log.info("command server ready on %s", self.ready_socket)

    async def _self_ping(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        async with grpc.aio.insecure_channel(f"unix:{self.init_socket}") as channel:
            stub = cmd_grpc.CmdStub(channel)
            while True:
                try:
                    reply = await stub.Ping(pb.EmptyRequest(), timeout=max(0.1, min(1.0, deadline - loop.time())))
                    if reply.success:
                        return
                except grpc.aio.AioRpcError as e:
                    if loop.time() >= deadline:
                        raise RuntimeError(f"the command server did not answer its own Ping on "
                                           f"{self.init_socket} within {timeout:g} s: {e.details()}") from None
                await asyncio.sleep(0.05)

    async def stop(self, grace: float | None = 1.0) -> None:
        await self._server.stop(grace)
        for path in (self.ready_socket, self.init_socket):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
