"""`ch-launcher`: a drop-in for virt-launcher that runs the VMI on Cloud Hypervisor.

Command line (contract.md §8, docs/architecture.md "The processes"): every virt-launcher flag
with KubeVirt's default (unknown flags are logged and ignored, because virt-controller renders
the command line), plus `--ch-binary` (env CH_BINARY), `--private-dir` and `--firmware-dir`.

Processes (docs/process-model.md). The command's own process is the monitor
(`ch_launcher.monitor`, as virt-launcher-monitor): it forks the launcher, reaps orphans, and when
the launcher dies stops its VMM and sends its epitaph (`ch_launcher.epitaph`). With
`--kubevirt-runtime-processes` (the pod mutator sets it for VMIs virt-handler's KVM runtime
reaches into: VFIO devices, dedicated or realtime CPUs, memLock Required) the launcher starts the
VMM spawner (`virtqemud`) before anything else, and the VMMs are the monitor's children; without
it the VMM is the launcher's child, and such VMIs fail their Sync with the reason. The launcher
serves as
`cmd/virt-launcher/virt-launcher.go@d923fdb815cd` does:
1. create `<private-dir>/<uid>/virt-serial0-log` (the console log container waits for it), then
   serve the command socket; the rename to `launcher-sock` is the readiness signal;
2. wait for a VM to be defined (first successful boot); after `--qemu-timeout` exit 2 with
   "timed out waiting for domain to be defined" (the Go launcher panics, also exit 2);
3. watch the VM; SIGTERM/SIGINT/SIGQUIT/SIGHUP set `MarkedForGracefulShutdown` (virt-handler then
   runs the graceful protocol) and arm a kill after `--grace-period-seconds`;
4. when the VM is down, wait up to 15 s for virt-handler's Delete and its final event, kill
   again, wait up to 30 s more, stop serving and exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import signal
import sys
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ch_launcher.kubevirt import paths

if TYPE_CHECKING:  # imported at run time only when needed: --help and readiness stay fast
    from ch_launcher.ch.process import VmmSpawning
    from ch_launcher.ch.spawner import Spawner
    from ch_launcher.manager import DomainManager
    from ch_launcher.monitor import MonitorLink

log = logging.getLogger("ch_launcher")

FINAL_NOTIFY_WAIT = 15.0      # waitForFinalNotify: 15 s, then kill again ...
FINAL_NOTIFY_WAIT_AFTER_KILL = 30.0  # ... and 30 s more
EXIT_TIMEOUT = 2              # Go's panic exit status


@dataclass(frozen=True)
class Settings(paths.LauncherPaths):
    """The command line: virt-launcher's flags (and the launcher's own), parsed."""

    hotplug_disk_dir: str = paths.HOTPLUG_DISK_DIR + "/"  # as virt-launcher passes it
    qemu_timeout: float = 180.0
    name: str = ""
    uid: str = ""
    namespace: str = ""
    grace_period_seconds: int = 30
    hook_sidecars: int = 0
    ovmf_path: str = "/usr/share/edk2/ovmf"
    disk_memory_limit: int = 2097152000
    hypervisor: str = "kvm"
    simulate_crash: bool = False
    verbosity: int = 2
    ch_binary: str = paths.CH_BINARY
    kubevirt_runtime_processes: bool = False  # the monitor / virtqemud / qemu-system tree (docs/process-model.md)
    ignored: list[str] = field(default_factory=list)   # unknown flags, logged once logging is up
    accepted: dict[str, object] = field(default_factory=dict)  # flags accepted without effect

    @property
    def sockets_dir(self) -> str:
        return os.path.join(self.share_dir, "sockets")

    @property
    def notify_socket(self) -> str:
        return os.path.join(self.share_dir, "domain-notify-pipe.sock")


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Go's `time.ParseDuration` ("3m", "240s", "1h2m3.5s") in seconds; ValueError otherwise."""
    s = text.strip()
    if s in ("0", "+0", "-0"):
        return 0.0
    sign = -1.0 if s.startswith("-") else 1.0
    s = s.lstrip("+-")
    pos, total = 0, 0.0
    for m in _DURATION.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    if not s or pos != len(s):
        raise ValueError(f"invalid duration {text!r}")
    return sign * total


