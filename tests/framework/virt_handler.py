"""virt-handler's two sides, as the demo, the functional tests and the benchmark play them: a
Notify server that records every event (`NotifyRecorder`) and a Cmd client with virt-handler's
deadlines (`CmdClient`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc

from ch_launcher._proto import kubevirt_cmd_info_pb2 as cmd_info_pb2
from ch_launcher._proto import kubevirt_cmd_info_pb2_grpc as cmd_info_grpc
from ch_launcher._proto import kubevirt_cmd_v1_pb2 as cmd_pb2
from ch_launcher._proto import kubevirt_cmd_v1_pb2_grpc as cmd_grpc
from ch_launcher._proto import kubevirt_notify_info_pb2 as notify_info_pb2
from ch_launcher._proto import kubevirt_notify_info_pb2_grpc as notify_info_grpc
from ch_launcher._proto import kubevirt_notify_v1_pb2 as notify_pb2
from ch_launcher._proto import kubevirt_notify_v1_pb2_grpc as notify_grpc

T = TypeVar("T")

# virt-handler's deadlines per RPC (pkg/virt-handler/cmd-client/client.go: 5 s / 20 s / 60 s)
DEADLINES: dict[str, float] = dict.fromkeys((
    "GetDomain", "GetDomainStats", "GetGuestInfo", "GetUsers", "GetFilesystems", "Ping", "GetQemuVersion",
    "GetSEVInfo", "GetLaunchMeasurement", "GetScreenshot", "GetVMStats"), 5.0)
DEADLINES["FreezeVirtualMachine"] = 60.0


@dataclass
class DomainEvent:
    """One HandleDomainEvent call as virt-handler received it."""

    event_type: str
    domain: dict[str, Any] | None
    at: float = field(default_factory=time.monotonic)

    @property
    def status(self) -> str:
        return str((self.domain or {}).get("Status", {}).get("Status", ""))

    @property
    def reason(self) -> str:
        return str((self.domain or {}).get("Status", {}).get("Reason", ""))

    @property
    def deleted(self) -> bool:
        return bool((self.domain or {}).get("ObjectMeta", {}).get("deletionTimestamp"))

    @property
    def grace(self) -> dict[str, Any]:
        meta = (self.domain or {}).get("Spec", {}).get("Metadata", {}).get("KubeVirt", {})
        return meta.get("GracePeriod") or {}

    def __str__(self) -> str:
        what = "deleted" if self.deleted else f"{self.status}/{self.reason}"
        notes = [note for key, note in (("DeletionTimestamp", "graceful shutdown signalled"),
                                        ("MarkedForGracefulShutdown", "marked for graceful shutdown"))
                 if self.grace.get(key)]
        return f"{self.event_type} {what}" + (f" ({', '.join(notes)})" if notes else "")


class NotifyRecorder:
    """A Notify server (NotifyInfo + Notify v1) on a unix socket that records every event, as
    virt-handler's notify server does. `on_event` is called for each Domain event."""

    def __init__(self, socket_path: str | os.PathLike[str],
                 on_event: Callable[[DomainEvent], None] | None = None) -> None:
        self.socket_path = str(socket_path)
        self.events: list[DomainEvent] = []
        self.k8s_events: list[dict[str, Any]] = []
        self.on_event = on_event
        self.answer_success = True
        self.info_calls = 0  # NotifyInfo.Info: one per connection the launcher negotiates
        self._server: grpc.aio.Server | None = None
        self._changed = asyncio.Event()

    async def start(self) -> NotifyRecorder:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        server = grpc.aio.server()
        recorder = self

        class Info(notify_info_grpc.NotifyInfoServicer):
            async def Info(self, request: notify_info_pb2.NotifyInfoRequest,  # noqa: N802
                           context: grpc.aio.ServicerContext[Any, Any]) -> notify_info_pb2.NotifyInfoResponse:
                recorder.info_calls += 1
                recorder._bump()
                return notify_info_pb2.NotifyInfoResponse(supportedNotifyVersions=[1])

        class Notify(notify_grpc.NotifyServicer):
            async def HandleDomainEvent(self, request: notify_pb2.DomainEventRequest,  # noqa: N802
                                        context: grpc.aio.ServicerContext[Any, Any]) -> notify_pb2.Response:
                return recorder._domain_event(request)

            async def HandleK8sEvent(self, request: notify_pb2.K8sEventRequest,  # noqa: N802
                                     context: grpc.aio.ServicerContext[Any, Any]) -> notify_pb2.Response:
                recorder.k8s_events.append(json.loads(request.eventJSON or b"{}"))
                recorder._bump()
                return notify_pb2.Response(success=True)

        notify_info_grpc.add_NotifyInfoServicer_to_server(Info(), server)
        notify_grpc.add_NotifyServicer_to_server(Notify(), server)
        server.add_insecure_port(f"unix:{self.socket_path}")
        await server.start()
        self._server = server
        return self

    def _domain_event(self, request: notify_pb2.DomainEventRequest) -> notify_pb2.Response:
        try:
            domain = json.loads(request.domainJSON) if request.domainJSON else None
        except ValueError as e:
            return notify_pb2.Response(success=False, message=f"cannot decode the domain: {e}")
        if not self.answer_success:
            return notify_pb2.Response(success=False, message="refused by the test")
        event = DomainEvent(request.eventType, domain)
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)
        self._bump()
        return notify_pb2.Response(success=True)

    def _bump(self) -> None:
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(0)
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)

    async def wait_for(self, predicate: Callable[[DomainEvent], bool], timeout: float = 10.0,
                       *, since: int = 0) -> DomainEvent:
        """The first recorded event (index >= `since`) matching `predicate`; TimeoutError
        listing what arrived otherwise."""
        return await self._first(lambda: self.events[since:], predicate, timeout, "domain event")

    async def _first(self, recorded: Callable[[], list[T]], predicate: Callable[[T], bool], timeout: float,
                     what: str) -> T:
        """The first of `recorded()` matching `predicate`, waiting for new events (no polling)."""
        deadline = time.monotonic() + timeout
        while True:
            for item in recorded():
                if predicate(item):
                    return item
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no matching {what} within {timeout} s; got: {[str(e) for e in recorded()]}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)

    async def wait_for_status(self, status: str, reason: str | None = None, timeout: float = 10.0,
                              *, since: int = 0) -> DomainEvent:
        return await self.wait_for(lambda e: e.status == status and not e.deleted
                                   and (reason is None or e.reason == reason), timeout, since=since)

    async def wait_for_deleted(self, timeout: float = 10.0, *, since: int = 0) -> DomainEvent:
        return await self.wait_for(lambda e: e.deleted, timeout, since=since)

    async def wait_for_negotiation(self, timeout: float = 10.0) -> int:
        """Until a launcher has negotiated (NotifyInfo.Info); the number of negotiations."""
        return await self._first(lambda: [self.info_calls] if self.info_calls else [], bool, timeout,
                                 "notify negotiation")

    async def wait_for_k8s_event(self, reason: str, timeout: float = 10.0) -> dict[str, Any]:
        return await self._first(lambda: self.k8s_events, lambda e: e.get("reason") == reason, timeout,
                                 f"K8s event {reason!r}")


