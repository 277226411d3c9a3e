#!/usr/bin/env python3
"""A simulated `cloud-hypervisor` for tests: same command line, same REST API, same events.

It runs no guest. It serves CH's HTTP API on `--api-socket` with micro_http's framing and CH's
answers per state and version, writes CH's event stream to `--event-monitor`, and exits as CH
does. Guest actions are simulated by signals (SIGUSR1 poweroff, SIGUSR2 reboot, SIGURG panic,
SIGPWR a vCPU failure such as a KVM emulation error) and `vm.power-button` (the guest powers off
after FAKE_CH_ACPI_DELAY seconds). Every knob and every known difference from the real binary:
docs/simulated-vmm.md.

Stdlib only (it must start fast under any python3 >= 3.11). Modules beside it:
`fakech_vm.py` (state machine), `fakech_checks.py` (validation, OpenAPI), `fakech_serial.py`,
`fakech_yaml.py` (reads the spec without PyYAML).
"""

from __future__ import annotations

import fcntl
import heapq
import json
import math
import os
import selectors
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import contextlib

import fakech_checks as checks
from fakech_agent import Agent, Guest
from fakech_migration import thread_call
from fakech_serial import SerialPort
from fakech_vm import ApiFailure, HttpFailure, Vmm
from fakech_vsock import Vsock

START = time.monotonic()
API_ROOT = "/api/v1/"
MAX_CONNECTIONS = 10
LINE_LIMIT = 1024
SERVER_FULL = (
    b"HTTP/1.1 503\r\nServer: Firecracker API\r\nConnection: close\r\n"
    b'Content-Length: 40\r\n\r\n{ "error": "Too many open connections" }'
)
# micro_http's Method::try_from knows only these; any other method is its own 400 "Invalid HTTP
# Method: Unsupported HTTP method." (seen on ../shared/vmm's v53.0: POST, HEAD, DELETE, OPTIONS).
KNOWN_METHODS = {"GET", "PUT", "PATCH"}

# Endpoints with their own EndpointHandler (http_endpoint.rs@v53); all others are VmActionHandlers.
OWN_HANDLERS = {"vm.create", "vm.info", "vmm.ping", "vmm.shutdown"}

# endpoint -> (method, body: "none" | "required" | "optional", first major version)
ROUTES: dict[str, tuple[str, str, int]] = {
    "vmm.ping": ("GET", "optional", 0),
    "vmm.shutdown": ("PUT", "none", 0),
    "vm.create": ("PUT", "required", 0),
    "vm.boot": ("PUT", "none", 0),
    "vm.info": ("GET", "optional", 0),
    "vm.counters": ("GET", "optional", 0),
    "vm.pause": ("PUT", "none", 0),
    "vm.resume": ("PUT", "none", 0),
    "vm.shutdown": ("PUT", "none", 0),
    "vm.reboot": ("PUT", "none", 0),
    "vm.power-button": ("PUT", "none", 0),
    "vm.nmi": ("PUT", "none", 0),
    "vm.delete": ("PUT", "none", 0),
    "vm.resize": ("PUT", "required", 0),
    "vm.resize-zone": ("PUT", "required", 0),
    "vm.resize-disk": ("PUT", "required", 50),
    "vm.add-disk": ("PUT", "required", 0),
    "vm.add-net": ("PUT", "required", 0),
    "vm.add-fs": ("PUT", "required", 0),
    "vm.add-pmem": ("PUT", "required", 0),
    "vm.add-vsock": ("PUT", "required", 0),
    "vm.add-vdpa": ("PUT", "required", 0),
    "vm.add-device": ("PUT", "required", 0),
    "vm.add-user-device": ("PUT", "required", 0),
    "vm.add-generic-vhost-user": ("PUT", "required", 52),
    "vm.remove-device": ("PUT", "required", 0),
    "vm.snapshot": ("PUT", "required", 0),
    "vm.restore": ("PUT", "required", 0),
    "vm.send-migration": ("PUT", "required", 0),
    "vm.receive-migration": ("PUT", "required", 0),
}

LEVELS = {"ERROR": 0, "WARN": 1, "INFO": 2, "DEBUG": 3}