def _go_bool(text: str | None) -> bool:
    if text is None:
        return True
    t = text.lower()
    if t in ("1", "t", "true"):
        return True
    if t in ("0", "f", "false"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {text!r}")


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


# virt-launcher flags we accept without acting on them (libvirt/QEMU-only, guest-agent pollers,
# the monitor's own flag): name -> (type, default). They are recorded in Settings.accepted.
_ACCEPTED: dict[str, tuple[str, object]] = {
    "run-as-nonroot": ("bool", False),
    "image-volume": ("bool", False),
    "upgrade-ordinal-ifaces": ("bool", False),
    "vgpu-dedicated-hook": ("bool", False),
    "vm-stats-collector": ("bool", False),
    "firmware-auto-selection": ("bool", False),
    "allow-emulation": ("bool", False),
    "allow-cross-arch-emulation": ("bool", False),
    "keep-after-failure": ("bool", False),
    "libvirt-log-filters": ("str", ""),
    "qemu-agent-sys-interval": ("duration", 120.0),
    "qemu-agent-file-interval": ("duration", 300.0),
    "qemu-agent-user-interval": ("duration", 10.0),
    "qemu-agent-version-interval": ("duration", 300.0),
    "qemu-fsfreeze-status-interval": ("duration", 5.0),
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ch-launcher", allow_abbrev=False,
                                description="Run one KubeVirt VMI on Cloud Hypervisor (a virt-launcher drop-in).")
    d = Settings()
    p.add_argument("--qemu-timeout", type=_duration, default=d.qemu_timeout,
                   help="how long to wait for the VM to be defined (Go duration, default 3m)")
    p.add_argument("--name", default=d.name)
    p.add_argument("--uid", default=d.uid)
    p.add_argument("--namespace", default=d.namespace)
    p.add_argument("--kubevirt-share-dir", dest="share_dir", default=d.share_dir)
    p.add_argument("--ephemeral-disk-dir", default=d.ephemeral_disk_dir)
    p.add_argument("--container-disk-dir", default=d.container_disk_dir)
    p.add_argument("--hotplug-disk-dir", default=d.hotplug_disk_dir)
    p.add_argument("--grace-period-seconds", type=int, default=d.grace_period_seconds)
    p.add_argument("--hook-sidecars", type=int, default=d.hook_sidecars)
    p.add_argument("--ovmf-path", default=d.ovmf_path)
    p.add_argument("--disk-memory-limit", type=int, default=d.disk_memory_limit)
    p.add_argument("--hypervisor", default=d.hypervisor)
    p.add_argument("--simulate-crash", type=_go_bool, nargs="?", const=True, default=False)
    p.add_argument("-v", "--v", dest="verbosity", type=int, default=None, help="log verbosity (klog -v)")
    p.add_argument("--ch-binary", default=os.environ.get("CH_BINARY") or paths.CH_BINARY,
                   help="cloud-hypervisor binary (env CH_BINARY)")
    p.add_argument("--private-dir", default=d.private_dir)
    p.add_argument("--firmware-dir", default=d.firmware_dir)
    p.add_argument("--kubevirt-runtime-processes", type=_go_bool, nargs="?", const=True, default=False,
                   help="run the process tree virt-handler's KVM runtime reaches into (docs/process-model.md): "
                        "a monitor as parent of the launcher and the VMM, a virtqemud VMM spawner")
    for name, (kind, default) in _ACCEPTED.items():
        if kind == "bool":
            p.add_argument(f"--{name}", type=_go_bool, nargs="?", const=True, default=default)
        else:
            p.add_argument(f"--{name}", type=_duration if kind == "duration" else str, default=default)
    return p


def parse_args(argv: Sequence[str] | None = None, environ: dict[str, str] | None = None) -> Settings:
    """Flags -> Settings. Unknown flags are kept in `ignored` (logged later), never an error;
    a known flag with a bad value exits 2 with argparse's message."""
    env = os.environ if environ is None else environ
    ns, unknown = build_parser().parse_known_args(list(sys.argv[1:] if argv is None else argv))
    values = vars(ns)
    verbosity = values.pop("verbosity")
    if verbosity is None:
        try:
            verbosity = int(env.get("VIRT_LAUNCHER_LOG_VERBOSITY", "2"))
        except ValueError:
            verbosity = 2
    accepted = {name: values.pop(name.replace("-", "_")) for name in _ACCEPTED}
    return Settings(**values, verbosity=verbosity, ignored=unknown, accepted=accepted)


# --- the process --------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_args(argv)
    from ch_launcher.kubevirt.log import setup_logging

    setup_logging(uid=settings.uid, name=settings.name, namespace=settings.namespace,
                  verbosity=max(0, settings.verbosity))
    for flag in settings.ignored:
        log.warning("ignoring unknown argument %r", flag)
    if settings.simulate_crash:
        log.critical("Simulated virt-launcher crash")
        return EXIT_TIMEOUT
    if settings.hook_sidecars:
        log.warning("--hook-sidecars=%d: hook sidecars edit libvirt domain XML, which Cloud Hypervisor "
                    "does not use; not waiting for them", settings.hook_sidecars)
    from ch_launcher import epitaph, monitor

    return monitor.run(lambda link: launch(settings, link), monitor.MonitorContext(
        namespace=settings.namespace, name=settings.name, uid=settings.uid,
        epitaph=epitaph.path_in(settings.private_dir), notify_socket=settings.notify_socket,
        container_disks=settings.container_disk_dir))


def launch(settings: Settings, link: MonitorLink) -> int:
    """The launcher process (the monitor's child): with `--kubevirt-runtime-processes` fork the
    VMM spawner first, while no thread runs; then serve; the exit status."""
    from ch_launcher.ch.proctitle import set_cmdline, set_comm

    # Each of the pod's processes says what it is (ps, kubevirt-probe): the monitor names itself.
    set_comm("ch-launcher")
    set_cmdline(f"ch-launcher: the launcher of {settings.namespace}/{settings.name} (monitor pid {link.monitor_pid})")
    if not settings.kubevirt_runtime_processes:  # the VMM is this process's child: no exit to hear of
        os.close(link.exit_reports_fd)
        return _serve(settings, None)
    from ch_launcher.ch.exits import ExitReports
    from ch_launcher.ch.process import VmmSpawning
    from ch_launcher.ch.spawner import Spawner, SpawnError

    spawner: Spawner | None = None
    spawning: VmmSpawning | None = None
    try:
        spawner = Spawner.start()
        spawning = VmmSpawning(spawner=spawner, exits=ExitReports(link.exit_reports_fd),
                               monitor_pid=link.monitor_pid, subreaper=link.subreaper)
    except SpawnError as e:  # VMIs virt-handler does not look into still run (procmodel says why)
        log.error("%s: the VMM will be the launcher's own child", e)
    try:
        return _serve(settings, spawning)
    finally:
        if spawner is not None:
            spawner.close()


def _serve(settings: Settings, spawning: VmmSpawning | None) -> int:
    try:
        return asyncio.run(run(settings, spawning))
    except KeyboardInterrupt:
        return 130


async def run(settings: Settings, spawning: VmmSpawning | None = None) -> int:
    """Serve one VMI until it is gone; the exit status of the process. `spawning`: how VMMs are
    started (the pod's process model); None runs the VMM as this process's child."""
    from ch_launcher.manager import DomainManager, ManagerSettings
    from ch_launcher.notify import Notifier
    from ch_launcher.server import LauncherServer

    for d in (settings.sockets_dir, settings.private_dir):
        os.makedirs(d, exist_ok=True)
    if settings.uid:
        from ch_launcher.console import precreate_log

        precreate_log(settings.private_dir, settings.uid)
    notifier = Notifier(settings.notify_socket)
    manager = DomainManager(ManagerSettings(
        **{**settings.directories(), "hotplug_disk_dir": settings.hotplug_disk_dir.rstrip("/") or "/"},
        ch_binary=settings.ch_binary, name=settings.name, namespace=settings.namespace, uid=settings.uid,
        spawning=spawning), notifier)
    stop = asyncio.Event()
    early_exit = asyncio.Event()
    server = LauncherServer(manager, settings.sockets_dir, on_early_exit=early_exit.set,
                            on_contact=notifier.connect_early)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        loop.add_signal_handler(sig, _on_signal, sig, stop)
    code = 1
    try:
        await server.start()
        await manager.start()  # imports what Sync needs and starts the VMM, in the background
        code = await _until_early_exit(supervise(manager, settings, stop, early_exit), early_exit)
    except Exception:
        log.exception("ch-launcher failed")
        code = 1
    finally:
        await manager.close()
        with contextlib.suppress(Exception):
            await notifier.close()
        await server.stop(grace=0.5)
    log.info("Exiting...")
    return code


async def _until_early_exit(work: Awaitable[int], early_exit: asyncio.Event) -> int:
    """`work`'s status, unless virt-handler's SignalTargetPodCleanup comes first (in any phase:
    the Go launcher checks `ReceivedEarlyExitSignal` while it waits for the domain and in its
    process monitor): then exit at once with EXIT_TIMEOUT, as virt-launcher's panic does."""
    task = asyncio.ensure_future(work)
    signalled = asyncio.ensure_future(early_exit.wait())
    await asyncio.wait({task, signalled}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        signalled.cancel()
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    log.error("received early exit signal")
    return EXIT_TIMEOUT


def _on_signal(sig: signal.Signals, stop: asyncio.Event) -> None:
    log.info("Received signal %s", sig.name)
    stop.set()


async def supervise(manager: DomainManager, settings: Settings, stop: asyncio.Event,
                    early_exit: asyncio.Event) -> int:
    """Steps 2-4 of the module docstring; returns the exit status."""
    from ch_launcher.lifecycle import ALIVE, Intent

    loop = asyncio.get_running_loop()
    # 2. a VM must be defined within --qemu-timeout
    waiters = {asyncio.ensure_future(manager.booted_once.wait()): "defined",
               asyncio.ensure_future(stop.wait()): "stop",
               asyncio.ensure_future(early_exit.wait()): "early"}
    done, pending = await asyncio.wait(waiters, timeout=settings.qemu_timeout, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    what = {waiters[t] for t in done}
    if "defined" not in what:
        if "early" in what:
            log.error("received early exit signal")
            return EXIT_TIMEOUT
        if "stop" in what:
            return 0
        log.error("timed out waiting for domain to be defined (no VM booted within %gs)", settings.qemu_timeout)
        return EXIT_TIMEOUT

    grace_timer: asyncio.TimerHandle | None = None

    def kill_after_grace() -> None:
        log.info("grace period of %ds expired: killing the VM", settings.grace_period_seconds)
        task = asyncio.ensure_future(manager.execute(Intent.KILL, None, budget=60.0))
        task.add_done_callback(log_kill_failure)

    def log_kill_failure(task: asyncio.Task[str]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("kill after the grace period failed: %s", task.exception())

    try:
        while True:
            # 3. watch the VM until it is down (or gone)
            while manager.state in ALIVE:
                waits = {asyncio.ensure_future(manager.wait_until(lambda: manager.state not in ALIVE))}
                if grace_timer is None:  # until SIGTERM; afterwards only the VM's end matters
                    waits.add(asyncio.ensure_future(stop.wait()))
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                for waiter in waits:
                    waiter.cancel()
                if stop.is_set() and grace_timer is None:
                    await manager.mark_for_graceful_shutdown()
                    grace_timer = loop.call_later(max(0, settings.grace_period_seconds), kill_after_grace)
            # 4. the final notification (Delete from virt-handler), unless the VM comes back
            def finished() -> bool:
                return manager.forgotten.is_set() or manager.state in ALIVE
            await manager.wait_until(finished, FINAL_NOTIFY_WAIT)
            if manager.state in ALIVE:
                continue
            if not manager.forgotten.is_set():
                log.info("Timed out waiting for final delete notification. Attempting to kill domain")
                with contextlib.suppress(Exception):
                    await manager.execute(Intent.KILL, None, budget=20.0)
                await manager.wait_until(finished, FINAL_NOTIFY_WAIT_AFTER_KILL)
                if manager.state in ALIVE:
                    continue
            break
    finally:
        if grace_timer is not None:
            grace_timer.cancel()
    if manager.forgotten.is_set():
        sent = await manager.flush_events(FINAL_NOTIFY_WAIT)
        log.info("Final Delete notification %s", "sent" if sent else "not confirmed by virt-handler")
    return 0


if __name__ == "__main__":
    sys.exit(main())
