"""The guest's serial console at `<private-dir>/<uid>/virt-serial0`, and its log (contract §7.4).

Cloud Hypervisor, with `serial {mode: Socket, socket: PATH}`, *listens* on PATH and serves the
guest's serial port to one client at a time. virt-handler (`pkg/virt-handler/rest/console.go`)
dials `virt-serial0` inside the pod, and the `guest-console-log` container tails
`virt-serial0-log`. `SerialConsole` bridges the two:

    guest UART ── CH serial socket ──(our one connection)── SerialConsole ── virt-serial0 ── client
                                                                  └─ append ─ virt-serial0-log
                                                                     (rotated as virtlogd does it: serial_log.py)

- Our connection to CH stays up while clients come and go, so everything the guest prints
  reaches the log even when nobody is attached, and a client detaching never touches the VM.
- One client at a time, like virt-handler's console: a new client displaces the previous one
  (which is closed).
- Bytes from a client while the VMM is not attached (before boot, during a reboot) are dropped,
  as on a disconnected serial line.
- A client that does not read is not allowed to stall the guest or the log: once more than
  `CLIENT_BUFFER_LIMIT` bytes wait for it, further output is dropped for that client only.
- Everything is event-driven (asyncio streams); nothing polls while idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os

from ch_launcher.serial_log import RotatingLog

log = logging.getLogger(__name__)

CLIENT_BUFFER_LIMIT = 1 << 20  # bytes queued for a slow client before its output is dropped
READ_CHUNK = 64 * 1024
SOCKET_NAME, LOG_NAME = "virt-serial0", "virt-serial0-log"


def console_paths(private_dir: str, uid: str) -> tuple[str, str]:
    """The console socket virt-handler dials and the serial log: `<private-dir>/<uid>/virt-serial0`
    and `<private-dir>/<uid>/virt-serial0-log`."""
    vmi_dir = os.path.join(private_dir, uid)
    return os.path.join(vmi_dir, SOCKET_NAME), os.path.join(vmi_dir, LOG_NAME)


def precreate_log(private_dir: str, uid: str) -> str:
    """Create `<private-dir>/<uid>/` and an empty serial log (an existing one is kept) when the
    launcher starts, as virt-launcher does (kubevirt cmd/virt-launcher/virt-launcher.go@d923fdb815cd:
    `initializeDirs`, `InitializeConsoleLogFile`). The `guest-console-log` container (virt-tail)
    starts before the launcher and exits when that directory is still missing 3 s later, long
    before the first Sync (kubevirt cmd/virt-tail/main.go@d923fdb815cd). Returns the log's path;
    raises OSError."""
    _, log_file = console_paths(private_dir, uid)
    os.makedirs(os.path.dirname(log_file), exist_ok=True)
    os.close(os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644))
    return log_file


class ConsoleError(Exception):
    """The console could not be set up or could not reach the VMM's serial socket."""


DRAIN_TIMEOUT = 1.0  # seconds a re-attach lets the old connection deliver what it holds (until CH closes it)