def parse_version(text: str) -> tuple[int, int, int]:
    parts = ([*text.strip().lstrip("v").split("."), "0", "0"])[:3]
    try:
        return int(parts[0]), int(parts[1]), int(parts[2])
    except ValueError:
        sys.exit(f"FAKE_CH_VERSION={text!r} is not a version like 53.0.0")


class Options:
    api_socket: str | None = None
    api_fd: int | None = None
    event_monitor: str | None = None
    event_fd: int | None = None
    log_file: str | None = None
    verbosity = 0
    no_shutdown = False
    seccomp = "true"


def parse_args(argv: list[str], version: str) -> Options:
    """CH's flags for API-driven use (cloud-hypervisor/src/main.rs@v53.0); others exit 1."""
    opts = Options()
    valued = {"--api-socket", "--event-monitor", "--log-file", "--seccomp", "--landlock-rules", "--log-format"}
    i = 0
    while i < len(argv):
        arg = argv[i]
        value = None
        if arg.startswith("--") and "=" in arg and arg.split("=", 1)[0] in valued:
            arg, value = arg.split("=", 1)
        if arg in valued and value is None:
            if i + 1 >= len(argv):
                fail_start(f"error: a value is required for '{arg}'")
            i += 1
            value = argv[i]
        if arg == "--api-socket":
            if value.startswith("fd="):
                opts.api_fd = int(value[3:])
            else:
                opts.api_socket = value.removeprefix("path=")
        elif arg == "--event-monitor":
            if value.startswith("fd="):
                opts.event_fd = int(value[3:])
            elif value.startswith("path="):
                opts.event_monitor = value[5:]
            else:
                fail_start(f"Error parsing --event-monitor: {value!r}")
        elif arg == "--log-file":
            opts.log_file = value
        elif arg == "--seccomp":
            if value not in ("true", "false", "log", "errno"):
                fail_start(f"error: invalid value '{value}' for '--seccomp'")
            opts.seccomp = value
        elif arg in ("--landlock-rules", "--log-format"):
            pass
        elif arg in ("-v", "-vv", "-vvv"):
            opts.verbosity += len(arg) - 1
        elif arg == "--no-shutdown":
            opts.no_shutdown = True
        elif arg == "--landlock":
            pass
        elif arg in ("-V", "--version"):
            print(f"cloud-hypervisor v{version}")
            sys.exit(0)
        else:
            fail_start(f"error: unexpected argument '{arg}' found (the simulated VMM boots only through the API)")
        i += 1
    return opts


