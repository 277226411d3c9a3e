"""Debian's qemu-ga (`/usr/sbin/qemu-ga`, package qemu-guest-agent) run for real on this host, as
a guest would run it but where it can do no harm: the stand-in agent of the simulated guest
(tests/fakes/fakech_agent.py) is compared with it (tests/contract/test_guest_agent.py).

`RealAgent()` starts it in namespaces of its own (`unshare --mount --pid --net`): its root is a
tmpfs holding only qemu-ga, its libraries, busybox and a few `/etc` files (a root user with
`/root`, an os-release), with `/proc` and one small ext4 image on a loop device at `/data`. So
what it sees in `/proc/self/mountinfo` is that tmpfs (which it never freezes), `/proc` and the
image: `guest-fsfreeze-freeze` freezes the image and nothing of the host; `guest-exec` runs
busybox in that root; there is no network but `lo`. RPCs that would touch the host's clock,
CPUs, memory or power are blocked (`--block-rpcs`). It listens on a unix socket (`unix-listen`,
the same protocol as over vsock), reached through `/proc/<pid>/root`.

Needs root, util-linux's `unshare`, e2fsprogs' `mkfs.ext4`, loop devices, busybox and the
package; `unavailable()` says which is missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

QEMU_GA = "/usr/sbin/qemu-ga"
BLOCKED = ("guest-shutdown", "guest-set-time", "guest-suspend-disk", "guest-suspend-ram", "guest-suspend-hybrid",
           "guest-set-vcpus", "guest-set-memory-blocks", "guest-fstrim")
SOCKET = "/run/qga.sock"
OS_RELEASE = ('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\n'
              'VERSION="12 (bookworm)"\nVERSION_CODENAME=bookworm\nID=debian\n')
APPLETS = ("sh", "cat", "echo", "true", "false", "test", "getent", "chpasswd", "mkdir", "chown", "chmod", "sleep",
           "env", "mount", "umount", "rmdir", "mknod", "ls")
# In the new namespaces: the tmpfs root with the stage's files, the image at /data, /dev/null,
# then the old root detached, /proc mounted, and qemu-ga.
SCRIPT = r"""
set -e
mount --make-rprivate /
NEW=$(mktemp -d)
mount -t tmpfs -o size=32m,mode=755 qga-root "$NEW"
cp -a "$1"/. "$NEW"/
mkdir -p "$NEW/old" "$NEW/data" "$NEW/dev" "$NEW/proc" "$NEW/run" "$NEW/tmp"
mount -o loop "$2" "$NEW/data"
mknod -m 666 "$NEW/dev/null" c 1 3
cd "$NEW"
pivot_root . old
cd /
umount -l /old
rmdir /old
mount -t proc proc /proc
exec env -i PATH=/bin:/usr/sbin /usr/sbin/qemu-ga -m unix-listen -p /run/qga.sock -f /run/qga.pid -t /run \
    --block-rpcs="$3"
"""


def unavailable() -> str | None:
    """Why the real agent cannot run here (one line), or None."""
    if os.geteuid() != 0:
        return "not root: qemu-ga runs in mount and PID namespaces of its own"
    for tool, package in ((QEMU_GA, "qemu-guest-agent"), ("unshare", "util-linux"), ("mkfs.ext4", "e2fsprogs"),
                          ("busybox", "busybox")):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian package {package}; `make test` installs it as root)"
    if not Path("/dev/loop-control").exists():
        return "no loop devices (/dev/loop-control): the agent's filesystem to freeze is a loop-mounted image"
    return None


def _libraries(binary: str) -> list[str]:
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True, timeout=30).stdout
    return [part for line in out.splitlines() for part in line.split() if part.startswith("/")]


def stage_root(stage: Path, applets: tuple[str, ...] = APPLETS) -> None:
    """Fill `stage` with a root the agent runs in: qemu-ga, busybox with `applets`, the libraries
    both load (the files, not their links), a root user with `/root`, Debian's os-release. The
    Linux guest that runs the agent (tests/agent_guest.py) is made of the same root."""
    for sub in ("usr/sbin", "bin", "etc", "root", "lib64"):
        (stage / sub).mkdir(parents=True, exist_ok=True)
    shutil.copy2(QEMU_GA, stage / "usr/sbin/qemu-ga")
    busybox = shutil.which("busybox")
    assert busybox is not None
    shutil.copy2(busybox, stage / "bin/busybox")
    for library in {*_libraries(QEMU_GA), *_libraries(busybox)}:
        target = stage / library.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(library, target)  # follows symlinks: the file itself
    for applet in applets:
        (stage / "bin" / applet).symlink_to("busybox")
    (stage / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (stage / "etc/group").write_text("root:x:0:\n")
    (stage / "etc/shadow").write_text("root::19000:0:99999:7:::\n")
    (stage / "etc/os-release").write_text(OS_RELEASE)


class RealAgent:
    """qemu-ga in its own namespaces (see the module docstring); `socket` once started."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="kqga", dir="/tmp"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.socket = ""

    def __enter__(self) -> RealAgent:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()

    def start(self, timeout: float = 20.0) -> None:
        stage = self.dir / "stage"
        stage_root(stage)
        (stage / "etc/kch-test").write_text("hello from the guest\n")
        image = self.dir / "data.img"
        with open(image, "wb") as f:
            f.truncate(8 << 20)
        subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True, timeout=60)
        self.proc = subprocess.Popen(
            ["unshare", "--mount", "--pid", "--net", "--fork", "--kill-child", "sh", "-c", SCRIPT, "qga", str(stage),
             str(image), ",".join(BLOCKED)],
            stdout=subprocess.DEVNULL, stderr=open(self.dir / "qga.log", "wb"), start_new_session=True)  # noqa: SIM115
        deadline = time.monotonic() + timeout
        while True:
            agent = self._agent_pid()
            if agent is not None and Path(f"/proc/{agent}/root{SOCKET}").exists():
                self.socket = f"/proc/{agent}/root{SOCKET}"
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = (self.dir / "qga.log").read_text(errors="replace")
                raise RuntimeError(f"qemu-ga did not start in its namespaces:\n{log}")
            time.sleep(0.05)

    def _agent_pid(self) -> int | None:
        """The unshare child's pid once it runs qemu-ga (it execs it)."""
        assert self.proc is not None
        with contextlib.suppress(OSError, ValueError):
            for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
                for child in (task / "children").read_text().split():
                    if os.readlink(f"/proc/{child}/exe") == QEMU_GA:
                        return int(child)
        return None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)
