"""The VMM process plumbing: one `cloud-hypervisor` at a time, its event FIFO and its exit.

Both are watched with `loop.add_reader` (the FIFO's read end; the process's pidfd), so nothing
polls. The FIFO is created once and outlives VMMs: each new VMM opens it for writing (CH blocks
at start until a reader exists, and ours always does). Every VMM ever spawned is remembered, so
`close()` leaves none behind, even one whose start was interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from ch_launcher.ch.events import Event, EventFifo, EventStreamParser, open_event_fifo
from ch_launcher.manager.settings import ManagerSettings

if TYPE_CHECKING:
    from ch_launcher.ch.process import VmmProcess


# Backtraces captured by cloud-hypervisor's error paths call getcwd(2), which its migration
# worker's seccomp filter does not allow: with these set, a migration that fails at the
# switch-over gets the VMM killed (SIGSYS) and the VM lost instead of resumed (measured on v53.0,
# docs/migration.md §2).
UNSAFE_FOR_VMM = ("RUST_BACKTRACE", "RUST_LIB_BACKTRACE")


def vmm_environment(env: Mapping[str, str] | None) -> dict[str, str]:
    """The VMM's environment: `env` (None: the launcher's own) without UNSAFE_FOR_VMM."""
    source = os.environ if env is None else env
    return {k: v for k, v in source.items() if k not in UNSAFE_FOR_VMM}


class VmmHost:
    """Spawns VMMs and reports what they say (`on_event`) and when they exit (`on_exit`).

    `run_api(fn, *args)` runs a blocking call in the manager's REST worker thread."""

    def __init__(self, settings: ManagerSettings, run_api: Callable[..., Awaitable[Any]],
                 on_event: Callable[[Event], None], on_exit: Callable[[VmmProcess], None]) -> None:
        self.settings = settings
        self.current: VmmProcess | None = None
        self.spawned: list[VmmProcess] = []
        self.version: str | None = None
        self._run_api = run_api
        self._on_event = on_event
        self._on_exit = on_exit
        self._fifo: EventFifo | None = None
        self._parser = EventStreamParser()

    def owned_pids(self) -> set[int]:
        """Children whose exit status the VMM supervisor collects itself (not to be reaped by others)."""
        return {vmm.pid for vmm in list(self.spawned) if vmm.returncode is None and not vmm.adopted}

    async def spawn(self) -> VmmProcess:
        """Start a VMM (it becomes `current`) and watch it. Raises VmmStartError if it cannot be
        executed. Does not wait for its API: see `wait_ready`."""
        from ch_launcher.ch.process import VmmProcess

        api_socket, events, log_file = self.settings.vmm_paths
        loop = asyncio.get_running_loop()
        if self._fifo is None:
            os.makedirs(os.path.dirname(api_socket), mode=0o700, exist_ok=True)
            self._fifo = open_event_fifo(events)
            loop.add_reader(self._fifo.read_fd, self.read_events)
        self.read_events()
        self._parser = EventStreamParser()  # a dead VMM may have left half an event behind

        def spawn() -> VmmProcess:
            vmm = VmmProcess.spawn(self.settings.ch_binary, api_socket=api_socket, event_monitor=events,
                                   log_file=log_file, env=vmm_environment(self.settings.vmm_env),
                                   spawning=self.settings.spawning)
            vmm.client.timeout = self.settings.api_timeout
            self.spawned.append(vmm)  # known to close() even if the caller is cancelled now
            return vmm

        vmm = await self._run_api(spawn)
        self.current = vmm
        if vmm.pidfd is not None:
            loop.add_reader(vmm.pidfd, self._exited, vmm)
        return vmm

    async def wait_ready(self, vmm: VmmProcess) -> str:
        """Wait for `vmm.ping`; the VMM's version. Raises VmmStartError (see VmmProcess)."""
        pong = await self._run_api(vmm.wait_ready, self.settings.vmm_start_timeout)
        self.version = pong.version
        return pong.version

    def _exited(self, vmm: VmmProcess) -> None:
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(vmm.pidfd)  # type: ignore[arg-type]
        self._on_exit(vmm)

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
                self._on_event(event)

    def release(self, vmm: VmmProcess) -> None:
        """Stop watching `vmm` and free its fds (it has exited)."""
        if vmm.pidfd is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(vmm.pidfd)
        vmm.close()
        if self.current is vmm:
            self.current = None

    async def close(self) -> None:
        """Stop every VMM still running, close the FIFO."""
        for vmm in self.spawned:
            if vmm.poll() is None:
                # Its own thread: the REST worker may be stuck on a hung call. Short waits: at this
                # point a VM that mattered has been stopped already.
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(vmm.terminate, 1.0, 2.0)
            self.release(vmm)
        if self._fifo is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._fifo.read_fd)
            self._fifo.close()
            self._fifo = None