class SerialConsole:
    """Bridge between CH's serial socket (`vmm_socket`) and `console_socket`; log to `log_file`.

    Lifecycle: `await start()` (listen, create the log), then `await attach_vmm()` after every
    boot or reboot (CH recreates its socket), `await close()` at the end. Methods never raise
    for a client misbehaving; `start()`/`attach_vmm()` raise ConsoleError with the reason.
    """

    def __init__(self, vmm_socket: str, console_socket: str, log_file: str | None) -> None:
        self.vmm_socket = vmm_socket
        self.console_socket = console_socket
        self.log_file = log_file
        self._server: asyncio.base_events.Server | None = None
        self._log: RotatingLog | None = None
        self._client: asyncio.StreamWriter | None = None
        self._client_task: asyncio.Task[None] | None = None
        self._vmm_reader: asyncio.StreamReader | None = None
        self._vmm_writer: asyncio.StreamWriter | None = None
        self._vmm_task: asyncio.Task[None] | None = None
        self._closed = False

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Create the log file (empty if new, kept if present: it is append-only) and listen on
        `console_socket`, replacing a stale socket file. Raises ConsoleError on failure."""
        try:
            os.makedirs(os.path.dirname(self.console_socket) or ".", exist_ok=True)
            if self.log_file:
                os.makedirs(os.path.dirname(self.log_file) or ".", exist_ok=True)
                self._log = RotatingLog(self.log_file)
                self._log.open()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.console_socket)
            self._server = await asyncio.start_unix_server(self._on_client, path=self.console_socket)
        except OSError as e:
            raise ConsoleError(f"cannot serve the serial console at {self.console_socket}: {e}") from e

    async def attach_vmm(self, timeout: float = 5.0) -> None:
        """Connect to CH's serial socket, replacing an earlier connection (after a reboot CH
        serves a new one). CH creates the socket while it builds the VM, so a missing or refusing
        socket is retried briefly; after `timeout` seconds, ConsoleError."""
        if self._closed:
            raise ConsoleError("serial console is closed")
        await self._detach_vmm(drain=DRAIN_TIMEOUT)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        delay = 0.01
        while True:
            try:
                reader, writer = await asyncio.open_unix_connection(self.vmm_socket, limit=READ_CHUNK)
                break
            except (FileNotFoundError, ConnectionRefusedError) as e:
                if loop.time() + delay > deadline:
                    raise ConsoleError(f"the VMM's serial socket {self.vmm_socket} did not accept a "
                                       f"connection within {timeout:g} s: {e.strerror}") from e
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.2)
            except OSError as e:
                raise ConsoleError(f"cannot connect to the VMM's serial socket {self.vmm_socket}: {e}") from e
        self._vmm_reader, self._vmm_writer = reader, writer
        self._vmm_task = asyncio.create_task(self._pump_from_vmm(reader), name="serial-from-vmm")
        log.info("serial console attached to the VMM at %s", self.vmm_socket)

    async def close(self) -> None:
        """Stop listening, drop the client and the VMM connection, remove the socket file,
        close the log. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._server is not None:
            self._server.close()
        await self._detach_vmm()
        await self._drop_client()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
            with contextlib.suppress(OSError):
                os.unlink(self.console_socket)
        if self._log is not None:
            self._log.close()
            self._log = None

    @property
    def vmm_attached(self) -> bool:
        """True while our connection to CH's serial socket is open."""
        return self._vmm_task is not None and not self._vmm_task.done()

    @property
    def client_attached(self) -> bool:
        return self._client is not None

    # --- data paths --------------------------------------------------------------------------

    async def _pump_from_vmm(self, reader: asyncio.StreamReader) -> None:
        """Guest output -> log file and the attached client, until CH closes the socket."""
        try:
            while data := await reader.read(READ_CHUNK):
                self._write_log(data)
                client = self._client
                if (client is not None and not client.is_closing()
                        and client.transport.get_write_buffer_size() < CLIENT_BUFFER_LIMIT):
                    client.write(data)
        except (ConnectionError, OSError) as e:
            log.info("serial connection to the VMM ended: %s", e)
        else:
            log.info("the VMM closed its serial socket")

    def _write_log(self, data: bytes) -> None:
        if self._log is None:
            return
        try:
            self._log.write(data)  # a local file: short writes
        except OSError as e:  # a full disk must not stop the console
            log.warning("cannot append to the serial log %s: %s", self.log_file, e)

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._closed:
            writer.close()
            return
        # One client at a time: the newcomer displaces the previous one.
        await self._drop_client()
        self._client = writer
        self._client_task = asyncio.current_task()
        log.info("serial console client attached")
        try:
            while data := await reader.read(READ_CHUNK):
                vmm = self._vmm_writer
                if vmm is None or vmm.is_closing() or not self.vmm_attached:
                    continue  # no VMM: a disconnected serial line swallows the bytes
                vmm.write(data)
                with contextlib.suppress(ConnectionError, OSError):
                    await vmm.drain()
        except (ConnectionError, OSError):
            pass
        except asyncio.CancelledError:
            pass  # displaced or closing
        finally:
            if self._client is writer:
                self._client = None
                self._client_task = None
                log.info("serial console client detached")
            writer.close()

    async def _drop_client(self) -> None:
        writer, task = self._client, self._client_task
        self._client = None
        self._client_task = None
        if writer is not None:
            writer.close()
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _detach_vmm(self, *, drain: float = 0.0) -> None:
        """Drop the connection to CH's serial socket. With `drain`, first let it deliver what
        it still holds, for up to `drain` seconds: a re-attach follows a reboot or a new VMM,
        which has closed the old connection (or is about to), but what the guest printed on it
        may not have been read yet (the launcher was busy, or CH wrote the new boot's first
        bytes there, as v53 does), and closing it at once dropped that from the log."""
        task, writer = self._vmm_task, self._vmm_writer
        self._vmm_task = None
        self._vmm_reader = None
        self._vmm_writer = None
        if task is not None and drain > 0 and not task.done():
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(task), drain)
        if writer is not None:
            writer.close()
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