# --- virt-handler's Cmd side --------------------------------------------------------------------


class CommandError(Exception):
    """A Cmd RPC answered success=false; `str()` is its message."""


class CmdClient:
    """virt-handler's command client: one channel to `launcher-sock`, virt-handler's deadlines."""

    def __init__(self, socket_path: str | os.PathLike[str]) -> None:
        self.socket_path = str(socket_path)
        self._channel = grpc.aio.insecure_channel(f"unix:{self.socket_path}")
        self.cmd = cmd_grpc.CmdStub(self._channel)
        self.info_stub = cmd_info_grpc.CmdInfoStub(self._channel)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> CmdClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def call(self, rpc: str, request: Any = None, *, timeout: float | None = None) -> Any:
        """Call `rpc` with virt-handler's deadline for it; the raw response."""
        method = getattr(self.cmd, rpc)
        if request is None:
            request = cmd_pb2.EmptyRequest()
        return await method(request, timeout=timeout or DEADLINES.get(rpc, 20.0))

    async def info(self) -> list[int]:
        reply = await self.info_stub.Info(cmd_info_pb2.CmdInfoRequest(), timeout=5.0)
        return list(reply.supportedCmdVersions)

    async def vmi_command(self, rpc: str, vmi: Mapping[str, Any] | bytes,
                          options: cmd_pb2.VirtualMachineOptions | None = None, *, check: bool = True) -> Any:
        payload = vmi if isinstance(vmi, bytes) else json.dumps(vmi).encode()
        request = cmd_pb2.VMIRequest(vmi=cmd_pb2.VMI(vmiJson=payload),
                                     options=options or cmd_pb2.VirtualMachineOptions())
        reply = await self.call(rpc, request)
        if check and not reply.success:
            raise CommandError(reply.message)
        return reply

    async def sync(self, vmi: Mapping[str, Any] | bytes, options: cmd_pb2.VirtualMachineOptions | None = None,
                   *, check: bool = True) -> Any:
        return await self.vmi_command("SyncVirtualMachine", vmi, options, check=check)

    async def get_domain(self) -> dict[str, Any] | None:
        reply = await self.call("GetDomain")
        if not reply.response.success:
            raise CommandError(reply.response.message)
        return json.loads(reply.domain) if reply.domain else None

    async def get_domain_stats(self) -> dict[str, Any] | None:
        reply = await self.call("GetDomainStats")
        if not reply.response.success:
            raise CommandError(reply.response.message)
        return json.loads(reply.domainStats) if reply.domainStats else None
