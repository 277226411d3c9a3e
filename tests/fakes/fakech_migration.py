"""Cloud Hypervisor's live migration, simulated: `vm.send-migration` and `vm.receive-migration`
speaking CH's own wire protocol over real sockets.

Part of `fake_cloud_hypervisor.py` (stdlib only). Behaviour from `cloud-hypervisor @v53.0`:
`vmm/src/lib.rs` (`vm_send_migration`, `send_migration`, `do_memory_iterations`,
`is_precopy_converged`, `check_migration`, `vm_receive_migration`, `vm_receive_migration_step`),
`vmm/src/migration/worker.rs`, `vmm/src/migration/transport.rs`, `vm-migration/src/protocol.rs`,
and from the real v53.0 binary on a PVM host (docs/migration.md §2).

- The protocol is lock-step: a 16-byte request (`u16` command, 6 header bytes carrying the
  sender's protocol version for `Start`, `u64` payload length, little-endian), its payload, then
  a 16-byte response (`u16` status: 1 Ok, 2 Error). `Memory` carries a range table
  (`{gpa: u64, length: u64}` each) as its payload, followed by the ranges' contents.
- **Sending** returns at once (v53): a worker thread runs the migration; the VMM keeps serving
  its API, where `vm.info` answers the snapshot taken at the start and every call that would
  change the VM fails with `VM is currently migrating and can't be modified`. The guest's memory
  is sent for real (zeros); `FAKE_CH_DIRTY_RATE` bytes/s are "dirtied" during each iteration,
  so convergence follows CH's rule (no dirty pages, or the estimated downtime within
  `downtime_ms`, or `timeout_s` reached: `Cancel` fails, `Ignore` goes on). Success: the VM is
  shut down without `vm:shutdown`, then `vm:deleted`, `vmm:shutdown` and exit 0. Failure:
  `vm:migration-failed`, the error in the log (`Migration failed: <chain>`), and the VM resumed
  if the migration had paused it.
- **Receiving** blocks the whole API until the migration ends (204, or 500 with CH's chain). A
  sender that disappears between requests fails it with `Socket error: failed to fill whole
  buffer`, keeping the received config (`vm.info`: `Created`); one that disappears in the middle
  of a memory range leaves the receiver stuck for ever, its API stalled and SIGTERM ignored, as
  the real v53.0 (which also burns a CPU doing so; this one only waits). Signals wait until the
  receive ends.
- With `RUST_BACKTRACE` (or `RUST_LIB_BACKTRACE`) set and `--seccomp true` (the default), the PVM
  switch-over failure below kills the VMM with SIGSYS (no `vm:migration-failed`), as the real v53.0
  does: that error captures a backtrace, which calls `getcwd`, absent from the worker's seccomp
  filter. The VM is lost. (A broken pipe does not.)
- `FAKE_CH_MIGRATION_FAIL`: `snapshot` (the sender fails at the switch-over as on a PVM host:
  `GetNestedState(Invalid argument (os error 22))`), `config` or `restore` (the receiver answers
  Error to `Config` / `State`: the migration is aborted on both sides), `complete` (the receiver
  takes the VM and answers Ok to `Complete`, but the sender's read of that answer fails: the
  sender reports `vm:migration-failed` and resumes its VM, the error path of CH's
  `send_migration` after the last request, which leaves the VM running on both sides unless the
  launcher stops the source).
"""

from __future__ import annotations

import json
import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fakech_ram import GuestRam, RamFailed

if TYPE_CHECKING:
    from fakech_vm import Vmm

HEADER = struct.Struct("<H6sQ")
START, CONFIG, STATE, MEMORY, COMPLETE, ABANDON, MEMORY_FD, COMPLETE_PAUSED, PAGE_FAULT = 1, 2, 3, 4, 5, 6, 7, 8, 9
NAMES = {START: "Start", CONFIG: "Config", STATE: "State", MEMORY: "Memory", COMPLETE: "Complete",
         ABANDON: "Abandon", MEMORY_FD: "MemoryFd", COMPLETE_PAUSED: "CompletePaused", PAGE_FAULT: "PageFault"}
