"""The launcher as a real child process, every path it touches under one short root: what the
demo (`make demo`), the functional tests (`tests/functional/harness.py`) and `bench/launcher.py` start."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[2]
FAKE_CH = REPO / "tests" / "fakes" / "fake_cloud_hypervisor.py"


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
    made: list[pathlib.Path] = []
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
                 env: Mapping[str, str] | None = None,
                 wrap: Callable[[list[str]], list[str]] | None = None, command: Sequence[str] | None = None) -> None:
        """`command` runs the launcher (default: this interpreter on the checkout's ch_launcher,
        with PYTHONPATH pointing at it); an installed `ch-launcher` script gets `env` as given."""
        self.layout = layout
        self.ch_binary = ch_binary
        argv = [
            *(command or (sys.executable, "-m", "ch_launcher.cli")),
            "--qemu-timeout", qemu_timeout, "--name", name, "--uid", uid, "--namespace", namespace,
            "--kubevirt-share-dir", str(layout.share_dir), "--ephemeral-disk-dir", str(layout.ephemeral_disk_dir),
            "--container-disk-dir", str(layout.container_disk_dir), "--hotplug-disk-dir", str(layout.hotplug_disk_dir),
            "--grace-period-seconds", str(grace_period_seconds), "--hook-sidecars", "0",
            "--ch-binary", ch_binary, "--private-dir", str(layout.private_dir),
            "--firmware-dir", str(layout.firmware_dir), *extra_args,
        ]
        # `wrap` turns the argv into the one to execute (tests: a pod sandbox's user and namespaces)
        self.argv = wrap(argv) if wrap is not None else argv
        self.env = dict(os.environ if env is None else env)
        if command is None:
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
        """PIDs of the VMMs below the launcher command, from /proc: by the name virt-handler
        looks for (`qemu-system*`) with `--kubevirt-runtime-processes` (docs/process-model.md),
        else by the name of the binary. The monitor, the launcher, its `virtqemud` spawner and
        other helpers (swtpm) are not in this list."""
        names = (VMM_COMM_PREFIX, os.path.basename(self.ch_binary)[:15])
        return sorted(p for p in self.processes() if _comm(p).startswith(names))

    @property
    def launcher_pid(self) -> int:
        """The launcher itself (the command's own process is its monitor, docs/process-model.md).
        RuntimeError while it is not there."""
        pid = self.roles()["launcher"]
        if pid is None:
            raise RuntimeError(f"no launcher below the monitor (pid {self.pid})\n{self.log_text()}")
        return pid

    def roles(self) -> dict[str, int | None]:
        """The pod's processes by role (docs/process-model.md): `monitor` (the command's own
        process), `launcher` (its child that serves launcher-sock), `spawner` (the launcher's
        `virtqemud` child), `vmm` (the first VMM, if one runs); None where absent."""
        found: dict[str, int | None] = {"monitor": self.pid if self.popen is not None else None,
                                        "launcher": None, "spawner": None, "vmm": None}
        for pid in self.processes():
            comm, ppid = _comm(pid), _ppid(pid)
            if ppid == self.pid and comm.startswith(VMM_COMM_PREFIX):
                found["vmm"] = found["vmm"] or pid
            elif ppid == self.pid:
                found["launcher"] = pid
        launcher = found["launcher"]
        found["spawner"] = next((p for p in self.processes() if _ppid(p) == launcher and _comm(p) == "virtqemud"),
                                None) if launcher is not None else None
        return found

    def processes(self) -> list[int]:
        """PIDs of every process below the launcher command (launcher, spawner, VMMs)."""
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
        """SIGKILL the launcher and every descendant seen (for test teardown), and wait until each
        has exited (its memory, hugepages included, given back): the VMM is the monitor's
        grandchild, so the monitor's own exit does not say that it is gone."""
        if self.popen is None:
            return None
        self._remember_descendants()
        for pid in self._descendants:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
        status = self.popen.wait()
        deadline = time.monotonic() + 10
        while any(_running(pid) for pid in self._descendants) and time.monotonic() < deadline:
            time.sleep(0.01)
        return status

    def log_text(self) -> str:
        try:
            return self.layout.log_file.read_text(errors="replace")
        except OSError:
            return ""


VMM_COMM_PREFIX = "qemu-system"


def _running(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie has exited and given back its memory)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


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
