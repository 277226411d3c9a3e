"""The Notify client: Domain and Kubernetes events from the launcher to virt-handler (contract §2.5, §7.3).

virt-handler serves `kubevirt.notify.v1.Notify` behind `<share-dir>/domain-notify-pipe.sock`,
a listener it injects into the pod only after its first connection to our command socket, and
re-creates when it restarts. So the socket may be missing, and may go away and come back.

How this client behaves (kubevirt `pkg/virt-launcher/notify-client/client.go@d923fdb815cd`
is the model, with one deliberate difference):

- `send_domain()`/`send_k8s_event()` only enqueue and return at once; one background sender
  task delivers in order. With nothing queued it waits on an asyncio.Event: no polling.
- Each (re)connection starts with `NotifyInfo.Info`, picking the highest version both sides
  support (we speak 1); none in common is an error (logged, retried).
- Every call has a `call_timeout` deadline (5 s, as Go). On gRPC `UNAVAILABLE`,
  `DEADLINE_EXCEEDED`, `ABORTED` or a non-gRPC error the channel is closed and redialled on
  the next try, as Go does; a reply `success=false` with a non-empty message is an error too
  (an empty message counts as success, as virt-handler's own client treats it).
- Unlike Go, which gives up on an event after 20 s, Domain events are never dropped: the sender
  retries with capped exponential backoff until delivered or `close()`d. Pending Domain events
  coalesce: a new event replaces the newest pending one of the same type unless that one is
  `ADDED` (an ADDED is never coalesced away), so after an outage virt-handler gets the latest
  state at once rather than a backlog.
- `connect_early()` (called when virt-handler first talks to the command server, right after
  which it injects the notify pipe) connects and negotiates ahead of the first event, so the
  first Domain event (ADDED Running) does not wait for a dial and `Info` too. It tries a few
  times with backoff within `warm_up_window` seconds, because the pipe may appear a moment
  after that first call, then stops (the next event dials anyway): a launcher whose
  virt-handler never injects the pipe does not poll for it.
- Kubernetes events queue separately (after Domain events, at most `K8S_QUEUE_LIMIT`, oldest
  dropped first). virt-handler answers `success=false, "VMI not found"` when it does not know
  the VMI; such refusals are retried `K8S_MAX_REFUSALS` times, then the event is logged and
  dropped, never retried forever. Transport failures do not count against an event.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio

from ch_launcher._proto import kubevirt_notify_info_pb2 as info_pb2
from ch_launcher._proto import kubevirt_notify_info_pb2_grpc as info_grpc
from ch_launcher._proto import kubevirt_notify_v1_pb2 as notify_pb2
from ch_launcher._proto import kubevirt_notify_v1_pb2_grpc as notify_grpc
from ch_launcher.kubevirt.events import k8s_event_json

log = logging.getLogger(__name__)

SUPPORTED_NOTIFY_VERSIONS = (1,)
EVENT_TYPES = ("ADDED", "MODIFIED", "DELETED", "ERROR")
K8S_QUEUE_LIMIT = 100
K8S_MAX_REFUSALS = 3
WARM_UP_WINDOW = 10.0  # seconds connect_early() keeps trying for a pipe that has not appeared yet
# Go closes the connection and redials on these; anything else keeps the channel.
_RECONNECT_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED}


class NotifyError(Exception):
    """One delivery attempt failed. `reconnect`: the channel must be redialled; `refused`:
    virt-handler answered success=false (the message says why)."""

    def __init__(self, message: str, *, reconnect: bool = False, refused: bool = False) -> None:
        super().__init__(message)
        self.reconnect = reconnect
        self.refused = refused


@dataclass(eq=False)
class _DomainEvent:
    payload: bytes
    event_type: str


@dataclass(eq=False)
class _K8sEvent:
    payload: bytes
    what: str  # for logs: "Warning/VMMCrashed"
    refusals: int = 0


def highest_common_version(server: list[int] | tuple[int, ...], client: tuple[int, ...]) -> int:
    """The highest version in both lists (`GetHighestCompatibleVersion`), else NotifyError."""
    common = set(server) & set(client)
    if not common:
        raise NotifyError(f"no compatible version found, server: {list(server)}, client: {list(client)}",
                          reconnect=True)
    return max(common)


class Notifier:
    """Delivers events to virt-handler's Notify server at `socket_path` (see module doc).

    Usage: `send_domain(json)` on every state or metadata change; at the end
    `await flush(15)` then `await close()`. Must be used from one event loop.
    """

    def __init__(self, socket_path: str, *, call_timeout: float = 5.0, retry_initial: float = 0.1,
                 retry_max: float = 1.0, supported_versions: tuple[int, ...] = SUPPORTED_NOTIFY_VERSIONS,
                 warm_up_window: float = WARM_UP_WINDOW) -> None:
        self.socket_path = socket_path
        self.call_timeout = call_timeout
        self.retry_initial = retry_initial
        self.retry_max = retry_max  # Go retries every 1 s; we back off up to this
        self.supported_versions = supported_versions
        self.warm_up_window = warm_up_window
        self.version: int | None = None  # negotiated on each (re)connection
        self.warm_up_attempts = 0  # connection attempts made by connect_early(), for tests and diagnostics
        self.last_error: str | None = None  # of the latest failed attempt, None after a success
        self.delivered = 0
        self.domain_delivered = False  # the first Domain event has reached virt-handler
        self._domain: collections.deque[_DomainEvent] = collections.deque()
        self._k8s: collections.deque[_K8sEvent] = collections.deque()
        self._wakeup = asyncio.Event()
        self._drained = asyncio.Event()
        self._drained.set()
        self._task: asyncio.Task[None] | None = None
        self._warm_up: asyncio.Task[None] | None = None
        self._connecting = asyncio.Lock()
        self._channel: grpc.aio.Channel | None = None
        self._stub: notify_grpc.NotifyAsyncStub | None = None
        self._closed = False
        self._failing_since: float | None = None

    # --- public API --------------------------------------------------------------------------

    def send_domain(self, domain_json: str | bytes, event_type: str = "MODIFIED") -> None:
        """Queue a Domain event and return at once. For `ERROR` the payload is a metav1.Status
        JSON. Raises ValueError for an unknown event type; after close() the event is dropped
        with a warning."""
        if event_type not in EVENT_TYPES:
            raise ValueError(f"event type must be one of {EVENT_TYPES}, not {event_type!r}")
        if self._closed:
            log.warning("notifier is closed; %s domain event dropped", event_type)
            return
        payload = domain_json.encode() if isinstance(domain_json, str) else bytes(domain_json)
        event = _DomainEvent(payload, event_type)
        if self._domain and self._domain[-1].event_type == event_type and event_type != "ADDED":
            self._domain[-1] = event  # coalesce: only the latest state matters
        else:
            self._domain.append(event)
        self._kick()

    def send_k8s_event(self, *, type: str, reason: str,  # noqa: A002 - as k8s_event_json
                       message: str, namespace: str, name: str, uid: str) -> None:
        """Queue a Kubernetes event about the VMI (`type` Normal or Warning) and return at once.
        Raises ValueError for a bad type or a missing VMI identity."""
        payload = k8s_event_json(type=type, reason=reason, message=message, namespace=namespace,
                                 name=name, uid=uid)
        if self._closed:
            log.warning("notifier is closed; event %s/%s dropped", type, reason)
            return
        if len(self._k8s) >= K8S_QUEUE_LIMIT:
            dropped = self._k8s.popleft()
            log.warning("too many undelivered Kubernetes events; dropped the oldest (%s)", dropped.what)
        self._k8s.append(_K8sEvent(payload, f"{type}/{reason}"))
        self._kick()

    async def flush(self, timeout: float) -> bool:
        """Wait until everything queued so far is delivered (or given up, for refused K8s
        events). True if so within `timeout` seconds, False otherwise (events stay queued)."""
        if self._drained.is_set():
            return True
        try:
            await asyncio.wait_for(self._drained.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def connect_early(self) -> None:
        """Connect (and negotiate) now, in the background, unless connected or connecting
        already: virt-handler has just talked to the launcher, so its notify pipe is there or
        about to be (see module doc). Never raises; failures are logged at debug level only."""
        if self._closed or self._stub is not None or (self._warm_up is not None and not self._warm_up.done()):
            return
        self._warm_up = asyncio.get_running_loop().create_task(self._connect_soon(), name="notify-warm-up")

    @property
    def connected(self) -> bool:
        """A negotiated connection is open (it may still turn out broken at the next call)."""
        return self._stub is not None

    @property
    def warming_up(self) -> bool:
        """connect_early() is still trying."""
        return self._warm_up is not None and not self._warm_up.done()

    async def _connect_soon(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.warm_up_window
        delay = self.retry_initial
        while not self._closed and self._stub is None:
            if self._domain or self._k8s:
                return  # the sender dials for them
            self.warm_up_attempts += 1
            try:
                await self._connect()
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - an early connection is an optimisation only
                log.debug("connecting early to %s: %s", self.socket_path, e)
            if loop.time() + delay > deadline:
                log.debug("no notify server at %s yet; the first event will dial", self.socket_path)
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.retry_max)

    @property
    def pending(self) -> int:
        """Events not yet delivered."""
        return len(self._domain) + len(self._k8s)

    async def close(self) -> None:
        """Stop the sender and close the channel. Undelivered events are dropped (logged);
        call flush() first to deliver them. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for task in (self._task, self._warm_up):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        await self._disconnect()
        if self.pending:
            log.warning("notifier closed with %d undelivered event(s)", self.pending)

    # --- sender ------------------------------------------------------------------------------

    def _kick(self) -> None:
        self._drained.clear()
        self._wakeup.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="notify-sender")

    async def _run(self) -> None:
        delay = self.retry_initial
        while not self._closed:
            item: _DomainEvent | _K8sEvent | None = (
                self._domain[0] if self._domain else self._k8s[0] if self._k8s else None)
            if item is None:
                self._drained.set()
                self._wakeup.clear()
                await self._wakeup.wait()  # idle: nothing to do until the next event
                continue
            try:
                await self._deliver(item)
            except NotifyError as e:
                if e.reconnect:
                    await self._disconnect()
                if self._refused(item, e):
                    continue
                self._note_failure(str(e))
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.retry_max)
                continue
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a bug here must not kill delivery
                log.exception("unexpected error while sending a notification")
                await self._disconnect()
                self._note_failure(repr(e))
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.retry_max)
                continue
            delay = self.retry_initial
            self._delivered(item)

    def _delivered(self, item: _DomainEvent | _K8sEvent) -> None:
        # The head may have been replaced by a newer coalesced event during the call: keep that.
        queue: collections.deque[Any] = self._domain if isinstance(item, _DomainEvent) else self._k8s
        if queue and queue[0] is item:
            queue.popleft()
        if isinstance(item, _DomainEvent) and not self.domain_delivered:
            log.info("first Domain event delivered to virt-handler")  # a start's timeline: bench/cluster.py
            self.domain_delivered = True
        self.delivered += 1
        if self._failing_since is not None:
            loop = asyncio.get_running_loop()
            log.info("notifications delivered again after %.1f s of failures",
                     loop.time() - self._failing_since)
            self._failing_since = None
        self.last_error = None

    def _refused(self, item: _DomainEvent | _K8sEvent, error: NotifyError) -> bool:
        """K8s events refused in-band are retried a few times, then dropped. True if dropped."""
        if not isinstance(item, _K8sEvent) or not error.refused:
            return False
        item.refusals += 1
        if item.refusals < K8S_MAX_REFUSALS:
            return False
        if self._k8s and self._k8s[0] is item:
            self._k8s.popleft()
        log.warning("virt-handler refused Kubernetes event %s %d times (%s); dropping it",
                    item.what, item.refusals, error)
        self._failing_since = None  # the channel works; only this event was unwelcome
        return True

    def _note_failure(self, message: str) -> None:
        if self._failing_since is None:
            self._failing_since = asyncio.get_running_loop().time()
            log.warning("cannot deliver a notification to %s, retrying: %s", self.socket_path, message)
        elif message != self.last_error:
            log.info("notification still failing: %s", message)
        self.last_error = message

    async def _deliver(self, item: _DomainEvent | _K8sEvent) -> None:
        stub = await self._connect()
        try:
            if isinstance(item, _DomainEvent):
                if item.event_type == "ERROR":
                    request = notify_pb2.DomainEventRequest(statusJSON=item.payload, eventType="ERROR")
                else:
                    request = notify_pb2.DomainEventRequest(domainJSON=item.payload, eventType=item.event_type)
                reply = await stub.HandleDomainEvent(request, timeout=self.call_timeout)
            else:
                reply = await stub.HandleK8sEvent(notify_pb2.K8sEventRequest(eventJSON=item.payload),
                                                  timeout=self.call_timeout)
        except grpc.aio.AioRpcError as e:
            raise NotifyError(f"{e.code().name}: {e.details()}", reconnect=e.code() in _RECONNECT_CODES) from e
        except (OSError, grpc.RpcError) as e:
            raise NotifyError(f"{type(e).__name__}: {e}", reconnect=True) from e
        if not reply.success and reply.message:
            raise NotifyError(f"virt-handler answered: {reply.message}", refused=True)

    async def _connect(self) -> notify_grpc.NotifyAsyncStub:
        async with self._connecting:  # the sender and connect_early() may both be dialling
            return await self._dial()

    async def _dial(self) -> notify_grpc.NotifyAsyncStub:
        if self._stub is not None:
            return self._stub
        # A fresh channel per connection: gRPC's own reconnect backoff would otherwise make
        # calls fail fast for up to minutes after virt-handler comes back.
        channel = grpc.aio.insecure_channel(f"unix:{self.socket_path}",
                                            options=[("grpc.enable_retries", 0)])
        try:
            reply = await info_grpc.NotifyInfoStub(channel).Info(info_pb2.NotifyInfoRequest(),
                                                                 timeout=self.call_timeout)
            self.version = highest_common_version(list(reply.supportedNotifyVersions), self.supported_versions)
        except grpc.aio.AioRpcError as e:
            await channel.close()
            raise NotifyError(f"version negotiation: {e.code().name}: {e.details()}", reconnect=True) from e
        except BaseException:
            await channel.close()
            raise
        self._channel = channel
        self._stub = notify_grpc.NotifyStub(channel)
        log.info("connected to virt-handler's notify server, version %d", self.version)
        return self._stub

    async def _disconnect(self) -> None:
        channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            with contextlib.suppress(Exception):
                await channel.close()
