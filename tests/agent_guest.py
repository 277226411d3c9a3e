"""A Linux guest that runs Debian's qemu-ga on vsock, for the real cloud-hypervisor: the kernel of
`../shared/guest` (a PVH ELF, booted directly: `../shared/unpack.sh guest/vmlinux`, with the
command line of `boot-args.txt`) and an initramfs built here (`initramfs()`).

The initramfs is the root tests/real_agent.py runs the agent in (qemu-ga, busybox, the libraries
both load, a root user, Debian's os-release) plus `/dev/console` and `/init`, which
mounts `/proc`, `/sys` and `/dev`, names the host `HOSTNAME`, mounts the first virtio disk
(`/dev/vda`, which the test formats ext4) at `/data` (the filesystem a freeze acts on), starts the
agent exactly as docs/features.md tells users to (`AGENT_COMMAND`), prints `UP`, and then runs each
line typed on its console (`run()`), printing `DONE <status>` after it. `killall qemu-ga` stops the
agent; `AGENT_COMMAND &` starts it again.

Booting it takes about a minute here (the kernel runs emulated); the agent runs natively.
Needs what tests/real_agent.py needs to stage the root (`unavailable()` there) and ../shared's
kernel (`missing()`).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests import real_agent
from tests.real_vmm import SHARED

HOSTNAME = "agent-guest"
AGENT_COMMAND = "qemu-ga --method=vsock-listen --path=4294967295:1023"
UP = b"KCH-AGENT-GUEST-UP"
DONE = b"KCH-AGENT-GUEST-DONE"
_DONE = re.compile(DONE + rb" (\d+)\r?\n")
APPLETS = (*real_agent.APPLETS, "hostname", "killall", "pidof", "sync")
INIT = f"""#!/bin/sh
export PATH=/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
hostname {HOSTNAME}
[ -b /dev/vda ] && mount -t ext4 /dev/vda /data
{AGENT_COMMAND} &
echo {UP.decode()}
while read -r line; do
    eval "$line"
    echo "{DONE.decode()} $?"
done
"""


def missing() -> str | None:
    """Why this guest cannot be built or booted here (one line), or None."""
    reason = real_agent.unavailable()
    if reason:
        return reason
    if not (SHARED / "guest" / "vmlinux.xz").exists():
        return f"{SHARED}/guest/vmlinux.xz is absent: ../shared is not beside this checkout"
    return None


def kernel() -> Path:
    """../shared's guest kernel, unpacked (../shared/unpack.sh)."""
    done = subprocess.run([str(SHARED / "unpack.sh"), "guest/vmlinux"], capture_output=True, text=True, timeout=300,
                          check=True)
    return Path(done.stdout.strip().splitlines()[-1])


def command_line() -> str:
    return (SHARED / "guest" / "boot-args.txt").read_text().strip()


def initramfs(directory: Path) -> Path:
    """Build the initramfs (an uncompressed `newc` cpio: this guest's kernel decompresses
    slowly) in `directory`; returns its path."""
    stage = Path(tempfile.mkdtemp(prefix="stage", dir=directory))
    real_agent.stage_root(stage, APPLETS)
    for sub in ("proc", "sys", "dev", "run", "tmp", "data", "var"):
        (stage / sub).mkdir(parents=True, exist_ok=True)
    (stage / "var/run").symlink_to("/run")  # qemu-ga keeps its state there, and fails without it
    (stage / "etc/hostname").write_text(HOSTNAME + "\n")
    init = stage / "init"
    init.write_text(INIT)
    init.chmod(0o755)
    out = directory / "initramfs.cpio"
    with open(out, "wb") as f:
        _cpio(stage, f)
    return out


def _cpio(root: Path, out: object) -> None:
    """Write `root` as a newc archive (directories first, then files and links) and /dev/console."""
    write = out.write  # type: ignore[attr-defined]
    inode = 1

    def entry(name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0)) -> None:
        nonlocal inode
        fields = (inode, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(name) + 1, 0)
        header = b"070701" + b"".join(b"%08X" % v for v in fields)
        blob = header + name.encode() + b"\0"
        write(blob + b"\0" * (-len(blob) % 4) + data + b"\0" * (-len(data) % 4))
        inode += 1

    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        info = os.lstat(path)
        if path.is_symlink():
            entry(name, 0o120777, os.readlink(path).encode())
        elif path.is_dir():
            entry(name, 0o040755)
        else:
            entry(name, 0o100000 | (info.st_mode & 0o7777), path.read_bytes())
    entry("dev/console", 0o020600, rdev=(5, 1))
    entry("TRAILER!!!", 0)


def run(console_socket: str, line: str, timeout: float = 120.0) -> str:
    """Type `line` on the guest's console (the launcher's virt-serial0) and return what the guest
    printed until its `DONE`; raises TimeoutError naming what it printed."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(console_socket)
        sock.settimeout(1.0)
        sock.sendall(line.encode() + b"\r")
        seen = b""
        deadline = time.monotonic() + timeout
        while (done := _DONE.search(seen)) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the guest did not finish {line!r}; it printed {seen[-500:]!r}")
            try:
                chunk = sock.recv(4096)
            except TimeoutError:
                continue
            if not chunk:
                raise ConnectionError(f"the console closed while the guest ran {line!r}: {seen[-500:]!r}")
            seen += chunk
        return seen[:done.start()].decode(errors="replace")