OK, ERROR = 1, 2
PROTOCOL_VERSION = 0
PAGE = 4096
CHUNK = 1 << 20
MAX_CONNECTIONS = 128
MIGRATING = "VM is currently migrating and can't be modified"
SEND = "Failed to send migratable component snapshot"  # MigratableError::MigrateSend
RECEIVE = "Failed to receive migratable component snapshot"  # MigratableError::MigrateReceive
SOCKET = "Socket error"  # MigratableError::MigrateSocket
NESTED_STATE = ("Failed to snapshot migratable component", "Could not get vCPU state",
                "GetNestedState(Invalid argument (os error 22))")
ZEROS = bytes(CHUNK)

# Calls that would change the VM while a worker owns it (VmOwnership::Migration).
REFUSED_WHILE_SENDING = {
    "vm.boot", "vm.pause", "vm.resume", "vm.shutdown", "vm.reboot", "vm.power-button", "vm.nmi", "vm.delete",
    "vm.resize", "vm.resize-zone", "vm.resize-disk", "vm.remove-device", "vm.snapshot", "vm.restore",
    "vm.counters", "vmm.shutdown",
}


class MigrationError(Exception):
    """A migration step failed: `chain` is CH's error chain below the API's own two messages."""

    def __init__(self, *chain: str) -> None:
        super().__init__(": ".join(chain))
        self.chain = list(chain)


class Stuck(Exception):
    """The receiver lost its sender in the middle of a memory range (it never returns)."""


