"""The VMM processes: one `cloud-hypervisor` at a time, each as a `VmmSession`, with its event FIFO
and its exit watched by the `VmmHost`.

Both are watched with `loop.add_reader` (the FIFO's read end; the process's pidfd), so nothing
polls. The FIFO is created once and outlives VMMs: each new VMM opens it for writing (CH blocks
at start until a reader exists, and ours always does). Every VMM ever spawned is remembered, so
`close()` leaves none behind, even one whose start was interrupted. REST calls to any of them run
in one worker thread (CH serves one request at a time anyway). What they say and their exits go to
the host's listener (`VmmListener`: the supervision).

A session is made at spawn and dropped at the process's exit: what belongs to one VMM (what it
was told, what it said, why it is stopping) never outlives it, and nothing needs resetting.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import logging
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ch_launcher.ch.events import Event, EventFifo, EventStreamParser, open_event_fifo
from ch_launcher.manager import features
from ch_launcher.manager.settings import ManagerSettings

if TYPE_CHECKING:
    from ch_launcher.ch.api import CloudHypervisorClient
    from ch_launcher.ch.process import VmmProcess

log = logging.getLogger(__name__)
T = TypeVar("T")

# Backtraces captured by cloud-hypervisor's error paths call getcwd(2), which its migration
# worker's seccomp filter does not allow: with these set, a migration that fails at the
# switch-over gets the VMM killed (SIGSYS) and the VM lost instead of resumed (measured on v53.0,
# docs/migration.md §2).
UNSAFE_FOR_VMM = ("RUST_BACKTRACE", "RUST_LIB_BACKTRACE")
EVENT_OF_CALL = {"pause": "vm:paused", "resume": "vm:resumed"}  # the state-changing event of a call


def vmm_environment(env: Mapping[str, str] | None) -> dict[str, str]:
    """The VMM's environment: `env` (None: the launcher's own) without UNSAFE_FOR_VMM."""
    source = os.environ if env is None else env
    return {k: v for k, v in source.items() if k not in UNSAFE_FOR_VMM}


class VmmSession:
    """One cloud-hypervisor process, from its spawn to its exit, and what passed between us.

    `killing`: the launcher is stopping it (its exit reads Destroyed, never as a crash).
    `saw_shutdown`: it announced vm:shutdown. `failure`: it stopped the VM on an internal failure
    its log tells of (ch.vmmlog). `crash_destroy`: it is stopped because the guest panicked.
    Events its answers told of already (`answered`) are stale when they arrive (`stale`): the VMM
    writes its events from a thread of its own, so vm:paused may come after a later vm.resume
    has returned and must not take the state back (seen on the real v53.0; FAKE_CH_EVENT_DELAY).
    """

    def __init__(self, process: VmmProcess, rest: concurrent.futures.Executor) -> None:
        self.process = process
        self.killing = False
        self.saw_shutdown = False
        self.failure: str | None = None
        self.crash_destroy = False
        self._rest = rest
        self._told: collections.Counter[str] = collections.Counter()
        self._seen: collections.Counter[str] = collections.Counter()

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def client(self) -> CloudHypervisorClient:
        return self.process.client

    def exited(self) -> bool:
        """The process has exited (reaping it if so)."""
        return self.process.poll() is not None

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking call (on `client`, or the process) in the one REST worker thread."""
        return await asyncio.get_running_loop().run_in_executor(self._rest, functools.partial(fn, *args, **kwargs))

    async def terminate(self, shutdown_timeout: float, term_timeout: float) -> int:
        """`VmmProcess.terminate` (vmm.shutdown, SIGTERM, SIGKILL) in the REST thread."""
        return await self.call(self.process.terminate, shutdown_timeout, term_timeout)

    async def reread(self) -> str | None:
        """Its own word on its VM (Kata's habit: read vm.info, do not trust memory): "Running",
        "Paused", "Created"; None when it has no VM or does not answer (gone or going: its exit
        handler reports that). Never raises."""
        if self.exited():
            return None
        try:
            info = await self.call(self.client.info)
        except features.api.ChApiError as e:
            log.info("re-reading the VM's state: %s", e)
            return None
        return info.state

    # --- the events between us -------------------------------------------------------------------

    def heard(self, event: str) -> None:
        self._seen[event] += 1

    def stale(self, event: str) -> bool:
        """True (once) for an event an answer of ours told of already: it changes nothing now."""
        if self._told[event]:
            self._told[event] -= 1
            return True
        return False

    def events_heard(self) -> dict[str, int]:
        """How often each event was heard so far (to pass to `answered` after a call)."""
        return dict(self._seen)

    def answered(self, call: str, heard_before: Mapping[str, int]) -> None:
        """The answer to `call` has set the state: its event, unless heard meanwhile, is stale."""
        event = EVENT_OF_CALL.get(call)
        if event is not None and self._seen[event] == heard_before.get(event, 0):
            self._told[event] += 1


