"""Notify client against a real grpc.aio Notify server on a real unix socket (virt-handler's role)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import grpc
import grpc.aio
import pytest

from ch_launcher._proto import kubevirt_notify_info_pb2 as info_pb2
from ch_launcher._proto import kubevirt_notify_info_pb2_grpc as info_grpc
from ch_launcher._proto import kubevirt_notify_v1_pb2 as notify_pb2
from ch_launcher._proto import kubevirt_notify_v1_pb2_grpc as notify_grpc
from ch_launcher.notify import K8S_MAX_REFUSALS, Notifier, NotifyError, highest_common_version
from tests import polling


def run(fn: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(asyncio.wait_for(fn(*args, **kwargs), 60))
    return wrapper


@pytest.fixture
def sock() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="kc", dir="/tmp")  # unix socket paths must stay short
    yield os.path.join(d, "domain-notify-pipe.sock")
    shutil.rmtree(d, ignore_errors=True)


class FakeVirtHandler(info_grpc.NotifyInfoServicer, notify_grpc.NotifyServicer):
    """virt-handler's notify server as `pkg/virt-handler/notify-server/server.go` behaves:
    Info answers its versions; HandleDomainEvent decodes the JSON (garbage -> success=false);
    HandleK8sEvent answers "VMI not found" unless the involved VMI is known."""

    def __init__(self, path: str, *, versions: tuple[int, ...] = (1,), refuse_domain: int = 0,
                 known_vmis: set[tuple[str, str, str]] | None = None) -> None:
        self.path = path
        self.versions = versions
        self.refuse_domain = refuse_domain  # answer success=false this many times first
        self.known_vmis = known_vmis if known_vmis is not None else set()
        self.domain_events: list[tuple[str, dict[str, Any]]] = []
        self.k8s_events: list[dict[str, Any]] = []
        self.k8s_calls = 0
        self.info_calls = 0
        self.domain_calls = 0
        self.raw_domain_requests: list[tuple[str, bytes, bytes]] = []
        self.server: grpc.aio.Server | None = None

    async def start(self) -> FakeVirtHandler:
        self.server = grpc.aio.server()
        info_grpc.add_NotifyInfoServicer_to_server(self, self.server)
        notify_grpc.add_NotifyServicer_to_server(self, self.server)
        self.server.add_insecure_port(f"unix:{self.path}")
        await self.server.start()
        return self

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(None)
            self.server = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    async def Info(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.info_calls += 1
        return info_pb2.NotifyInfoResponse(supportedNotifyVersions=list(self.versions))

    async def HandleDomainEvent(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.domain_calls += 1
        self.raw_domain_requests.append((request.eventType, bytes(request.domainJSON), bytes(request.statusJSON)))
        if self.refuse_domain > 0:
            self.refuse_domain -= 1
            return notify_pb2.Response(success=False, message="domain informer is busy")
        try:
            domain = json.loads(request.domainJSON) if request.domainJSON else {}
        except ValueError as e:
            return notify_pb2.Response(success=False, message=str(e))
        self.domain_events.append((request.eventType, domain))
        return notify_pb2.Response(success=True)

    async def HandleK8sEvent(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.k8s_calls += 1
        event = json.loads(request.eventJSON)
        obj = event["involvedObject"]
        if (obj["namespace"], obj["name"], obj["uid"]) not in self.known_vmis:
            return notify_pb2.Response(success=False, message="VMI not found")
        self.k8s_events.append(event)
        return notify_pb2.Response(success=True)


def dom(n: int) -> str:
    return json.dumps({"ObjectMeta": {"name": "vm", "namespace": "ns"}, "Status": {"Status": f"S{n}"}})


def statuses(server: FakeVirtHandler) -> list[tuple[str, str]]:
    return [(t, d["Status"]["Status"]) for t, d in server.domain_events]


async def first_failure(n: Notifier, timeout: float = 10.0) -> str:
    """The error of the notifier's first failed delivery attempt (waits for one: a busy machine
    may take a while to make it)."""
    return await polling.until(lambda: n.last_error, timeout)


def notifier(path: str, **kw: Any) -> Notifier:
    kw.setdefault("retry_initial", 0.02)
    kw.setdefault("retry_max", 0.2)
    kw.setdefault("call_timeout", 2.0)
    return Notifier(path, **kw)


@run
async def test_event_is_delivered_once_the_socket_appears(sock: str) -> None:
    n = notifier(sock)
    n.send_domain(dom(1))
    assert await n.flush(0.3) is False  # no virt-handler yet: still queued
    assert await first_failure(n)
    assert n.pending == 1
    server = await FakeVirtHandler(sock).start()
    try:
        assert await n.flush(10)
        assert statuses(server) == [("MODIFIED", "S1")]
        assert n.version == 1 and n.last_error is None
    finally:
        await n.close()
        await server.stop()


@run
async def test_virt_handler_restart_mid_stream_loses_no_latest_state(sock: str) -> None:
    first = await FakeVirtHandler(sock).start()
    n = notifier(sock)
    try:
        n.send_domain(dom(1))
        assert await n.flush(10)
        await first.stop()
        n.send_domain(dom(2))
        await first_failure(n)  # it tried while virt-handler was away
        second = await FakeVirtHandler(sock).start()
        try:
            assert await n.flush(10)
            assert statuses(first) == [("MODIFIED", "S1")]
            assert statuses(second) == [("MODIFIED", "S2")]
            assert second.info_calls == 1  # versions negotiated again on the new connection
        finally:
            await second.stop()
    finally:
        await n.close()
        await first.stop()


@run
async def test_in_band_refusal_is_retried_until_accepted(sock: str) -> None:
    server = await FakeVirtHandler(sock, refuse_domain=2).start()
    n = notifier(sock)
    try:
        n.send_domain(dom(1))
        assert await n.flush(10)
        assert statuses(server) == [("MODIFIED", "S1")]
        assert server.domain_calls == 3
    finally:
        await n.close()
        await server.stop()


@run
async def test_pending_modified_events_coalesce_to_the_latest(sock: str) -> None:
    n = notifier(sock)
    for i in range(1, 6):
        n.send_domain(dom(i))
    assert n.pending == 1
    server = await FakeVirtHandler(sock).start()
    try:
        assert await n.flush(10)
        assert statuses(server) == [("MODIFIED", "S5")]
    finally:
        await n.close()
        await server.stop()


@run
async def test_added_is_never_coalesced_away(sock: str) -> None:
    n = notifier(sock)
    n.send_domain(dom(1), "ADDED")
    n.send_domain(dom(2))
    n.send_domain(dom(3))
    n.send_domain(dom(4), "ADDED")
    n.send_domain(dom(5), "ADDED")
    server = await FakeVirtHandler(sock).start()
    try:
        assert await n.flush(10)
        assert statuses(server) == [("ADDED", "S1"), ("MODIFIED", "S3"), ("ADDED", "S4"), ("ADDED", "S5")]
    finally:
        await n.close()
        await server.stop()


@run
async def test_final_event_is_delivered_and_many_events_share_one_negotiation(sock: str) -> None:
    server = await FakeVirtHandler(sock).start()
    n = notifier(sock)
    try:
        for i in range(50):
            n.send_domain(dom(i))
            if i % 7 == 0:
                await asyncio.sleep(0)
        deleted = json.dumps({"ObjectMeta": {"deletionTimestamp": "2026-08-22T10:00:00Z"},
                              "Status": {"Status": "NoState"}})
        n.send_domain(deleted)
        assert await n.flush(10)
        assert server.domain_events[-1][1]["ObjectMeta"]["deletionTimestamp"] == "2026-08-22T10:00:00Z"
        order = [d["Status"]["Status"] for _, d in server.domain_events[:-1]]
        assert order == sorted(order, key=lambda s: int(s[1:]))  # in order, gaps only by coalescing
        assert server.info_calls == 1
    finally:
        await n.close()
        await server.stop()


@run
async def test_no_common_version_is_an_error_and_nothing_is_delivered(sock: str) -> None:
    server = await FakeVirtHandler(sock, versions=(2, 3)).start()
    n = notifier(sock)
    try:
        n.send_domain(dom(1))
        assert await first_failure(n) == "no compatible version found, server: [2, 3], client: [1]"
        assert await n.flush(0.3) is False
        assert server.domain_calls == 0
    finally:
        await n.close()
        await server.stop()


def test_highest_common_version_is_picked() -> None:
    assert highest_common_version([1, 2, 3], (1, 2)) == 2
    with pytest.raises(NotifyError, match="no compatible version found"):
        highest_common_version([], (1,))


@run
async def test_k8s_event_reaches_virt_handler_about_the_vmi(sock: str) -> None:
    server = await FakeVirtHandler(sock, known_vmis={("ns", "vm", "uid-1")}).start()
    n = notifier(sock)
    try:
        n.send_k8s_event(type="Warning", reason="VMMCrashed", message="cloud-hypervisor exited",
                               namespace="ns", name="vm", uid="uid-1")
        assert await n.flush(10)
        (event,) = server.k8s_events
        assert event["involvedObject"] == {"kind": "VirtualMachineInstance", "namespace": "ns", "name": "vm",
                                           "uid": "uid-1", "apiVersion": "kubevirt.io/v1"}
        assert (event["type"], event["reason"], event["message"]) == ("Warning", "VMMCrashed",
                                                                       "cloud-hypervisor exited")
    finally:
        await n.close()
        await server.stop()


@run
async def test_vmi_not_found_is_logged_and_dropped_without_blocking_domain_events(
        sock: str, caplog: pytest.LogCaptureFixture) -> None:
    server = await FakeVirtHandler(sock).start()  # knows no VMI
    n = notifier(sock)
    try:
        n.send_k8s_event(type="Warning", reason="BootFailed", message="m", namespace="ns", name="vm",
                               uid="uid-1")
        n.send_domain(dom(1))
        assert await n.flush(10)
        assert server.k8s_calls == K8S_MAX_REFUSALS and server.k8s_events == []
        assert statuses(server) == [("MODIFIED", "S1")]
        assert "VMI not found" in caplog.text
    finally:
        await n.close()
        await server.stop()


@run
async def test_bad_arguments_are_refused_clearly(sock: str) -> None:
    n = notifier(sock)
    with pytest.raises(ValueError, match="event type must be one of"):
        n.send_domain(dom(1), "UPDATED")
    with pytest.raises(ValueError, match="Normal"):
        n.send_k8s_event(type="Error", reason="r", message="m", namespace="ns", name="vm", uid="u")
    with pytest.raises(ValueError, match="namespace, name and uid"):
        n.send_k8s_event(type="Normal", reason="r", message="m", namespace="ns", name="vm", uid="")
    assert n.pending == 0
    await n.close()


@run
async def test_close_returns_promptly_with_undelivered_events(sock: str) -> None:
    n = notifier(sock, retry_max=5.0)
    n.send_domain(dom(1))
    await first_failure(n)  # the sender is retrying
    loop = asyncio.get_running_loop()
    start = loop.time()
    await n.close()
    assert loop.time() - start < 2
    n.send_domain(dom(2))  # after close: dropped with a warning, no error
    assert n.pending == 1


@run
async def test_idle_notifier_makes_no_calls(sock: str) -> None:
    server = await FakeVirtHandler(sock).start()
    n = notifier(sock)
    try:
        n.send_domain(dom(1))
        assert await n.flush(10)
        calls = (server.info_calls, server.domain_calls)
        await asyncio.sleep(0.5)  # nothing queued: the sender waits on an event, no polling
        assert (server.info_calls, server.domain_calls) == calls
    finally:
        await n.close()
        await server.stop()


@run
async def test_error_events_carry_the_status_json(sock: str) -> None:
    server = await FakeVirtHandler(sock).start()
    n = notifier(sock)
    try:
        n.send_domain('{"kind":"Status","message":"boom"}', "ERROR")
        assert await n.flush(10)
        assert server.raw_domain_requests == [("ERROR", b"", b'{"kind":"Status","message":"boom"}')]
    finally:
        await n.close()
        await server.stop()


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait for `condition` with a deadline (the notifier's background work has no event to await)."""
    await polling.until(condition, timeout)