def env_seconds(name: str, default: float | None, allow_never: bool = False,
                what: str = "a number of seconds") -> float | None:
    """A duration knob; `never` gives None where allowed. A bad value stops the VMM at start
    (exit 2) with a message naming the variable, never a crash later."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if allow_never and text.lower() == "never":
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1e9:  # also refuses nan and inf (time.sleep(inf) would crash)
        fail_start(f"{name}={text!r} is not {what}" + (" or 'never'" if allow_never else ""), 2)
    return value


def env_port(name: str) -> int | None:
    """A vsock port knob (unset: None); a bad value stops the VMM at start (exit 2)."""
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) >= 2**32:
        fail_start(f"{name}={text!r} is not a vsock port (0 to 4294967295)", 2)
    return int(text)


def parse_slow_endpoints(text: str) -> dict[str, float]:
    """FAKE_CH_SLOW_ENDPOINT: `vm.pause=1.5[,vm.resume=2]` -> {endpoint: seconds}; exit 2 if bad."""
    out: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        endpoint, _, seconds = item.partition("=")
        try:
            value = float(seconds)
        except ValueError:
            value = float("nan")
        if not endpoint or not math.isfinite(value) or value < 0:
            fail_start(f"FAKE_CH_SLOW_ENDPOINT={text!r}: expected endpoint=seconds[,...]", 2)
        out[endpoint] = value
    return out


def fail_start(message: str, code: int = 1) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    os._exit(code)


def check_hypervisor() -> None:
    """CH opens /dev/kvm before anything else (`hypervisor::new()` in cloud-hypervisor/src/
    main.rs@v53.0, before `vmm:starting` and the API socket) and exits 1 when it cannot. The
    simulation exists to run where KVM is not usable, so it does the same only when asked
    (`FAKE_CH_CHECK_KVM=1`, which the tests' pod sandbox sets: a pod's /dev/kvm comes from the
    device plugin), and only for a /dev/kvm that exists but cannot be opened."""
    if os.environ.get("FAKE_CH_CHECK_KVM", "") in ("", "0"):
        return
    try:
        os.close(os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC))
    except FileNotFoundError:
        return
    except OSError as exc:
        fail_start("Error: Cloud Hypervisor exited with the following chain of errors:\n"
                   "  0: Failed to open hypervisor interface (is hypervisor interface available?)\n"
                   "  1: Failed to create Vm\n"
                   f"  2: {os.strerror(exc.errno or 0)} (os error {exc.errno})", 1)


class FakeCloudHypervisor:
    """The process: event monitor, API server, signals, timers, serial port; owns a `Vmm`."""

    def __init__(self, opts: Options, version: tuple[int, int, int]) -> None:
        self.opts = opts
        self.version = version
        self.no_shutdown = opts.no_shutdown
        self.sel = selectors.DefaultSelector()
        self.timers: list[tuple[float, int, Callable[[], None]]] = []
        self.timer_seq = 0
        self.exit_code: int | None = None
        self.pending_signals: list[str] = []  # guest/VMM actions, run by the main loop
        self.hung = False
        self.api_held = False  # a blocking call (vm.receive-migration) is in progress: serve nothing else
        self.posted: list[Callable[[], None]] = []  # work handed to the main loop by other threads
        self.listener: socket.socket | None = None
        self.conns: dict[int, Conn] = {}
        self.log_fd = 2
        self.event_fd: int | None = None
        self.request_log = os.environ.get("FAKE_CH_REQUEST_LOG")
        self.hang_endpoint = os.environ.get("FAKE_CH_HANG_ENDPOINT", "").strip()
        self.dropped_events = {e.strip() for e in os.environ.get("FAKE_CH_DROP_EVENTS", "").split(",") if e.strip()}
        self.slow_endpoints = parse_slow_endpoints(os.environ.get("FAKE_CH_SLOW_ENDPOINT", ""))
        self.event_delay = env_seconds("FAKE_CH_EVENT_DELAY", 0.0)
        self.stalled = False  # a slow answer is pending: no other request is served meanwhile
        self.exit_linger = env_seconds("FAKE_CH_EXIT_LINGER", 0.0)
        self.lingering = False  # the VMM thread has stopped; the API thread still answers
        self.payload_limit = 4 << 20 if version[0] >= 54 else 51200
        self.acpi_delay = env_seconds("FAKE_CH_ACPI_DELAY", 0.2, allow_never=True)
        self.vcpu_removal_delay = env_seconds("FAKE_CH_VCPU_REMOVAL_DELAY", 0.1, allow_never=True)
        self.eject_delay = env_seconds("FAKE_CH_EJECT_DELAY", 0.05, allow_never=True)
        self.virtio_mem_delay = env_seconds("FAKE_CH_VIRTIO_MEM_DELAY", 0.05, allow_never=True)
        self.dirty_pages = env_seconds("FAKE_CH_DIRTY_PAGES", 0.0, what="a number of pages per second") or 0.0
        self.vsock = Vsock(self.sel, self.log, Guest, Agent)
        self.guest_agent_port = env_port("FAKE_CH_GUEST_AGENT")
        self.vsock_driver = os.environ.get("FAKE_CH_VSOCK_DRIVER", "").strip().lower() != "never"
        self.serial = SerialPort(self.sel, buffer_when_detached=version[0] >= 53, log=self.log,
                                 on_line=self.vsock.console)
        self.vmm = Vmm(self)
        spec_path = os.environ.get("FAKE_CH_OPENAPI") or os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "reference", "data",
            "cloud-hypervisor-v53.0.yaml",
        )  # fmt: skip
        self.spec_path = spec_path
        self.schemas: dict[str, Any] | None = None
        self.schemas_loaded = False

    def load_schemas(self) -> bool:
        """Loads the OpenAPI spec on first use (keeps start-up fast); False if unavailable."""
        if not self.schemas_loaded:
            self.schemas_loaded = True
            self.schemas = checks.load_spec(self.spec_path)
            if self.schemas is None:
                self.log("INFO", f"OpenAPI spec {self.spec_path} unavailable: request bodies are not checked")
        return self.schemas is not None

    # --- Host interface for Vmm -----------------------------------------------------------

    def log(self, level: str, message: str) -> None:
        if LEVELS.get(level, 2) > 1 + self.opts.verbosity:
            return
        elapsed = time.monotonic() - START
        line = f"cloud-hypervisor: {elapsed * 1000:.6f}ms: <fake> {level}:fake_cloud_hypervisor -- {message}\n"
        with contextlib.suppress(OSError):
            os.write(self.log_fd, line.encode())

    def event(self, source: str, event: str, properties: dict[str, str] | None = None) -> None:
        """One event, as serde_json::to_string_pretty + "\\n\\n"; dropped if the pipe is full."""
        elapsed = time.monotonic() - START
        obj = {
            "timestamp": {"secs": int(elapsed), "nanos": int((elapsed % 1) * 1e9)},
            "source": source,
            "event": event,
            "properties": properties,
        }
        self.log("INFO", f"event: {source}:{event} {properties or ''}")
        if self.event_fd is None:
            return
        if f"{source}:{event}" in self.dropped_events:
            self.log("WARN", f"event {source}:{event} not written (FAKE_CH_DROP_EVENTS)")
            return
        data = (json.dumps(obj, indent=2, ensure_ascii=False) + "\n\n").encode()  # serde: raw UTF-8
        if self.event_delay:
            # CH's event-monitor thread writes later, in order, and not at all once the process
            # has exited (it is not joined): the timers run in order and die with the process.
            self.schedule(self.event_delay, lambda: self.write_event(data, f"{source}:{event}"))
            return
        self.write_event(data, f"{source}:{event}")

    def write_event(self, data: bytes, name: str) -> None:
        assert self.event_fd is not None
        try:
            os.write(self.event_fd, data)
        except BlockingIOError:
            self.log("WARN", f"event monitor is full, dropped {name}")
        except OSError as exc:
            self.log("WARN", f"event monitor write failed ({exc}), dropped {name}")

    def schedule(self, delay: float, fn: Callable[[], None]) -> None:
        self.timer_seq += 1
        heapq.heappush(self.timers, (time.monotonic() + delay, self.timer_seq, fn))

    def serial_start(self, config: dict[str, Any]) -> str | None:
        return self.serial.start(config)

    def serial_stop(self) -> None:
        self.serial.stop()

    def serial_boot(self) -> None:
        self.serial.boot()

    def request_exit(self, code: int) -> None:
        if self.exit_code is not None or self.lingering:
            return
        if self.exit_linger:
            # The VMM thread is done; until the process exits, the API thread answers every
            # request with the closed channel's error (as v53.0 does, for a moment).
            self.lingering = True
            self.log("INFO", f"exiting in {self.exit_linger} s (FAKE_CH_EXIT_LINGER)")
            self.schedule(self.exit_linger, lambda: setattr(self, "exit_code", code))
            return
        self.exit_code = code

    def stall(self, delay: float, answer: Callable[[], None]) -> None:
        """Answer after `delay` s; no other request is served meanwhile (one at a time)."""
        self.stalled = True

        def done() -> None:
            self.stalled = False
            answer()
            for conn in list(self.conns.values()):
                conn.drain()

        self.schedule(delay, done)

    @property
    def seccomp_kills(self) -> bool:
        return self.opts.seccomp == "true"

    def fatal_signal(self, stderr: str) -> None:
        """Killed by the kernel (SIGSYS): no clean-up, no exit code of our own."""
        sys.stderr.write(stderr + "\n")
        sys.stderr.flush()
        signal.signal(signal.SIGSYS, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGSYS)

    def fatal_exit(self, code: int, stderr: str) -> None:
        sys.stderr.write(stderr + "\n")
        sys.stderr.flush()
        self.request_exit(code)

    def post(self, fn: Callable[[], None]) -> None:
        """Thread-safe: run `fn` on the main loop soon."""
        self.posted.append(fn)
        with contextlib.suppress(OSError):
            os.write(self.wake_fd, b"p")

    def call(self, fn: Callable[[], Any]) -> Any:
        """From another thread: run `fn` on the main loop and return its result."""
        return thread_call(self.post, fn)

    def defer(self) -> Deferred:
        return Deferred(self)

    def hold_api(self) -> None:
        self.api_held = True

    def release_api(self) -> None:
        self.api_held = False
        for conn in list(self.conns.values()):
            conn.drain()

    # --- start-up -------------------------------------------------------------------------

    def start(self) -> None:
        os.umask(0o077)
        if self.opts.log_file:
            try:
                self.log_fd = os.open(self.opts.log_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                fail_start(f"Error creating log file: {checks.io_error(exc)}")
        self.log("INFO", f"fake cloud-hypervisor v{'.'.join(map(str, self.version))} starting, pid {os.getpid()}")
        if self.opts.event_monitor:
            # CH opens path= with create+truncate, blocking: on a FIFO it waits for a reader.
            try:
                fd = os.open(self.opts.event_monitor, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                fail_start(f"Error starting the event monitor: {checks.io_error(exc)}")
            os.set_blocking(fd, False)
            self.event_fd = fd
        elif self.opts.event_fd is not None:
            self.event_fd = self.opts.event_fd
            os.set_blocking(self.event_fd, False)
        # Handlers before `vmm:starting`: once a test has seen that event, a signal it sends is
        # acted on, never lost to the default action while the rest of start-up runs.
        for sig, action in (
            (signal.SIGTERM, "exit"), (signal.SIGINT, "exit"), (signal.SIGUSR1, "poweroff"),
            (signal.SIGUSR2, "reboot"), (signal.SIGURG, os.environ.get("FAKE_CH_PANIC_EVENT", "panic")),
            (signal.SIGPWR, "emulation-failure"),
        ):  # fmt: skip
            signal.signal(sig, lambda _s, _f, a=action: self.pending_signals.append(a))
        rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
        self.sel.register(rfd, selectors.EVENT_READ, lambda _: os.read(rfd, 512))
        prfd, self.wake_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.sel.register(prfd, selectors.EVENT_READ, lambda _: self.run_posted(prfd))
        check_hypervisor()
        self.event("vmm", "starting")
        delay = env_seconds("FAKE_CH_START_DELAY", 0.0)
        if delay > 0:
            time.sleep(delay)
        exit_at_start = os.environ.get("FAKE_CH_EXIT_AT_START", "").strip()
        if exit_at_start and not exit_at_start.isdigit():
            fail_start(f"FAKE_CH_EXIT_AT_START={exit_at_start!r} is not an exit code (0-255)", 2)
        if exit_at_start:
            self.log("ERROR", f"exiting at start-up with code {exit_at_start} (FAKE_CH_EXIT_AT_START)")
            fail_start(f"Error booting VMM: simulated start-up failure (FAKE_CH_EXIT_AT_START={exit_at_start})",
                       int(exit_at_start))  # fmt: skip
        if os.environ.get("FAKE_CH_NO_API_SOCKET", "") not in ("", "0"):
            self.log("WARN", "not binding the API socket (FAKE_CH_NO_API_SOCKET)")
        else:
            self.bind_api_socket()

    def bind_api_socket(self) -> None:
        if self.opts.api_fd is not None:
            lst = socket.socket(fileno=self.opts.api_fd)
        else:
            path = self.opts.api_socket
            if not path:
                return
            if self.version[0] >= 53:
                # v53+: an exclusive lock on <path>.lock, then a stale socket is removed.
                lock_fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    fail_start(f"Error booting VMM: ApiSocketInUse: the API socket {path} is in use by another "
                               "instance")
                self.api_lock_fd = lock_fd
                if os.path.exists(path):
                    os.unlink(path)
            lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                lst.bind(path)
            except OSError as exc:
                fail_start(f"Error booting VMM: Error creating API server socket: {checks.io_error(exc)}")
            lst.listen(64)
        lst.setblocking(False)
        self.listener = lst
        self.sel.register(lst, selectors.EVENT_READ, self.accept)
        self.log("INFO", f"API server listening on {self.opts.api_socket or 'fd'}")

    # --- main loop ------------------------------------------------------------------------

    def run(self) -> int:
        while self.exit_code is None:
            self.process_signals()
            if self.exit_code is not None:
                break
            now = time.monotonic()
            while self.timers and self.timers[0][0] <= now and self.exit_code is None:
                _, _, fn = heapq.heappop(self.timers)
                fn()
            if self.exit_code is not None:
                break
            timeout = max(0.0, self.timers[0][0] - now) if self.timers else 1.0
            for key, _ in self.sel.select(min(timeout, 1.0)):
                # A signal sent before a request is acted on before that request is answered,
                # so a test can signal the guest and then observe the result through the API.
                self.process_signals()
                if self.exit_code is not None:
                    break
                key.data(key)
                if self.exit_code is not None:
                    break
        self.cleanup()
        return self.exit_code

    def run_posted(self, fd: int) -> None:
        with contextlib.suppress(OSError):
            os.read(fd, 4096)
        while self.posted and self.exit_code is None:
            self.posted.pop(0)()

    def process_signals(self) -> None:
        # A VMM receiving a migration acts on nothing until the receive ends (its VMM thread is
        # inside vm_receive_migration); signals wait.
        while self.pending_signals and not self.vmm.migrations.receiving:
            action = self.pending_signals.pop(0)
            self.log("INFO", f"signal: {action}")
            if action == "exit":
                if self.vmm.migrations.exit_requested():
                    self.vmm.shutdown_vmm()
            else:
                self.vmm.guest(action)

    def cleanup(self) -> None:
        self.vsock.stop()
        self.serial.stop()
        for conn in list(self.conns.values()):
            conn.close()
        if self.listener is not None:
            self.listener.close()
            if self.opts.api_socket:
                with contextlib.suppress(OSError):
                    os.unlink(self.opts.api_socket)  # a clean exit removes the socket
        self.log("INFO", f"exiting with code {self.exit_code}")

    # --- HTTP (micro_http) ----------------------------------------------------------------

    def accept(self, _: Any) -> None:
        assert self.listener is not None
        try:
            sock, _addr = self.listener.accept()
        except BlockingIOError:
            return
        if len(self.conns) >= MAX_CONNECTIONS:
            with contextlib.suppress(OSError):
                sock.sendall(SERVER_FULL)
            sock.close()
            return
        sock.setblocking(False)
        conn = Conn(self, sock)
        self.conns[sock.fileno()] = conn
        self.sel.register(sock, selectors.EVENT_READ, conn.readable)

    def handle(self, method: str, target: str, body: bytes) -> bytes | None:
        """One request -> the raw response (None: never answer, FAKE_CH_HANG_ENDPOINT)."""
        path = target.split("?", 1)[0]
        endpoint = path[len(API_ROOT):] if path.startswith(API_ROOT) else None
        parsed: Any = None
        bad_json: ValueError | None = None
        if body:
            try:
                parsed = json.loads(body)
            except ValueError as exc:
                parsed, bad_json = body.decode("utf-8", errors="replace"), exc
        self.record(method, path, parsed)
        if self.lingering:
            return self.error(500, ["Error from API", "API request send error", "sending on a closed channel"])
        route = ROUTES.get(endpoint or "")
        if route is None or self.version[0] < route[2]:
            return self.error(404, ["Not Found"])
        want, body_rule, _ = route
        if method == "PATCH" and endpoint not in OWN_HANDLERS:
            # VmActionHandler gets only GET and PUT: any other method is a bare Response::new(
            # BadRequest), empty body and Content-Length: 0 (vmm/src/api/http/mod.rs@v53).
            return self.response(400, b"")
        if method != want:  # the other one of GET/PUT; PATCH on an endpoint with its own handler
            return self.error(400, ["Bad Request"])
        if body_rule == "none" and body:
            return self.error(400, ["Bad Request"])
        if body_rule == "required":
            if not body:
                if endpoint == "vm.create":  # a bare Response::new(BadRequest): empty body, Content-Length: 0
                    return self.response(400, b"")  # (vmm/src/api/http/http_endpoint.rs@v53, VmCreate)
                return self.error(400, ["Bad Request"])
            if bad_json is not None:
                return self.error(400, ["Failed to deserialize JSON", serde_message(bad_json)])
            schema = checks.BODY_SCHEMA.get(endpoint)
            if schema and self.load_schemas():
                assert self.schemas is not None
                errors, unknown = checks.check_schema(parsed, schema, self.schemas, prune=True)
                for field in unknown:
                    self.log("WARN", f"{endpoint}: unknown field `{field}` ignored (the real VMM ignores it silently)")
                if errors:
                    return self.error(400, ["Failed to deserialize JSON", errors[0]])
        if endpoint == self.hang_endpoint:
            self.log("WARN", f"{endpoint}: never answering (FAKE_CH_HANG_ENDPOINT); the API is stalled")
            self.hung = True
            return None
        try:
            result = self.vmm.handle(endpoint, parsed if body_rule == "required" else None)
            if isinstance(result, Deferred):
                return result  # answered later (vm.receive-migration); the API is held meanwhile
            status, payload = result
        except ApiFailure as exc:
            self.log("ERROR", f"{endpoint}: {exc.chain}")
            return self.error(self.vmm.error_status(exc.kind), exc.chain)
        except HttpFailure as exc:
            return self.error(exc.status, exc.chain)
        except Exception as exc:  # noqa: BLE001 - a bug here must show as a 500, not kill the VMM
            import traceback

            self.log("ERROR", f"{endpoint}: simulated VMM bug: {traceback.format_exc()}")
            return self.error(500, ["Error from API", f"simulated VMM internal error: {exc!r}"])
        if status == 204:
            return self.response(204, None)
        if isinstance(payload, bytes):
            return self.response(status, payload)
        return self.response(status, compact(payload))

    def record(self, method: str, path: str, body: Any) -> None:
        if not self.request_log:
            return
        line = json.dumps({"method": method, "path": path, "body": body}) + "\n"
        with open(self.request_log, "a") as f:
            f.write(line)

    def response(self, status: int, body: bytes | None, server: str = "Cloud Hypervisor API") -> bytes:
        """micro_http's framing: empty reason phrase; no body headers on 204."""
        head = f"HTTP/1.1 {status} \r\nServer: {server}\r\nConnection: keep-alive\r\n"
        if status == 204 or body is None:
            return (head + "\r\n").encode()
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        return (head + "\r\n").encode() + body

    def error(self, status: int, chain: list[str]) -> bytes:
        """An API or HTTP-level error: the chain as a JSON array (v47+), or as plain text
        (<= v46: every Display joined, "Error from API: ...: root")."""
        if self.version[0] <= 46:
            return self.response(status, ": ".join(chain).encode())
        return self.response(status, compact(chain))

    def parse_error(self, what: str) -> bytes:
        """micro_http's own 400: a JSON-ish object (with a raw newline), Server: Firecracker API."""
        text = f'{{ "error": "{what}\nAll previous unanswered requests will be dropped." }}'
        return self.response(400, text.encode(), server="Firecracker API")