class VmmListener(Protocol):
    """Who hears the VMMs (the supervision): their events, in order, and each one's exit."""

    def on_event(self, event: Event) -> None: ...

    def on_exit(self, session: VmmSession) -> None: ...


class VmmHost:
    """Spawns VMMs (the `current` session) and tells its listener what they say and when they
    exit (`listen`, before the first spawn)."""

    def __init__(self, settings: ManagerSettings) -> None:
        self.settings = settings
        self.current: VmmSession | None = None
        self.version: str | None = None   # the VMM's version from vmm.ping ("53.0.0"), once one answered
        self._spawned: list[VmmSession] = []
        self._rest = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ch-api")
        self._listener: VmmListener | None = None
        self._fifo: EventFifo | None = None
        self._parser = EventStreamParser()

    def listen(self, listener: VmmListener) -> None:
        """`listener` hears every event and exit from now on."""
        self._listener = listener

    async def spawn(self) -> VmmSession:
        """Start a VMM (its session becomes `current`) and watch it. Raises VmmStartError if it
        cannot be executed. Does not wait for its API: see `wait_ready`."""
        api_socket, events, log_file = self.settings.vmm_paths
        loop = asyncio.get_running_loop()
        if self._fifo is None:
            os.makedirs(os.path.dirname(api_socket), mode=0o700, exist_ok=True)
            self._fifo = open_event_fifo(events)
            loop.add_reader(self._fifo.read_fd, self.read_events)
        self.read_events()
        self._parser = EventStreamParser()  # a dead VMM may have left half an event behind

        def spawn() -> VmmSession:
            process = features.process.VmmProcess.spawn(
                self.settings.ch_binary, api_socket=api_socket, event_monitor=events, log_file=log_file,
                env=vmm_environment(self.settings.vmm_env), spawning=self.settings.spawning)
            process.client.timeout = self.settings.api_timeout
            session = VmmSession(process, self._rest)
            self._spawned.append(session)  # known to close() even if the caller is cancelled now
            return session

        session = await loop.run_in_executor(self._rest, spawn)
        self.current = session
        if session.process.pidfd is not None:
            loop.add_reader(session.process.pidfd, self._exited, session)
        return session

    async def wait_ready(self, session: VmmSession) -> str:
        """Wait for `vmm.ping`; the VMM's version. Raises VmmStartError (see VmmProcess)."""
        pong = await session.call(session.process.wait_ready, self.settings.vmm_start_timeout)
        self.version = pong.version
        return pong.version

    def _exited(self, session: VmmSession) -> None:
        pidfd = session.process.pidfd
        if pidfd is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(pidfd)
        if self._listener is not None:
            self._listener.on_exit(session)

    def read_events(self) -> None:
        """Hand every complete event in the FIFO to `on_event` (also called before handling an
        exit, so a VMM's last words are heard first)."""
        fifo = self._fifo
        if fifo is None:
            return
        try:
            data = fifo.read_available()
        except OSError:
            return
        if data:
            for event in self._parser.feed(data):
                if self._listener is not None:
                    self._listener.on_event(event)

    def release(self, session: VmmSession) -> None:
        """Stop watching `session`'s process and free its fds (it has exited); it is no longer current."""
        pidfd = session.process.pidfd
        if pidfd is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(pidfd)
        session.process.close()
        if self.current is session:
            self.current = None

    async def close(self) -> None:
        """Stop every VMM still running, close the FIFO and the REST thread."""
        for session in self._spawned:
            if not session.exited():
                # Its own thread: the REST worker may be stuck on a hung call. Short waits: at this
                # point a VM that mattered has been stopped already.
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(session.process.terminate, 1.0, 2.0)
            self.release(session)
        if self._fifo is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._fifo.read_fd)
            self._fifo.close()
            self._fifo = None
        self._rest.shutdown(wait=False, cancel_futures=True)
