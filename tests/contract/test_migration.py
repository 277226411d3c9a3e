"""Cloud Hypervisor's own migration (`vm.send-migration` / `vm.receive-migration`) on both
backends: the simulated VMM must answer, emit and fail as the real v53.0 does.

The real VMM runs the tiny guest. On a PVM host (this project's machines) the real switch-over
always fails, after every byte of memory was sent: PVM does not give a vCPU's nested state
(`GetNestedState(Invalid argument)`, docs/migration.md §2). Those tests assert what the real
binary does on the host they run on; the simulation covers both outcomes (`FAKE_CH_MIGRATION_FAIL`).
"""

from __future__ import annotations

import contextlib
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from ch_launcher.ch.api import ChApiError, Conflict, InternalError, VmmUnavailable
from tests.contract.harness import FAKE, Backend, Vmm
from tests.contract.migration_support import Receive, host_snapshots_vcpus, no_backtrace_env
from tests.contract.vcpu_support import vcpu_threads

HEADER = struct.Struct("<H6sQ")
START, CONFIG, STATE, MEMORY, COMPLETE, ABANDON = 1, 2, 3, 4, 5, 6
MEMORY_SIZE = 64 << 20


def expect_complete(backend: Backend) -> bool:
    return not backend.real or host_snapshots_vcpus()