def read_exact(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        try:
            chunk = sock.recv(n - len(data))
        except OSError as exc:
            raise MigrationError(SOCKET, _io(exc)) from None
        if not chunk:
            raise MigrationError(SOCKET, "failed to fill whole buffer")
        data += chunk
    return bytes(data)


def _io(exc: OSError) -> str:
    return f"{os.strerror(exc.errno)} (os error {exc.errno})" if exc.errno else str(exc)


def _sendall(sock: socket.socket, data: bytes, what: str) -> None:
    try:
        sock.sendall(data)
    except OSError as exc:
        raise MigrationError(SEND, what, f"Guest memory error: {_io(exc)}" if "memory" in what else _io(exc)) from None


def _connect(url: str) -> socket.socket:
    """`transport::send_migration_socket`: `unix:<path>` or `tcp:<host>:<port>`."""
    if url.startswith("tcp:"):
        host, _, port = url[4:].rpartition(":")
        sock = socket.socket(socket.AF_INET6 if host.startswith("[") else socket.AF_INET, socket.SOCK_STREAM)
        target: Any = (host.strip("[]"), int(port))
        what = "Error connecting to TCP socket"
    else:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        target = url[5:]
        what = "Error connecting to UNIX socket"
    try:
        sock.connect(target)
    except OSError as exc:
        sock.close()
        raise MigrationError(SEND, what, _io(exc)) from None
    return sock


def _listen(url: str) -> socket.socket:
    """`transport::receive_migration_listener`."""
    if url.startswith("tcp:"):
        host, _, port = url[4:].rpartition(":")
        sock = socket.socket(socket.AF_INET6 if host.startswith("[") else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        target: Any = (host.strip("[]"), int(port))
        what = "Error binding to TCP socket"
    else:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        target = url[5:]
        what = "Error binding to UNIX socket"
    try:
        sock.bind(target)
        sock.listen(MAX_CONNECTIONS)
    except OSError as exc:
        sock.close()
        raise MigrationError(RECEIVE, what, _io(exc)) from None
    return sock


def _url_ok(url: Any) -> bool:
    if not isinstance(url, str):
        return False
    if url.startswith("unix:"):
        return len(url) > 5
    if url.startswith("tcp:"):
        host, sep, port = url[4:].rpartition(":")
        return bool(sep and host and port.isdigit() and int(port) < 65536)
    return False


class Migrations:
    """The VMM's migrations: at most one outgoing (a worker thread) or one incoming (the API
    held until it ends). Every change to the `Vmm` runs on the main loop (`host.call`)."""

    def __init__(self, vmm: Vmm) -> None:
        self.vmm = vmm
        self.host = vmm.host
        self.sending: dict[str, Any] | None = None  # the vm.info snapshot while a worker owns the VM
        self.receiving = False
        self.vmm_thread_gone = False  # SIGTERM during a send: the VMM thread has ended
        self.fail = os.environ.get("FAKE_CH_MIGRATION_FAIL", "").strip()
        try:
            self.dirty_rate = max(0.0, float(os.environ.get("FAKE_CH_DIRTY_RATE", "0") or 0))
        except ValueError:
            self.dirty_rate = 0.0

    # --- the API while a migration runs ---------------------------------------------------

    def guard(self, endpoint: str) -> tuple[int, Any] | None:
        """An answer for `endpoint` while this VMM sends its VM, else None (serve as usual)."""
        if self.vmm_thread_gone:
            raise self.vmm.http(500, "Error from API", "API response receive error", "receiving on a closed channel")
        if self.sending is None:
            return None
        if endpoint == "vm.info":
            return 200, self.sending
        if endpoint == "vm.reboot":
            self.host.event("vm", "rebooting")  # vm_reboot announces before it checks ownership
        if endpoint in REFUSED_WHILE_SENDING or endpoint.startswith("vm.add-"):
            raise self.vmm.fail(endpoint, MIGRATING)
        return None

    def exit_requested(self) -> bool:
        """SIGTERM/SIGINT: False when the VMM cannot act on it now. During a send, vmm_shutdown
        fails (`VmMigrating`), the VMM thread ends, and the process exits 1 once the worker is
        done; during a receive, the VMM thread only sees it after the receive."""
        if self.sending is not None:
            # The VMM thread ends, but dropping the VM joins the worker first: until the worker is
            # done no request is answered, then every one gets "receiving on a closed channel".
            self.vmm_thread_gone = True
            self.host.hold_api()
            self.host.log("ERROR", f"Fatal error: VmmThread(VmmShutdown(VmMigrating)): {MIGRATING}")
            return False
        return not self.receiving

    # --- sending --------------------------------------------------------------------------

    def send(self, body: Any) -> tuple[int, Any]:
        """`vm_send_migration`: checks, then the worker; answers 204 at once."""
        if not isinstance(body, dict) or "destination_url" not in body:
            raise self.vmm.http(400, "Failed to deserialize JSON", "missing field `destination_url`")
        for key in ("downtime_ms", "timeout_s", "connections"):
            if key in body and (not isinstance(body[key], int) or body[key] <= 0):
                raise self.vmm.http(400, "Failed to deserialize JSON",
                                    f"invalid value: integer `{body[key]}`, expected a nonzero u64")
        if self.sending is not None or self.receiving:
            raise self.vmm.fail("vm.send-migration", SEND, "There is already an ongoing migration")
        vm = self.vmm.vm
        if vm is None:
            raise self.vmm.fail("vm.send-migration", SEND, "VM is not running")
        url, connections = body["destination_url"], body.get("connections", 1)
        invalid = "Invalid send migration configuration"
        if not _url_ok(url):
            raise self.vmm.fail("vm.send-migration", SEND, invalid, "Error validating send migration parameters: "
                                "destination_url must use tcp:<host>:<port> or unix:<path>.")
        if url.startswith("unix:") and connections > 1:
            raise self.vmm.fail("vm.send-migration", SEND, invalid, "Error validating send migration parameters: "
                                "UNIX sockets and connections option cannot be used at the same time.")
        if connections > MAX_CONNECTIONS:
            raise self.vmm.fail("vm.send-migration", SEND, invalid, "Error validating send migration parameters: "
                                f"connections must not exceed {MAX_CONNECTIONS}.")
        if body.get("local"):
            if not url.startswith("unix:"):
                raise self.vmm.fail("vm.send-migration", SEND, invalid, "Error validating send migration "
                                    "parameters: local option is only supported with UNIX sockets.")
            memory = vm.config.get("memory") or {}
            if not (memory.get("shared") or memory.get("hugepages")):
                raise self.vmm.fail("vm.send-migration", SEND, "Local migration requires shared memory or "
                                    "hugepages enabled")
        if vm.state not in ("Running", "Paused"):
            raise self.vmm.fail("vm.send-migration", SEND, f"VM is not running or paused: {vm.state}")
        self.host.log("INFO", f"Sending migration: destination_url={url},local={bool(body.get('local'))}")
        _, self.sending = self.vmm.api_vm_info(None)
        self.sending = json.loads(json.dumps(self.sending))  # a snapshot, not a view
        worker = threading.Thread(target=self._worker, args=(dict(body), vm.state), name="migration-worker",
                                  daemon=True)
        worker.start()
        return 204, None

    def _worker(self, data: dict[str, Any], initial_state: str) -> None:
        call = self.host.call
        call(lambda: self.host.event("vm", "migration-started"))
        sock: socket.socket | None = None
        paused_by_us = False
        try:
            sock = _connect(data["destination_url"])
            self._request(sock, START, b"", "Error starting migration", headers=struct.pack("<H4x", PROTOCOL_VERSION))
            config = call(lambda: json.loads(json.dumps(self.vmm.config)))
            payload = json.dumps({"vm_config": config, "common_cpuid": [],
                                  "memory_manager_data": {"memory_ranges": []}}).encode()
            self._request(sock, CONFIG, payload, "Error during config migration")
            size = int((config.get("memory") or {}).get("size") or 512 << 20)
            paused_by_us = self._memory(sock, data, size, initial_state)
            call(self._release_locks)
            call(lambda: self.host.event("vm", "snapshotting"))
            if self.fail == "snapshot":
                if backtraces_enabled() and self.host.seccomp_kills:
                    # The hypervisor error captures a backtrace, which calls getcwd(2): not in the
                    # worker's seccomp filter, so the kernel kills the process before
                    # `migration-failed` is written (measured on v53.0; a broken pipe does not).
                    call(lambda: self.host.fatal_signal(
                        "\n==== Possible seccomp violation ====\nSyscall number: 79 (arch: 0xc000003e, "
                        f"tid: {threading.get_native_id()}, thread: migration-worker)"))
                    return
                raise MigrationError(*NESTED_STATE)
            call(lambda: self.host.event("vm", "snapshotted"))
            state = json.dumps({"fake": True, "state": initial_state}).encode()
            self._request(sock, STATE, state, "Error during state migration")
            command = COMPLETE if initial_state == "Running" else COMPLETE_PAUSED
            if self.fail == "complete":  # the target took the VM; this side never reads its Ok
                _sendall(sock, HEADER.pack(command, b"".ljust(6, b"\0"), 0), "Error completing migration")
                read_exact(sock, HEADER.size)
                raise MigrationError(SEND, "Error completing migration", "Connection reset by peer (os error 104)")
            self._request(sock, command, b"", "Error completing migration")
        except MigrationError as exc:
            message = ": ".join(exc.chain)
        except Exception as exc:  # noqa: BLE001 - a bug here must fail the migration, not hang it
            message = f"simulated VMM internal error: {exc!r}"
        else:
            sock.close()
            call(self._succeeded)
            return
        if sock is not None:
            sock.close()
        call(lambda: self._failed(message, paused_by_us))

    def _request(self, sock: socket.socket, command: int, payload: bytes, what: str, headers: bytes = b"") -> None:
        _sendall(sock, HEADER.pack(command, headers.ljust(6, b"\0"), len(payload)) + payload, what)
        self._expect_ok(sock, what)

    @staticmethod
    def _expect_ok(sock: socket.socket, what: str) -> None:
        status, _, _ = HEADER.unpack(read_exact(sock, HEADER.size))
        if status != OK:
            raise MigrationError(SEND, what)

    def _memory(self, sock: socket.socket, data: dict[str, Any], size: int, initial_state: str) -> bool:
        """`do_memory_migration`: iterations until converged, the pause, the final iteration.
        Returns True when it paused the VM."""
        downtime = data.get("downtime_ms", 300) / 1000.0
        timeout = float(data.get("timeout_s", 3600))
        ignore = str(data.get("timeout_strategy", "Cancel")).lower() == "ignore"
        begin = time.monotonic()
        pending = size
        iteration = 0
        bandwidth = 0.0
        while True:
            if iteration > 0:
                if pending == 0:
                    break
                if bandwidth > 0 and pending / bandwidth <= downtime:
                    break
                if time.monotonic() - begin >= timeout:
                    if not ignore:
                        raise MigrationError(SEND, f"Precopy: Timeout reached: {int(timeout)}s: migration didn't "
                                             "converge in time")
                    self.host.call(lambda: self.host.log("INFO", "Precopy: Pausing VM, ignoring target downtime "
                                                                 "due to timeout"))
                    break
            started = time.monotonic()
            self._send_ranges(sock, pending)
            took = max(time.monotonic() - started, 1e-6)
            bandwidth = pending / took
            self.host.call(lambda i=iteration: self.host.event("vm", "migration-memory-iteration", {"id": str(i)}))
            iteration += 1
            pending = min(size, int(self.dirty_rate * took) // PAGE * PAGE)
        paused = self.host.call(lambda: self._pause(initial_state))
        self._send_ranges(sock, pending)
        return paused

    def _send_ranges(self, sock: socket.socket, length: int) -> None:
        """`send_memory_ranges`: nothing for an empty table."""
        if length <= 0:
            return
        table = struct.pack("<QQ", 0, length)
        _sendall(sock, HEADER.pack(MEMORY, b"\0" * 6, len(table)) + table, "Error transferring memory to socket")
        left = length
        while left:
            n = min(left, CHUNK)
            _sendall(sock, ZEROS[:n], "Error transferring memory to socket")
            left -= n
        self._expect_ok(sock, "Error during dirty memory migration")

    def _pause(self, initial_state: str) -> bool:
        vm = self.vmm.vm
        if vm is None or vm.state != "Running":
            return False
        self.host.event("vm", "pausing")
        vm.state = "Paused"
        self.host.event("vm", "paused")
        return True

    def _release_locks(self) -> None:
        if self.vmm.vm is not None:
            self.vmm.vm.release()  # "We release the locks early to enable locking them on the destination"

    def _failed(self, message: str, paused_by_us: bool) -> None:
        """`check_migration` after a failure: resume a VM the migration paused; the VMM owns it again."""
        self.host.event("vm", "migration-failed")
        self.host.log("ERROR", f"Migration failed: {message}")
        self.sending = None
        vm = self.vmm.vm
        if vm is not None:
            # The early lock release (`_release_locks`) stopped its vCPU threads with the locks;
            # the real VMM's vCPUs run on whatever happened to the stream.
            vm.vcpus.resize(int((vm.config.get("cpus") or {}).get("boot_vcpus") or 1))
        if paused_by_us and vm is not None and vm.state == "Paused":
            self.host.event("vm", "resuming")
            vm.state = "Running"
            self.host.event("vm", "resumed")
        self._end_of_worker()

    def _succeeded(self) -> None:
        """`check_migration` after success: the VM is shut down (no `vm:shutdown`), the VMM exits."""
        self.host.event("vm", "migration-finished")
        self.host.log("INFO", "Migration completed")
        self.sending = None
        self.vmm.stop_vm(event=False)
        if not self._end_of_worker():
            self.vmm.shutdown_vmm()

    def _end_of_worker(self) -> bool:
        """True when the process exits now (the VMM thread had already ended: exit 1)."""
        if self.vmm_thread_gone:
            self.host.release_api()  # the held requests get their answers (guard) before the exit
            self.host.fatal_exit(1, "Error: Cloud Hypervisor exited with the following chain of errors:\n"
                                    "  0: VMM thread exited with error\n  1: Error shutting down VMM\n"
                                    f"  2: {MIGRATING}")
            return True
        return False

    # --- receiving ------------------------------------------------------------------------

    def receive(self, body: Any) -> Any:
        """`vm_receive_migration`: checks, the listener, then the API is held until it ends."""
        if not isinstance(body, dict) or "receiver_url" not in body:
            raise self.vmm.http(400, "Failed to deserialize JSON", "missing field `receiver_url`")
        if self.vmm.vm is not None:
            raise self.vmm.fail("vm.receive-migration", RECEIVE,
                                "Can't receive a migration when a VM is already created")
        if self.sending is not None or self.receiving:
            raise self.vmm.fail("vm.receive-migration", RECEIVE, "There is already an ongoing migration")
        url = body["receiver_url"]
        if not _url_ok(url):
            raise self.vmm.fail("vm.receive-migration", RECEIVE, "Invalid receive migration configuration",
                                "receiver_url must use tcp:<host>:<port> or unix:<path>.")
        try:
            listener = _listen(url)
        except MigrationError as exc:
            raise self.vmm.fail("vm.receive-migration", *exc.chain) from None
        if self.vmm.config is not None:
            self.host.log("WARN", "The existing VM config will be overwritten")
        self.receiving = True
        self.host.event("vm", "migration-receive-ready")
        answer = self.host.defer()
        self.host.hold_api()
        threading.Thread(target=self._receiver, args=(listener, answer), name="vmm-receive", daemon=True).start()
        return answer

    def _receiver(self, listener: socket.socket, answer: Any) -> None:
        call = self.host.call
        try:
            sock, _ = listener.accept()
        except OSError as exc:
            call(lambda e=exc: self._received(answer, ["Error receiving migration", RECEIVE,
                                                       f"Failed to accept Unix migration connection: {_io(e)}"]))
            return
        call(lambda: self.host.event("vm", "migration-receive-started"))
        state = "Established"
        try:
            while state not in ("Completed", "Aborted"):
                command, headers, length = HEADER.unpack(read_exact(sock, HEADER.size))
                if command == ABANDON:
                    state, ok = "Aborted", True
                else:
                    try:
                        state = self._step(sock, state, command, headers, length)
                        ok = True
                    except MigrationError as exc:
                        self.host.call(lambda e=exc, c=command: self.host.log(
                            "WARN", f"Migration aborted as migration command {NAMES.get(c, c)} "
                                    f"failed: {': '.join(e.chain)}"))
                        state, ok = "Aborted", False
                try:
                    sock.sendall(HEADER.pack(OK if ok else ERROR, b"\0" * 6, 0))
                except OSError as exc:
                    raise MigrationError(SOCKET, _io(exc)) from None
        except Stuck:
            self.host.call(lambda: self.host.log("ERROR", "the sender went away in the middle of a memory range: "
                                                          "stuck for ever (as cloud-hypervisor v53.0)"))
            threading.Event().wait()  # never returns: the API stays held, signals wait
        except MigrationError as exc:
            chain = exc.chain
            sock.close()
            call(lambda: self.host.log("ERROR", "Failed to read migration request: sender likely failed, aborting"))
            call(lambda: self._received(answer, ["Error receiving migration", *chain], keep_config=True))
            return
        finally:
            listener.close()
        sock.close()
        if state == "Completed":
            call(lambda: self._received(answer, None))
        else:
            call(lambda: self._received(answer, ["Error receiving migration",
                                                 "Failed to complete migration for migratable component",
                                                 "Migration was aborted"]))

    def _step(self, sock: socket.socket, state: str, command: int, headers: bytes, length: int) -> str:
        """`vm_receive_migration_step`; consumes the payload. Raises MigrationError for an Error answer."""
        name = NAMES.get(command, str(command))

        def invalid() -> MigrationError:
            return MigrationError(RECEIVE, f"Can't handle command {name} in current receive state {state}")

        if state == "Established":
            if command != START:
                raise invalid()
            version = struct.unpack("<H", headers[:2])[0]
            if version != PROTOCOL_VERSION:
                raise MigrationError(RECEIVE, f"Migration protocol version {version} doesn't match supported "
                                              f"versions: {PROTOCOL_VERSION}")
            return "Started"
        if state in ("Started", "MemoryFdsReceived"):
            if command == MEMORY_FD:
                read_exact(sock, length)
                raise MigrationError(RECEIVE, "memory file descriptors need SCM_RIGHTS (local mode), which the "
                                              "simulated VMM does not receive")
            if command != CONFIG:
                raise invalid()
            payload = json.loads(read_exact(sock, length) or b"{}")
            if self.fail == "config":
                raise MigrationError(RECEIVE, "Error creating VM from snapshot (FAKE_CH_MIGRATION_FAIL=config)")
            error = self.host.call(lambda: self._configure(payload.get("vm_config") or {}))
            if error:
                raise MigrationError(RECEIVE, *error)
            return "Configured"
        if state == "Configured":
            if command == MEMORY:
                table = read_exact(sock, length)
                total = sum(struct.unpack_from("<QQ", table, i)[1] for i in range(0, len(table) - 15, 16))
                self._discard(sock, total)
                return "Configured"
            if command != STATE:
                raise invalid()
            read_exact(sock, length)
            error = self.host.call(self._restore)
            if error:
                raise MigrationError(*error)
            return "StateReceived"
        if state == "StateReceived":
            if command == COMPLETE:
                self.host.call(self._resume)
                return "Completed"
            if command == COMPLETE_PAUSED:
                return "Completed"
            raise invalid()
        raise invalid()

    @staticmethod
    def _discard(sock: socket.socket, total: int) -> None:
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        while total:
            try:
                n = sock.recv_into(view[:min(total, CHUNK)])
            except OSError:
                n = 0
            if n == 0:
                raise Stuck()
            total -= n

    def _configure(self, config: dict[str, Any]) -> list[str] | None:
        """`vm_receive_config`: the VM config and its devices (console, disks opened)."""
        self.vmm.config = config
        try:
            self.host.serial_start(config)
        except OSError as exc:
            return ["Error creating console devices", _io(exc)]
        return None

    def _restore(self) -> list[str] | None:
        """`vm_receive_state` + `Vm::restore`: the Vm object, disk locks, vCPUs (paused)."""
        from fakech_vm import VSOCK_BIND_FAILED, LockFailed, Vm  # the module imports us

        self.host.event("vm", "restoring")
        if self.fail == "restore":
            return ["Failed to restore migratable component", "FAKE_CH_MIGRATION_FAIL=restore"]
        assert self.vmm.config is not None
        try:
            ram = GuestRam.for_config(self.vmm.config)
        except RamFailed as exc:
            return ["Memory manager error", exc.what, _io(exc.error)]
        vm = Vm(self.vmm.config, ram)
        self.vmm.allocate_bdfs(vm)
        try:
            self.vmm.lock_disks(vm)
        except LockFailed as exc:
            return ["Failed to restore migratable component",
                    "Error locking disk images: Another instance likely holds a lock",
                    f"Failed to get {exc.access} lock for disk image: {exc.path}"]
        try:
            self.host.vsock.start(self.vmm.config, self.vmm.guest_shutdown)  # activated when the VM resumes
        except OSError as exc:
            vm.release()
            return ["Failed to restore migratable component", *VSOCK_BIND_FAILED, _io(exc)]
        vm.state = "Paused"
        self.vmm.vm = vm
        vm.vcpus.resize(int((self.vmm.config.get("cpus") or {}).get("boot_vcpus") or 1))  # Vm::restore makes them
        self.host.event("vm", "restored")
        return None

    def _resume(self) -> None:
        vm = self.vmm.vm
        assert vm is not None
        self.host.event("vm", "resuming")
        vm.state = "Running"
        self.host.event("vm", "resumed")
        self.vmm.schedule_activation(vm)

    def _received(self, answer: Any, chain: list[str] | None, keep_config: bool = False) -> None:
        """The end of a receive, on the main loop: events, the VMM's state, the held answer."""
        self.receiving = False
        if chain is None:
            self.host.event("vm", "migration-receive-finished")
            answer.resolve(204, None)
        else:
            # Aborted (an Error answered, or Abandon): `migration-receive-failed`, nothing kept.
            # A lost sender: an early return that keeps the received config (`vm.info`: Created).
            if not keep_config:
                self.host.event("vm", "migration-receive-failed")
                self.vmm.config = None
            if self.vmm.vm is not None:
                self.vmm.vm.release()
                self.vmm.vm = None
            self.host.vsock.stop()
            self.host.serial_stop()
            answer.resolve(500, ["Error from API", *chain])
        self.host.release_api()


def backtraces_enabled() -> bool:
    """Rust's std and anyhow capture backtraces when RUST_LIB_BACKTRACE, else RUST_BACKTRACE, is
    set to anything but 0."""
    value = os.environ.get("RUST_LIB_BACKTRACE", os.environ.get("RUST_BACKTRACE", "0"))
    return value not in ("", "0")


def thread_call(post: Callable[[Callable[[], None]], None], fn: Callable[[], Any]) -> Any:
    """Run `fn` on the main loop (through `post`) and wait for its result."""
    done = threading.Event()
    box: list[Any] = []

    def run() -> None:
        try:
            box.append((True, fn()))
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread
            box.append((False, exc))
        done.set()

    post(run)
    done.wait()
    ok, value = box[0]
    if not ok:
        raise value
    return value
