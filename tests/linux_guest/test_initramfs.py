"""The Linux guest's initramfs: the cpio writer against a real cpio reader (busybox's, as the
Linux guest's own), the init's scripts against busybox's shell, and the built archive's layout."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.linux_guest import build, cpio

BUSYBOX = shutil.which("busybox")
needs_busybox = pytest.mark.skipif(BUSYBOX is None, reason="busybox is not installed (Debian package busybox)")


def extract(archive: bytes, into: Path) -> list[str]:
    """`busybox cpio -i` of `archive` into `into`; the member names it listed."""
    assert BUSYBOX is not None
    done = subprocess.run([BUSYBOX, "cpio", "-i", "-d", "-m", "-v"], input=archive, cwd=into, capture_output=True,
                          check=True)
    return done.stdout.decode().split()


@needs_busybox
def test_a_real_cpio_reader_unpacks_what_the_writer_wrote(tmp_path: Path) -> None:
    data = bytes(range(256)) * 41  # not a multiple of 4: the padding must be right
    archive = cpio.archive([cpio.directory("bin"), cpio.file("bin/tool", data, 0o755),
                            cpio.symlink("bin/alias", "tool"), cpio.directory("etc", 0o700),
                            cpio.file("etc/conf", b"x=1\n")])
    assert extract(archive, tmp_path) == ["bin", "bin/tool", "bin/alias", "etc", "etc/conf"]
    assert (tmp_path / "bin/tool").read_bytes() == data
    assert stat.S_IMODE((tmp_path / "bin/tool").stat().st_mode) == 0o755
    assert os.readlink(tmp_path / "bin/alias") == "tool"
    assert stat.S_IMODE((tmp_path / "etc").stat().st_mode) == 0o700
    assert (tmp_path / "etc/conf").read_text() == "x=1\n"


def test_the_same_entries_give_the_same_bytes() -> None:
    entries = [cpio.directory("d"), cpio.file("d/f", b"abc"), cpio.char_device("d/console", 5, 1)]
    assert cpio.archive(entries) == cpio.archive(entries)
    assert cpio.archive(entries).endswith(b"TRAILER!!!\0\0\0\0")


@pytest.mark.parametrize(("entry", "message"), [
    (lambda: cpio.file("/etc/passwd", b""), "must be relative"),
    (lambda: cpio.Entry("fifo", stat.S_IFIFO | 0o644), "is not written here"),
    (lambda: cpio.Entry("d", stat.S_IFDIR | 0o755, b"data"), "only files and symlinks carry data"),
])
def test_members_the_kernel_could_not_unpack_are_refused(entry: Callable[[], cpio.Entry], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        entry()


def test_a_member_given_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="given twice"):
        cpio.archive([cpio.file("a", b"1"), cpio.file("a", b"2")])


@needs_busybox
@pytest.mark.parametrize("script", sorted(p.name for p in (build.ROOTFS / "etc" / "kch").iterdir()))
def test_the_inits_scripts_are_valid_for_busyboxs_shell(script: str) -> None:
    assert BUSYBOX is not None
    path = build.ROOTFS / "etc" / "kch" / script
    assert path.stat().st_mode & 0o111, f"{script} is not executable"
    assert path.read_text().startswith("#!/bin/sh\n")
    done = subprocess.run([BUSYBOX, "sh", "-n", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_every_program_inittab_starts_is_in_the_initramfs() -> None:
    """busybox init runs the actions of etc/inittab by path: each is a file of rootfs/, an
    applet of busybox-static (the `applets` the builder links) or the guest agent."""
    programs = [line.split(":", 3)[3].lstrip("-").split()[0]
                for line in (build.ROOTFS / "etc" / "inittab").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    assert programs == ["/etc/kch/boot", "/usr/sbin/qemu-ga", "/etc/kch/power-button", "/sbin/uevent", "/bin/sh",
                        "/sbin/reboot", "/etc/kch/shutdown"]
    for program in programs:
        assert (build.ROOTFS / program.lstrip("/")).exists() or program in (
            "/sbin/uevent", "/bin/sh", "/sbin/reboot", f"/{build.AGENT}")


@pytest.fixture(scope="module")
def initramfs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = build.missing()
    if reason:
        pytest.skip(reason)
    if BUSYBOX is None:
        pytest.skip("busybox is not installed (Debian package busybox)")
    root = tmp_path_factory.mktemp("initramfs")
    extract(build.initramfs().read_bytes(), root)
    return root


def test_the_initramfs_boots_busybox_init_with_the_projects_files(initramfs: Path) -> None:
    assert os.readlink(initramfs / "init") == "/bin/busybox"
    assert (initramfs / "bin/busybox").stat().st_size > 1_000_000  # Debian's busybox-static
    for applet in ("sbin/udhcpc", "sbin/uevent", "usr/sbin/httpd", "usr/bin/nc", "sbin/poweroff", "usr/bin/awk"):
        assert os.readlink(initramfs / applet) == "/bin/busybox", applet
    for path in sorted(build.ROOTFS.rglob("*")):
        if path.is_file():
            relative = path.relative_to(build.ROOTFS)
            assert (initramfs / relative).read_bytes() == path.read_bytes(), relative
    assert not (initramfs / "usr/share/doc").exists() and not (initramfs / "var/lib/dpkg").exists()


def test_the_initramfs_has_the_console_the_kernel_opens_for_init() -> None:
    """/dev/console must be in the archive itself (busybox cpio, unprivileged, cannot make the
    node: read the header)."""
    reason = build.missing()
    if reason:
        pytest.skip(reason)
    data = build.initramfs().read_bytes()
    name = b"dev/console\0"
    at = data.index(b"%08x" % len(name) + b"0" * 8 + name) - 94  # the header ends with namesize and check
    header = data[at:at + 110]
    assert header[:6] == cpio.MAGIC
    fields = [int(header[6 + 8 * i:14 + 8 * i], 16) for i in range(13)]
    mode, rdev = fields[1], (fields[9], fields[10])
    assert stat.S_ISCHR(mode) and rdev == (5, 1)


def test_the_guest_agent_runs_in_the_initramfs_with_nothing_from_outside(initramfs: Path) -> None:
    """qemu-ga, its loader and its libraries are in the archive: run in a chroot of it (no file
    of this machine reachable), Debian's binary starts and names itself."""
    done = subprocess.run(["unshare", "--map-root-user", "chroot", str(initramfs), f"/{build.AGENT}", "--version"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("QEMU Guest Agent 7."), done.stdout
    assert (initramfs / "etc/passwd").read_text().startswith("root:x:0:0:root:/root:")  # the credentials' user
    assert os.readlink(initramfs / "var/run") == "/run"
    assert not (initramfs / "usr/bin/perl").exists()  # the agent's package, not its dependency tree