def compact(value: Any) -> bytes:
    """serde_json::to_string: no spaces."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def serde_message(exc: ValueError) -> str:
    msg = getattr(exc, "msg", str(exc))
    line, col = getattr(exc, "lineno", 1), getattr(exc, "colno", 1)
    return f"{msg[:1].lower()}{msg[1:]} at line {line} column {col}"


class Deferred:
    """An answer given later, on the main loop: `resolve(status, payload)` sends it on the
    connection that asked (if still open) and lets the held API serve again."""

    def __init__(self, server: FakeCloudHypervisor) -> None:
        self.server = server
        self.conn: Conn | None = None

    def resolve(self, status: int, payload: Any) -> None:
        server = self.server
        if status == 204:
            data = server.response(204, None)
        elif status >= 400:
            data = server.error(status, payload)
        else:
            data = server.response(status, compact(payload))
        conn, self.conn = self.conn, None
        if conn is not None and not conn.closed:
            conn.waiting = None
            conn.send(data)


class Conn:
    """One client connection: buffers bytes, parses requests by Content-Length, one at a time."""

    def __init__(self, server: FakeCloudHypervisor, sock: socket.socket) -> None:
        self.server, self.sock = server, sock
        self.buf = bytearray()
        self.closed = False
        self.garbled = False  # after an oversized body: out of step for good (garble)
        self.waiting: Deferred | None = None

    def readable(self, _: Any) -> None:
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.close()
            return
        self.buf += data
        self.drain()

    def drain(self) -> None:
        if self.garbled:
            return self.garble()
        while (not self.closed and not self.server.hung and not self.server.stalled
               and not self.server.api_held and self.waiting is None
               and self.server.exit_code is None):
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0:
                first = self.buf.split(b"\r\n", 1)[0]
                if len(first) > LINE_LIMIT:
                    self.fail("Invalid header. Reason: Header line is too long")
                return None
            lines = bytes(self.buf[:head_end]).split(b"\r\n")
            request_line = lines[0].decode("latin-1")
            parts = request_line.split(" ")
            if any(len(line) > LINE_LIMIT for line in lines):
                return self.fail("Invalid header. Reason: Header line is too long")
            if len(parts) != 3:
                return self.fail("Invalid request.")
            method, target, proto = parts
            if method not in KNOWN_METHODS:
                return self.fail("Invalid HTTP Method: Unsupported HTTP method.")
            if proto not in ("HTTP/1.0", "HTTP/1.1"):
                return self.fail(f"Invalid HTTP Version: {proto}")
            length = 0
            for raw in lines[1:]:
                name, _, value = raw.decode("latin-1").partition(":")
                if name.strip().lower() == "content-length":
                    try:
                        length = int(value.strip())
                    except ValueError:
                        return self.fail("Invalid header. Reason: Invalid value. Key:Content-Length; "
                                         f"Value:{value.strip()}")
            if length > self.server.payload_limit:
                del self.buf[: head_end + 4]
                self.send(self.server.parse_error(
                    f"Request payload with size {length} is larger than the limit of "
                    f"{self.server.payload_limit} allowed by server."
                ))
                self.garbled = True
                return self.garble()
            if len(self.buf) < head_end + 4 + length:
                return None
            body = bytes(self.buf[head_end + 4 : head_end + 4 + length])
            del self.buf[: head_end + 4 + length]
            answer = self.server.handle(method, target, body)
            if answer is None:
                return None  # hung: never answered; the connection stays open
            if isinstance(answer, Deferred):
                answer.conn, self.waiting = self, answer
                return None
            delay = self.server.slow_endpoints.get(target.split("?", 1)[0].rsplit("/", 1)[-1])
            if delay and not self.server.lingering:
                self.server.log("WARN", f"{target}: done, answering in {delay} s (FAKE_CH_SLOW_ENDPOINT)")
                self.server.stall(delay, lambda answer=answer: self.send(answer))
                return None
            self.send(answer)
        return None

    def send(self, data: bytes) -> None:
        try:
            self.sock.setblocking(True)
            self.sock.sendall(data)
            self.sock.setblocking(False)
        except OSError:
            self.close()

    def fail(self, what: str) -> None:
        self.buf.clear()
        self.send(self.server.parse_error(what))

    def garble(self) -> None:
        """After an oversized body micro_http does not skip it: it parses the rest of the stream
        in 1 KiB reads as header lines, answering each with a 400 `Invalid header` object, and
        never finds a request boundary again (seen on ../shared/vmm's v53.0). So every later
        byte on this connection gets such an answer, until the client closes it."""
        while self.buf and not self.closed:
            piece = bytes(self.buf[:LINE_LIMIT])
            del self.buf[:LINE_LIMIT]
            text = piece.decode("latin-1").replace("\r", "").replace("\n", "")
            self.send(self.server.parse_error(f"Invalid header. Reason: Invalid content length. Header: {text}"))

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(KeyError, ValueError):
            self.server.sel.unregister(self.sock)
        self.server.conns.pop(self.sock.fileno(), None)
        self.sock.close()


def _name_after_argv0() -> None:
    """A real binary's process is named (comm, 15 characters) after the path it was executed by:
    `cloud-hyperviso`, or `qemu-system-clo` through the launcher's alias. A script run through
    `#!/usr/bin/env python3` would be `python3`; take the name the real binary would have, since
    virt-handler finds the VMM by it (docs/process-model.md)."""
    try:
        with open("/proc/self/comm", "w") as f:
            f.write(os.path.basename(sys.argv[0])[:15])
    except OSError:
        pass


def main() -> int:
    _name_after_argv0()
    version_text = os.environ.get("FAKE_CH_VERSION", "53.0.0")
    version = parse_version(version_text)
    opts = parse_args(sys.argv[1:], ".".join(map(str, version)))
    server = FakeCloudHypervisor(opts, version)
    server.start()
    return server.run()


if __name__ == "__main__":
    sys.exit(main())