@run
async def test_connect_early_negotiates_before_any_event_and_the_first_event_uses_it(sock: str) -> None:
    server = await FakeVirtHandler(sock).start()
    n = notifier(sock)
    try:
        n.connect_early()
        await until(lambda: n.connected)
        assert (server.info_calls, server.domain_calls) == (1, 0)
        n.connect_early()  # connected already: nothing more
        n.send_domain(dom(1), "ADDED")
        assert await n.flush(10)
        assert server.info_calls == 1 and statuses(server) == [("ADDED", "S1")]
    finally:
        await n.close()
        await server.stop()


@run
async def test_connect_early_waits_a_little_for_a_pipe_that_appears_after_the_first_call(sock: str) -> None:
    n = notifier(sock, warm_up_window=30.0)
    server = None
    try:
        n.connect_early()
        await until(lambda: n.warm_up_attempts >= 1)  # the pipe is not there yet
        assert not n.connected
        server = await FakeVirtHandler(sock).start()
        await until(lambda: n.connected)
        assert server.info_calls == 1
    finally:
        await n.close()
        if server is not None:
            await server.stop()


@run
async def test_connect_early_gives_up_after_its_window_without_a_warning(sock: str,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    n = notifier(sock, warm_up_window=0.3)
    try:
        n.connect_early()
        await until(lambda: not n.warming_up)
        attempts = n.warm_up_attempts
        assert attempts >= 2 and not n.connected and n.last_error is None
        assert "WARNING" not in caplog.text
        await asyncio.sleep(0.5)  # stopped: no more attempts (the first event will dial)
        assert n.warm_up_attempts == attempts
        server = await FakeVirtHandler(sock).start()
        try:
            n.send_domain(dom(1))
            assert await n.flush(10)
            assert statuses(server) == [("MODIFIED", "S1")]
        finally:
            await server.stop()
    finally:
        await n.close()
