"""`make demo`: run a VMI YAML file through the real launcher without a cluster, and the
virt-handler stand-in the functional tests and the benchmark reuse.

    python -m ch_launcher.demo examples/vmi-demo.yaml

The demo starts `ch-launcher` as a real process with every path in a temporary directory and
plays virt-handler: a Notify server on `<share-dir>/domain-notify-pipe.sock` that records (and
prints) every event, and a Cmd client on `<share-dir>/sockets/launcher-sock`. It walks the VM
through Sync -> Running, GetDomain, pause, unpause, GetDomainStats, graceful shutdown and
delete, printing the lifecycle as it happens.

The VMM is the real `cloud-hypervisor` when `CH_BINARY` is set and /dev/kvm is usable (firmware
from `CH_FIRMWARE_DIR`, default /usr/share/cloud-hypervisor; a bootable image for the first
containerDisk from `CH_DEMO_IMAGE`), else the simulated VMM of `tests/fakes/`, and the demo says
which. containerDisk images that do not exist are created as small sparse raw images.

Stand-in pieces: `LauncherLayout` (the directories), `LauncherProcess` (start, wait until ready,
signal, stop with every descendant), `NotifyRecorder` (virt-handler's Notify side),
`CmdClient` (virt-handler's Cmd side, with virt-handler's deadlines).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from ch_launcher._proto import kubevirt_cmd_info_pb2 as cmd_info_pb2
from ch_launcher._proto import kubevirt_cmd_info_pb2_grpc as cmd_info_grpc
from ch_launcher._proto import kubevirt_cmd_v1_pb2 as cmd_pb2
from ch_launcher._proto import kubevirt_cmd_v1_pb2_grpc as cmd_grpc
from ch_launcher._proto import kubevirt_notify_info_pb2 as notify_info_pb2
from ch_launcher._proto import kubevirt_notify_info_pb2_grpc as notify_info_grpc
from ch_launcher._proto import kubevirt_notify_v1_pb2 as notify_pb2
from ch_launcher._proto import kubevirt_notify_v1_pb2_grpc as notify_grpc

REPO = pathlib.Path(__file__).resolve().parent.parent
FAKE_CH = REPO / "tests" / "fakes" / "fake_cloud_hypervisor.py"

# virt-handler's deadlines per RPC (pkg/virt-handler/cmd-client/client.go: 5 s / 20 s / 60 s)
DEADLINES: dict[str, float] = {name: 5.0 for name in (
    "GetDomain", "GetDomainStats", "GetGuestInfo", "GetUsers", "GetFilesystems", "Ping", "GetQemuVersion",
    "GetSEVInfo", "GetLaunchMeasurement", "GetScreenshot", "GetVMStats")}
DEADLINES["FreezeVirtualMachine"] = 60.0


# --- layout and process ------------------------------------------------------------------------


@dataclass
class LauncherLayout:
    """Every directory a launcher touches, under one root (keep it short: unix socket paths
    are limited to 107 bytes)."""

    root: pathlib.Path

    @property
    def share_dir(self) -> pathlib.Path:
        return self.root / "share"

    @property
    def sockets_dir(self) -> pathlib.Path:
        return self.share_dir / "sockets"

    @property
    def cmd_socket(self) -> pathlib.Path:
        return self.sockets_dir / "launcher-sock"

    @property
    def notify_socket(self) -> pathlib.Path:
        return self.share_dir / "domain-notify-pipe.sock"

    @property
    def private_dir(self) -> pathlib.Path:
        return self.root / "private"

    @property
    def ephemeral_disk_dir(self) -> pathlib.Path:
        return self.root / "ephemeral"

    @property
    def container_disk_dir(self) -> pathlib.Path:
        return self.root / "cdisks"

    @property
    def hotplug_disk_dir(self) -> pathlib.Path:
        return self.root / "hotplug"

    @property
    def firmware_dir(self) -> pathlib.Path:
        return self.root / "firmware"

    @property
    def log_file(self) -> pathlib.Path:
        return self.root / "launcher.log"

    def create(self) -> LauncherLayout:
        for d in (self.sockets_dir, self.private_dir, self.ephemeral_disk_dir, self.container_disk_dir,
                  self.hotplug_disk_dir, self.firmware_dir):
            d.mkdir(parents=True, exist_ok=True)
        return self

    def console_socket(self, uid: str) -> pathlib.Path:
        return self.private_dir / uid / "virt-serial0"


def fake_firmware(layout: LauncherLayout) -> None:
    """Placeholder firmware files for the simulated VMM (it only checks that they exist)."""
    for name in ("hypervisor-fw", "CLOUDHV.fd"):
        path = layout.firmware_dir / name
        if not path.exists():
            path.write_bytes(b"\0" * 4096)


def container_disk_images(vmi: Mapping[str, Any], layout: LauncherLayout, *, size: int = 64 << 20,
                          image: str | None = None) -> list[pathlib.Path]:
    """Create `<container-disk-dir>/disk_<volume index>.img` for each containerDisk volume that
    has none (KubeVirt's path; virt-handler mounts these before the first Sync). The first one is
    a copy of `image` when given, else every one is a sparse raw image of `size` bytes."""
    made = []
    for index, volume in enumerate(vmi.get("spec", {}).get("volumes", []) or []):
        if "containerDisk" not in volume:
            continue
        path = layout.container_disk_dir / f"disk_{index}.img"
        if path.exists():
            continue
        if image and not made:
            shutil.copyfile(image, path)
        else:
            with open(path, "wb") as f:
                f.truncate(size)
        made.append(path)
    return made


class LauncherProcess:
    """`ch-launcher` as a real child process (its own session), every path in `layout`."""

    def __init__(self, layout: LauncherLayout, *, name: str, namespace: str, uid: str, ch_binary: str,
                 grace_period_seconds: int = 30, qemu_timeout: str = "60s", extra_args: Sequence[str] = (),
                 env: Mapping[str, str] | None = None) -> None:
        self.layout = layout
        self.argv = [
            sys.executable, "-m", "ch_launcher.cli",
            "--qemu-timeout", qemu_timeout, "--name", name, "--uid", uid, "--namespace", namespace,
            "--kubevirt-share-dir", str(layout.share_dir), "--ephemeral-disk-dir", str(layout.ephemeral_disk_dir),
            "--container-disk-dir", str(layout.container_disk_dir), "--hotplug-disk-dir", str(layout.hotplug_disk_dir),
            "--grace-period-seconds", str(grace_period_seconds), "--hook-sidecars", "0",
            "--ch-binary", ch_binary, "--private-dir", str(layout.private_dir),
            "--firmware-dir", str(layout.firmware_dir), *extra_args,
        ]
        self.env = dict(os.environ if env is None else env)
        self.env.setdefault("PYTHONPATH", str(REPO))
        self.popen: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self._descendants: set[int] = set()

    def start(self) -> LauncherProcess:
        out = open(self.layout.log_file, "ab")  # noqa: SIM115 - handed to the child
        try:
            self.started_at = time.monotonic()
            self.popen = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                          env=self.env, cwd=str(REPO), start_new_session=True)
        finally:
            out.close()
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    async def wait_ready(self, timeout: float = 10.0) -> float:
        """Wait until `launcher-sock` exists; seconds since `start()`. RuntimeError (with the
        launcher's log) if the process exits first or the timeout passes."""
        deadline = time.monotonic() + timeout
        while not self.layout.cmd_socket.exists():
            if self.poll() is not None:
                raise RuntimeError(f"ch-launcher exited with {self.poll()} before it was ready:\n{self.log_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"ch-launcher not ready within {timeout} s:\n{self.log_text()}")
            await asyncio.sleep(0.002)
        return time.monotonic() - self.started_at

    def poll(self) -> int | None:
        return self.popen.poll() if self.popen is not None else None

    def send_signal(self, sig: int) -> None:
        self._remember_descendants()
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(sig)

    async def wait_exit(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while self.poll() is None and time.monotonic() < deadline:
            self._remember_descendants()
            await asyncio.sleep(0.02)
        return self.poll()

    def children(self) -> list[int]:
        """PIDs of the launcher's descendants (the VMM), from /proc."""
        return sorted(_descendants(self.pid)) if self.popen is not None else []

    def _remember_descendants(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self._descendants.update(_descendants(self.pid))

    def stop(self, timeout: float = 5.0) -> int | None:
        """SIGTERM, then SIGKILL after `timeout`; also kill every descendant seen (the VMM runs
        in its own session, so killing the launcher's group alone would leave it behind)."""
        if self.popen is None:
            return None
        self._remember_descendants()
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()
        for pid in self._descendants:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        return self.popen.returncode

    def kill(self) -> int | None:
        """SIGKILL the launcher and every descendant seen (for test teardown)."""
        if self.popen is None:
            return None
        self._remember_descendants()
        for pid in self._descendants:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
        return self.popen.wait()

    def log_text(self) -> str:
        try:
            return self.layout.log_file.read_text(errors="replace")
        except OSError:
            return ""


def _descendants(pid: int) -> set[int]:
    found: set[int] = set()
    todo = [pid]
    while todo:
        parent = todo.pop()
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{parent}/task"):
                with contextlib.suppress(OSError, ValueError), open(f"/proc/{parent}/task/{tid}/children") as f:
                    for child in f.read().split():
                        if int(child) not in found:
                            found.add(int(child))
                            todo.append(int(child))
    return found


# --- virt-handler's Notify side -----------------------------------------------------------------


@dataclass
class DomainEvent:
    """One HandleDomainEvent call as virt-handler received it."""

    event_type: str
    domain: dict[str, Any] | None
    at: float = field(default_factory=time.monotonic)

    @property
    def status(self) -> str:
        return (self.domain or {}).get("Status", {}).get("Status", "")

    @property
    def reason(self) -> str:
        return (self.domain or {}).get("Status", {}).get("Reason", "")

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
        self._server: grpc.aio.Server | None = None
        self._changed = asyncio.Event()

    async def start(self) -> NotifyRecorder:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        server = grpc.aio.server()
        recorder = self

        class Info(notify_info_grpc.NotifyInfoServicer):
            async def Info(self, request, context):  # noqa: N802
                return notify_info_pb2.NotifyInfoResponse(supportedNotifyVersions=[1])

        class Notify(notify_grpc.NotifyServicer):
            async def HandleDomainEvent(self, request, context):  # noqa: N802
                return recorder._domain_event(request)

            async def HandleK8sEvent(self, request, context):  # noqa: N802
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
        deadline = time.monotonic() + timeout
        while True:
            for event in self.events[since:]:
                if predicate(event):
                    return event
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no matching domain event within {timeout} s; got: "
                                   f"{[str(e) for e in self.events[since:]]}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)

    async def wait_for_status(self, status: str, reason: str | None = None, timeout: float = 10.0,
                              *, since: int = 0) -> DomainEvent:
        return await self.wait_for(lambda e: e.status == status and not e.deleted
                                   and (reason is None or e.reason == reason), timeout, since=since)

    async def wait_for_deleted(self, timeout: float = 10.0, *, since: int = 0) -> DomainEvent:
        return await self.wait_for(lambda e: e.deleted, timeout, since=since)

    async def wait_for_k8s_event(self, reason: str, timeout: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for event in self.k8s_events:
                if event.get("reason") == reason:
                    return event
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no K8s event {reason!r} within {timeout} s; got {self.k8s_events}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)


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
        request = cmd_pb2.VMIRequest(vmi=cmd_pb2.VMI(vmiJson=payload), options=options or cmd_pb2.VirtualMachineOptions())
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


# --- the demo -----------------------------------------------------------------------------------


def kvm_usable() -> bool:
    return os.access("/dev/kvm", os.R_OK | os.W_OK)


def choose_vmm(environ: Mapping[str, str] | None = None) -> tuple[str, bool, str]:
    """(binary, is_real, why): the real cloud-hypervisor when CH_BINARY is set and /dev/kvm is
    usable, else the simulated VMM."""
    env = os.environ if environ is None else environ
    binary = env.get("CH_BINARY", "")
    if binary and shutil.which(binary) and kvm_usable():
        return shutil.which(binary) or binary, True, f"the real cloud-hypervisor ({binary}) on /dev/kvm"
    why = ("CH_BINARY is not set" if not binary else f"{binary} is not executable" if not shutil.which(binary)
           else "/dev/kvm is not usable")
    return str(FAKE_CH), False, f"the simulated VMM ({why})"


def load_vmi(path: str) -> dict[str, Any]:
    import yaml

    with open(path) as f:
        vmi = yaml.safe_load(f)
    if not isinstance(vmi, dict) or vmi.get("kind") != "VirtualMachineInstance":
        raise SystemExit(f"{path}: not a VirtualMachineInstance")
    meta = vmi.setdefault("metadata", {})
    meta.setdefault("namespace", "default")
    meta.setdefault("uid", str(uuid.uuid4()))
    vmi.setdefault("status", {})["phase"] = "Scheduled"
    return vmi


async def run_demo(vmi_path: str, *, out: Callable[[str], None] = print) -> int:
    vmi = load_vmi(vmi_path)
    meta = vmi["metadata"]
    binary, real, why = choose_vmm()
    out(f"ch-launcher demo: VMI {meta['namespace']}/{meta['name']} on {why}")
    root = pathlib.Path(tempfile.mkdtemp(prefix="kcdemo", dir="/tmp"))
    layout = LauncherLayout(root).create()
    env = dict(os.environ)
    if real:
        fw = env.get("CH_FIRMWARE_DIR", "/usr/share/cloud-hypervisor")
        for name in ("hypervisor-fw", "CLOUDHV.fd"):
            if os.path.exists(os.path.join(fw, name)):
                shutil.copyfile(os.path.join(fw, name), layout.firmware_dir / name)
    else:
        fake_firmware(layout)
    container_disk_images(vmi, layout, image=env.get("CH_DEMO_IMAGE") if real else None)
    t0 = time.monotonic()

    def show(event: DomainEvent) -> None:
        out(f"  [{time.monotonic() - t0:7.3f}s] notify  {event}")

    recorder = await NotifyRecorder(layout.notify_socket, on_event=show).start()
    launcher = LauncherProcess(layout, name=meta["name"], namespace=meta["namespace"], uid=meta["uid"],
                               ch_binary=binary, grace_period_seconds=int(vmi["spec"].get(
                                   "terminationGracePeriodSeconds", 30)) + 15, env=env).start()
    client: CmdClient | None = None
    ok = False
    try:
        ready = await launcher.wait_ready(10.0)
        out(f"  [{time.monotonic() - t0:7.3f}s] ready   launcher-sock after {ready * 1000:.0f} ms")
        client = CmdClient(layout.cmd_socket)

        async def step(what: str, coro: Any) -> Any:
            out(f"  [{time.monotonic() - t0:7.3f}s] cmd     {what}")
            return await coro

        out(f"  [{time.monotonic() - t0:7.3f}s] cmd     CmdInfo.Info -> {await client.info()}")
        await step("SyncVirtualMachine", client.sync(vmi))
        await recorder.wait_for_status("Running", timeout=30)
        vmi["status"]["phase"] = "Running"
        domain = await step("GetDomain", client.get_domain())
        out(f"            domain {domain['Spec']['Name']}: {domain['Status']['Status']}, "
            f"{domain['Spec']['VCPU']['CPUs']} vCPU(s), {len(domain['Spec']['Devices']['Disks'] or [])} disk(s)")
        await step("PauseVirtualMachine", client.vmi_command("PauseVirtualMachine", vmi))
        await recorder.wait_for_status("Paused", "User")
        await step("SyncVirtualMachine (again: a paused-by-user VM stays paused)", client.sync(vmi))
        await step("UnpauseVirtualMachine", client.vmi_command("UnpauseVirtualMachine", vmi))
        await recorder.wait_for_status("Running", since=len(recorder.events) - 1)
        stats = await step("GetDomainStats", client.get_domain_stats())
        if stats:
            cpu = stats.get("Cpu") or {}
            mem = stats.get("Memory") or {}
            out(f"            stats {stats['Name']}: cpu {cpu.get('Time', 0) / 1e9:.3f}s, "
                f"rss {mem.get('RSS', 0) / 1024:.1f} MiB, {len(stats.get('Vcpu') or [])} vCPU thread(s)")
        since = len(recorder.events)
        await step("ShutdownVirtualMachine (ACPI power button)", client.vmi_command("ShutdownVirtualMachine", vmi))
        try:
            await recorder.wait_for_status("Shutoff", since=since, timeout=10)
        except TimeoutError:
            out("            the guest ignored ACPI: killing it, as virt-handler does after the grace period")
            await step("KillVirtualMachine", client.vmi_command("KillVirtualMachine", vmi))
            await recorder.wait_for_status("Shutoff", since=since, timeout=20)
        await step("DeleteVirtualMachine", client.vmi_command("DeleteVirtualMachine", vmi))
        await recorder.wait_for_deleted(since=since)
        code = await launcher.wait_exit(60)
        out(f"  [{time.monotonic() - t0:7.3f}s] exit    ch-launcher exited with {code}")
        ok = code == 0
    except (CommandError, TimeoutError, RuntimeError, grpc.aio.AioRpcError) as e:
        out(f"demo failed: {e}")
        out(f"launcher log ({layout.log_file}):\n{launcher.log_text()[-4000:]}")
    finally:
        if client is not None:
            await client.close()
        launcher.stop()
        await recorder.stop()
        if ok:
            shutil.rmtree(root, ignore_errors=True)
    out("demo passed" if ok else f"demo FAILED (files kept in {root})")
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a VMI through ch-launcher without a cluster.")
    parser.add_argument("vmi", help="VirtualMachineInstance YAML file")
    args = parser.parse_args(argv)
    return asyncio.run(run_demo(args.vmi, out=lambda line: print(line, flush=True)))


if __name__ == "__main__":
    sys.exit(main())