class Gate:
    """A unix-socket relay between a sender and a receiver that can hold the stream after a
    number of bytes (`hold_after`), let it go on (`release`), or cut it (`cut`)."""

    def __init__(self, listen: str, upstream: str, hold_after: int | None = None) -> None:
        self.listen, self.upstream = listen, upstream
        self.hold_after = hold_after
        self.forwarded = 0
        self.go = threading.Event()
        self.held = threading.Event()
        self.sockets: list[socket.socket] = []
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(listen)
        self.server.listen(1)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            a, _ = self.server.accept()
            b = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            b.connect(self.upstream)
            self.sockets += [a, b]
            threading.Thread(target=self._pipe, args=(b, a, False), daemon=True).start()
            self._pipe(a, b, True)

    def _pipe(self, src: socket.socket, dst: socket.socket, forward: bool) -> None:
        with contextlib.suppress(OSError):
            while True:
                limit = 1 << 20
                if forward and self.hold_after is not None and not self.go.is_set():
                    limit = min(limit, self.hold_after - self.forwarded)
                    if limit <= 0:
                        self.held.set()
                        self.go.wait()
                        continue
                data = src.recv(limit)
                if not data:
                    break
                dst.sendall(data)
                if forward:
                    self.forwarded += len(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def release(self) -> None:
        self.go.set()

    def cut(self) -> None:
        for s in self.sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        self.go.set()

    def close(self) -> None:
        self.cut()
        self.server.close()


def boot_source(start: Callable[..., Vmm], backend: Backend, env: dict[str, str] | None = None, **config: Any) -> Vmm:
    vmm = start(backend, name="src", env={**no_backtrace_env(), **(env or {})})
    vmm.client.create(vmm.config(memory={"size": MEMORY_SIZE}, **config))
    vmm.client.boot()
    # the VMM writes its events from its own threads, possibly after vm.boot answered: a mark set
    # before they are read would count them as the migration's
    vmm.events.wait_for("vm:booted", timeout=30, after_mark=False)
    return vmm


def vm_events(vmm: Vmm) -> list[str]:
    """The `vm:` and `vmm:` events since the mark (a guest's `virtio-device:*` ones come when it likes)."""
    return [n for n in vmm.events.since_mark() if n.startswith(("vm:", "vmm:"))]


def log_mentions(path: str, text: str, timeout: float = 10.0) -> bool:
    """True once the VMM's log holds `text` (the VMM thread writes it after the event)."""
    deadline = time.monotonic() + timeout
    while True:
        with open(path, errors="replace") as f:
            if text in f.read():
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def wait_exit(vmm: Vmm, timeout: float) -> int | None:
    return vmm.proc.wait(timeout)


def test_a_migration_sends_the_memory_and_completes_or_fails_at_the_switch_over(backend, start, sdir):
    """The whole exchange: send returns at once, the receiver blocks until the end; then the
    source's VM is gone (its VMM exits 0, without vm:shutdown) and the target's runs, or, where
    vCPU state cannot be read, the source resumes its VM and the receiver fails."""
    src = boot_source(start, backend)
    dst = start(backend, name="dst", env=no_backtrace_env())
    receive = Receive(dst, f"unix:{sdir}/mig.sock")
    src.events.set_mark()
    begun = time.monotonic()
    src.client.send_migration(f"unix:{sdir}/mig.sock")
    assert time.monotonic() - begun < 2.0, "v53's send-migration returns at once"
    result = receive.wait()
    if expect_complete(backend):
        assert result == "ok"
        assert wait_exit(src, 20) == 0
        names = vm_events(src)
        assert names[:2] == ["vm:migration-started", "vm:migration-memory-iteration"]
        assert names[-4:] == ["vm:snapshotted", "vm:migration-finished", "vm:deleted", "vmm:shutdown"]
        assert "vm:shutdown" not in names and "vm:paused" in names
        assert "vm:migration-receive-finished" in dst.events.names()
        assert dst.client.info().state == "Running"
        assert vcpu_threads(dst.proc.pid) == ["vcpu0"]  # the restored VM's vCPUs run there
    else:
        assert isinstance(result, InternalError)
        assert result.messages[-2:] == ["Socket error", "failed to fill whole buffer"]
        src.events.wait_for("vm:resumed", timeout=20)
        names = vm_events(src)
        assert names == ["vm:migration-started", "vm:migration-memory-iteration", "vm:pausing", "vm:paused",
                         "vm:snapshotting", "vm:migration-failed", "vm:resuming", "vm:resumed"]
        assert src.client.info().state == "Running"
        assert vcpu_threads(src.proc.pid) == ["vcpu0"]  # its vCPUs run on
        assert log_mentions(f"{sdir}/src.log", "GetNestedState(Invalid argument (os error 22))")
        assert dst.client.info().state == "Created", "a failed receive keeps the config it received"
        assert "vm:migration-receive-failed" not in dst.events.names()


@pytest.mark.parametrize("env", [{}, {"RUST_BACKTRACE": "1", "RUST_LIB_BACKTRACE": "1"}],
                         ids=["no-backtrace", "RUST_BACKTRACE=1"])
def test_a_switch_over_that_cannot_read_the_vcpu_state(start, sdir, env):
    """The simulated PVM failure, as the real binary shows it: the source resumes its VM;
    with RUST_BACKTRACE set, its own seccomp filter kills it first (SIGSYS) and the VM is lost."""
    src = boot_source(start, FAKE, env={"FAKE_CH_MIGRATION_FAIL": "snapshot", **env})
    dst = start(FAKE, name="dst")
    receive = Receive(dst, f"unix:{sdir}/mig.sock")
    src.events.set_mark()
    src.client.send_migration(f"unix:{sdir}/mig.sock")
    assert isinstance(receive.wait(), InternalError)
    if env:
        assert wait_exit(src, 20) == -signal.SIGSYS
        assert vm_events(src)[-1] == "vm:snapshotting"
    else:
        src.events.wait_for("vm:resumed", timeout=20)
        assert src.client.info().state == "Running"
        assert vcpu_threads(src.proc.pid) == ["vcpu0"]  # its vCPUs run on, as on the real VMM (above)


def test_while_sending_the_vm_cannot_be_changed_and_vm_info_answers_the_snapshot(backend, start, sdir):
    src = boot_source(start, backend)
    dst = start(backend, name="dst", env=no_backtrace_env())
    Receive(dst, f"unix:{sdir}/mig.sock")
    gate = Gate(f"{sdir}/gate.sock", f"{sdir}/mig.sock", hold_after=1 << 20)
    try:
        src.events.set_mark()
        src.client.send_migration(f"unix:{sdir}/gate.sock")
        assert gate.held.wait(10)
        for call, action in ((src.client.pause, "The VM could not be paused"),
                             (src.client.shutdown, "The VM could not shutdown"),
                             (src.client.power_button, "Error triggering power button"),
                             (src.client.reboot, "The VM could not reboot")):
            with pytest.raises(Conflict) as refused:
                call()
            assert refused.value.status == 500
            assert refused.value.messages[1:] == [action, "VM is currently migrating and can't be modified"]
        src.events.wait_for("vm:rebooting", timeout=10)  # vm_reboot announces itself before it checks
        with pytest.raises(ChApiError) as again:
            src.client.send_migration(f"unix:{sdir}/gate.sock")
        assert again.value.messages[1:] == ["Error dispatching the migration worker",
                                            "Failed to send migratable component snapshot",
                                            "There is already an ongoing migration"]
        assert src.client.info().state == "Running"
    finally:
        gate.cut()
    src.events.wait_for("vm:migration-failed", timeout=20)
    assert src.client.info().state == "Running"


def test_send_refuses_what_its_transport_cannot_do(backend, start, sdir):
    src = boot_source(start, backend)
    with pytest.raises(ChApiError) as many:
        src.client._put("vm.send-migration", {"destination_url": f"unix:{sdir}/x.sock", "connections": 2})
    assert many.value.messages[-1] == ("Error validating send migration parameters: UNIX sockets and connections "
                                       "option cannot be used at the same time.")
    with pytest.raises(ChApiError) as local:
        src.client._put("vm.send-migration", {"destination_url": f"unix:{sdir}/x.sock", "local": True})
    assert local.value.messages[-1] == "Local migration requires shared memory or hugepages enabled"
    src.events.set_mark()
    src.client.send_migration(f"unix:{sdir}/nobody.sock")  # the worker connects: 204 all the same
    src.events.wait_for("vm:migration-failed", timeout=10)
    assert vm_events(src) == ["vm:migration-started", "vm:migration-failed"]
    assert log_mentions(f"{sdir}/src.log", "Error connecting to UNIX socket")


def test_receiving_is_refused_while_a_vm_exists(backend, start, sdir):
    src = boot_source(start, backend)
    with pytest.raises(ChApiError) as refused:
        src.client.receive_migration(f"unix:{sdir}/in.sock")
    assert refused.value.messages[1:] == ["Error receiving migration",
                                          "Failed to receive migratable component snapshot",
                                          "Can't receive a migration when a VM is already created"]


class RawSender:
    """The sender's side of the protocol, written by hand."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(20)
        self.sock.connect(path)

    def request(self, command: int, payload: bytes = b"", headers: bytes = b"", expect: bool = True) -> int | None:
        self.sock.sendall(HEADER.pack(command, headers.ljust(6, b"\0"), len(payload)) + payload)
        if not expect:
            return None
        data = b""
        while len(data) < HEADER.size:
            chunk = self.sock.recv(HEADER.size - len(data))
            if not chunk:
                return None
            data += chunk
        return HEADER.unpack(data)[0]

    def close(self) -> None:
        self.sock.close()


def source_config(src_backend: Backend, directory: str) -> bytes:
    """A VmMigrationConfig the receiver accepts: a tiny VM with no device paths."""
    import json

    cfg = {"payload": src_backend.payload(directory), "cpus": {"boot_vcpus": 1, "max_vcpus": 1},
           "memory": {"size": 16 << 20}, "serial": {"mode": "Null"}, "console": {"mode": "Off"}}
    return json.dumps({"vm_config": cfg, "common_cpuid": [], "memory_manager_data": {}}).encode()


def test_the_receiver_answers_each_command_in_its_state(start, sdir):
    """Receiver states on the wire (simulated VMM: a hand-written sender cannot produce the real
    binary's CPUID and memory-manager data)."""
    dst = start(FAKE, name="dst")
    receive = Receive(dst, f"unix:{sdir}/mig.sock")
    raw = RawSender(f"{sdir}/mig.sock")
    assert raw.request(CONFIG, b"{}") == 2, "Config before Start: Error, and the migration is aborted"
    result = receive.wait(10)
    assert isinstance(result, InternalError)
    assert result.messages[-2:] == ["Failed to complete migration for migratable component", "Migration was aborted"]
    assert "vm:migration-receive-failed" in dst.events.names()
    raw.close()
    receive = Receive(dst, f"unix:{sdir}/mig2.sock")
    raw = RawSender(f"{sdir}/mig2.sock")
    assert raw.request(START, headers=struct.pack("<H", 0)) == 1
    assert raw.request(ABANDON) == 1
    assert isinstance(receive.wait(10), InternalError)
    raw.close()


def test_a_sender_gone_between_requests_fails_the_receive_and_keeps_the_config(start, sdir):
    dst = start(FAKE, name="dst")
    receive = Receive(dst, f"unix:{sdir}/mig.sock")
    raw = RawSender(f"{sdir}/mig.sock")
    assert raw.request(START, headers=struct.pack("<H", 0)) == 1
    assert raw.request(CONFIG, source_config(FAKE, sdir)) == 1
    raw.close()
    result = receive.wait(10)
    assert isinstance(result, InternalError) and result.messages[-1] == "failed to fill whole buffer"
    assert dst.client.info().state == "Created"


def test_a_sender_gone_inside_a_memory_range_leaves_the_receiver_stuck_until_sigkill(backend, start, sdir):
    """v53.0's receiver loops for ever on a 0-byte read (burning a CPU; the simulation only
    waits): its API never answers again and SIGTERM is not acted on; SIGKILL ends it."""
    src = boot_source(start, backend)
    dst = start(backend, name="dst", env=no_backtrace_env())
    receive = Receive(dst, f"unix:{sdir}/mig.sock")
    gate = Gate(f"{sdir}/gate.sock", f"{sdir}/mig.sock", hold_after=4 << 20)
    src.client.send_migration(f"unix:{sdir}/gate.sock")
    assert gate.held.wait(10)
    gate.cut()
    src.events.wait_for("vm:migration-failed", timeout=20)
    assert src.client.info().state == "Running", "the source had not paused: it just keeps running"
    assert not receive.done.wait(1.0), "the receiver noticed nothing"
    with pytest.raises(VmmUnavailable):
        dst.client.ping(timeout=1.0)
    dst.signal(signal.SIGTERM)
    assert dst.proc.wait(1.5) is None, "SIGTERM is not acted on while receiving"
    dst.signal(signal.SIGKILL)
    assert dst.proc.wait(10) == -signal.SIGKILL


def test_a_target_that_dies_fails_the_migration_and_the_source_keeps_running(backend, start, sdir):
    src = boot_source(start, backend)
    dst = start(backend, name="dst", env=no_backtrace_env())
    Receive(dst, f"unix:{sdir}/mig.sock")
    gate = Gate(f"{sdir}/gate.sock", f"{sdir}/mig.sock", hold_after=4 << 20)
    src.client.send_migration(f"unix:{sdir}/gate.sock")
    assert gate.held.wait(10)
    dst.signal(signal.SIGKILL)
    assert dst.proc.wait(10) == -signal.SIGKILL
    gate.release()
    src.events.wait_for("vm:migration-failed", timeout=20)
    assert src.client.info().state == "Running"
    assert log_mentions(f"{sdir}/src.log", "Broken pipe")
    gate.close()


def test_sigterm_during_a_send_ends_the_vmm_with_exit_1_once_the_worker_is_done(backend, start, sdir):
    src = boot_source(start, backend)
    dst = start(backend, name="dst", env=no_backtrace_env())
    Receive(dst, f"unix:{sdir}/mig.sock")
    gate = Gate(f"{sdir}/gate.sock", f"{sdir}/mig.sock", hold_after=4 << 20)
    src.client.send_migration(f"unix:{sdir}/gate.sock")
    assert gate.held.wait(10)
    src.signal(signal.SIGTERM)
    assert src.proc.wait(1.0) is None, "the VMM waits for its migration worker"
    gate.cut()
    assert wait_exit(src, 20) == 1, "the VM is gone: VmmShutdown(VmMigrating)"
