"""Builds the Linux guest's initramfs; finds its kernel and command line in ../shared/guest.

- **kernel**: `../shared/guest/vmlinux` (a PVH ELF, kept as `vmlinux.xz`: `../shared/unpack.sh
  guest/vmlinux` prints a ready copy), the only kind of kernel that boots on this PVM machine,
  and only by direct kernel boot; **command line**: `../shared/guest/boot-args.txt`, as it stands.
- **initramfs** (`initramfs()`): a `newc` cpio (`tests/linux_guest/cpio.py`) of the Debian
  bookworm packages `PACKAGES` as `mmdebstrap --variant=extract` unpacks them (with their
  dependencies; their documentation, dpkg's and apt's files left out), busybox's applets as
  symlinks where no package put a file, `/dev/console` (the kernel opens it for init before
  any file system is mounted) and the files of `rootfs/` (the guest's init: `rootfs/etc/inittab`
  says what runs), and of the package `qemu-guest-agent` only `AGENT` (qemu-ga), its loader and
  the libraries it loads (`tests/linux_guest/elf.py` reads them from the binaries: the package's
  whole dependency tree, perl included, would be 80 MB), started by `rootfs/etc/inittab` on vsock
  as docs/features.md tells users to.

The extracted packages are kept in `build/linux-guest/` (one tar per package list: mmdebstrap
takes 10-20 s), the initramfs beside them, keyed by its inputs; a file lock serialises
concurrent builds. Nothing here needs a cpio binary or root beyond mmdebstrap's own namespace.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.linux_guest import cpio, elf
from tests.real_vmm import REPO, SHARED

HERE = Path(__file__).resolve().parent
ROOTFS = HERE / "rootfs"
BUILD = REPO / "build" / "linux-guest"
SHARED_GUEST = SHARED / "guest"
UNPACK = SHARED / "unpack.sh"
SUITE = "bookworm"
PACKAGES = ("busybox-static",)
AGENT_PACKAGES = ("qemu-guest-agent",)
AGENT = "usr/sbin/qemu-ga"
LIBRARY_DIRS = ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu")  # the loader's default paths, in its order
# what the packages bring that an initramfs does not need
_LEFT_OUT = ("dev/", "usr/share/doc/", "usr/share/man/", "usr/share/info/", "usr/share/locale/", "usr/share/lintian/",
             "usr/share/bug/", "usr/share/initramfs-tools/", "var/lib/dpkg/", "var/lib/apt/", "var/cache/",
             "var/log/", "etc/apt/", "etc/dpkg/")


class GuestBuildError(RuntimeError):
    """A build step failed; the message carries its command and output."""


def missing() -> str | None:
    """What building or booting the Linux guest lacks here (one line, for a skip reason), or None."""
    if not (SHARED_GUEST / "vmlinux.xz").exists() and not (SHARED_GUEST / "vmlinux").exists():
        return f"{SHARED_GUEST}/vmlinux is absent: ../shared is not beside this checkout"
    for tool, package in (("mmdebstrap", "mmdebstrap"), ("unshare", "util-linux"), ("xz", "xz-utils")):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian package {package}; `make test` installs it as root)"
    return None


def kernel() -> Path:
    """The guest kernel (a ready copy of ../shared/guest/vmlinux)."""
    return Path(_run(["bash", str(UNPACK), "guest/vmlinux"]).strip())


def kernel_args() -> str:
    """The kernel command line ../shared/guest/boot-args.txt gives, on one line."""
    return (SHARED_GUEST / "boot-args.txt").read_text().strip()


def _run(argv: list[str], *, timeout: float = 900) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise GuestBuildError(f"{' '.join(argv)} failed ({proc.returncode}):\n{tail}")
    return proc.stdout


@contextlib.contextmanager
def _locked(build: Path) -> Iterator[None]:
    build.mkdir(parents=True, exist_ok=True)
    with open(build / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def packages_tar(packages: tuple[str, ...] = PACKAGES, build: Path = BUILD) -> Path:
    """`mmdebstrap --variant=extract` of `packages` (and their dependencies), made once and kept."""
    key = hashlib.sha256(" ".join((SUITE, "extract", *packages)).encode()).hexdigest()[:12]
    out = build / f"packages-{key}.tar"
    if not out.exists():
        partial = out.with_suffix(".partial.tar")
        # its own mount namespace: mmdebstrap's mounts stay private
        _run(["unshare", "--mount", "mmdebstrap", "--quiet", "--variant=extract", f"--include={','.join(packages)}",
              SUITE, str(partial)])
        partial.rename(out)
    return out


def _package_entries(tar_path: Path) -> list[cpio.Entry]:
    entries = []
    with tarfile.open(tar_path) as tar:
        for member in tar.getmembers():
            path = member.name.removeprefix("./").rstrip("/")
            if not path or any((path + "/").startswith(prefix) for prefix in _LEFT_OUT):
                continue
            mode = member.mode & 0o7777
            if member.isdir():
                entries.append(cpio.directory(path, mode))
            elif member.issym():
                entries.append(cpio.symlink(path, member.linkname))
            elif member.isfile():
                extracted = tar.extractfile(member)
                assert extracted is not None
                entries.append(cpio.file(path, extracted.read(), mode))
            elif member.islnk():  # a hard link: a copy of the file it names
                target = tar.getmember(member.linkname)
                extracted = tar.extractfile(target)
                assert extracted is not None
                entries.append(cpio.file(path, extracted.read(), mode))
    return entries


def _program_entries(tar_path: Path, program: str) -> list[cpio.Entry]:
    """`program` of the packages in `tar_path`, its loader and every library it loads (by
    DT_NEEDED, transitively, found where the loader looks), with the symlinks that lead to them.
    GuestBuildError names what is missing."""
    with tarfile.open(tar_path) as tar:
        members = {m.name.removeprefix("./").rstrip("/"): m for m in tar.getmembers()}
        entries: dict[str, cpio.Entry] = {}

        def add(path: str) -> bytes:
            """Add `path` (following its symlinks); the file's content."""
            for _ in range(16):
                member = members.get(path)
                if member is None:
                    raise GuestBuildError(f"{program} needs {path}, which {', '.join(AGENT_PACKAGES)} does not bring")
                if member.issym():
                    entries[path] = cpio.symlink(path, member.linkname)
                    link = member.linkname
                    path = os.path.normpath(link.lstrip("/") if link.startswith("/") else
                                            os.path.join(os.path.dirname(path), link))
                    continue
                if member.islnk():
                    member = members[member.linkname.removeprefix("./")]
                extracted = tar.extractfile(member)
                assert extracted is not None
                data = extracted.read()
                entries[path] = cpio.file(path, data, member.mode & 0o7777)
                return data
            raise GuestBuildError(f"{path}: too many symbolic links")

        binary = add(program)
        interp = elf.interpreter(binary)  # the loader, which the kernel starts for the program
        if interp is not None:
            add(interp.lstrip("/"))
        todo, seen = elf.needed(binary), set()
        while todo:
            soname = todo.pop()
            if soname in seen:
                continue
            seen.add(soname)
            found = next((f"{d}/{soname}" for d in LIBRARY_DIRS if f"{d}/{soname}" in members), None)
            if found is None:
                raise GuestBuildError(f"{program} needs {soname}, found in none of {', '.join(LIBRARY_DIRS)}")
            todo += elf.needed(add(found))
    return list(entries.values())


def _applets(busybox: bytes) -> list[str]:
    """busybox's applets as paths (`bin/ls`, `sbin/udhcpc`, ...), from the binary itself (static)."""
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "busybox"
        exe.write_bytes(busybox)
        exe.chmod(0o755)
        return _run([str(exe), "--list-full"]).split()


def _rootfs_entries(rootfs: Path) -> list[cpio.Entry]:
    entries = []
    for path in sorted(rootfs.rglob("*")):
        relative = path.relative_to(rootfs).as_posix()
        mode = stat.S_IMODE(path.stat().st_mode)
        if path.is_dir():
            entries.append(cpio.directory(relative, 0o755))
        else:  # scripts keep their executable bit, everything is readable
            entries.append(cpio.file(relative, path.read_bytes(), 0o755 if mode & 0o111 else 0o644))
    return entries


def assemble(package_entries: list[cpio.Entry], rootfs: Path = ROOTFS) -> bytes:
    """The initramfs of `package_entries` and `rootfs` (see the module docstring; pure but for
    running busybox for its applet list). `rootfs`'s files replace the packages' of the same path."""
    own = _rootfs_entries(rootfs)
    own_paths = {e.path for e in own}
    by_path = {e.path: e for e in package_entries if e.path not in own_paths}
    busybox = by_path.get("bin/busybox")
    if busybox is None:
        raise GuestBuildError("the packages hold no bin/busybox (PACKAGES must include busybox-static)")
    skeleton = [cpio.directory(d) for d in ("bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "dev", "proc",
                                           "sys", "run", "tmp", "root", "var")]
    wanted: dict[str, cpio.Entry] = {e.path: e for e in skeleton}
    for entry in [*by_path.values(), *own]:
        if entry.path in wanted and entry.mode == wanted[entry.path].mode:
            continue
        wanted[entry.path] = entry
    for applet in _applets(busybox.data):
        wanted.setdefault(applet, cpio.symlink(applet, "/bin/busybox"))
    wanted["dev/console"] = cpio.char_device("dev/console", 5, 1)
    wanted.setdefault("var/run", cpio.symlink("var/run", "/run"))  # qemu-ga keeps its pid file there
    wanted["init"] = cpio.symlink("init", "/bin/busybox")  # busybox's init, which reads etc/inittab
    return cpio.archive(_parents_first(wanted))


def _parents_first(entries: dict[str, cpio.Entry]) -> list[cpio.Entry]:
    """Every entry after the directories that hold it (missing ones made), in path order."""
    out: dict[str, cpio.Entry] = {}
    for path in sorted(entries, key=lambda p: (p.count("/"), p)):
        parts = path.split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            if parent not in out:
                out[parent] = entries.get(parent, cpio.directory(parent))
        out.setdefault(path, entries[path])
    return list(out.values())


def initramfs(packages: tuple[str, ...] = PACKAGES, rootfs: Path = ROOTFS, build: Path = BUILD) -> Path:
    """The initramfs file, built when its inputs changed (the package lists and every file of
    `rootfs`, names and modes included). GuestBuildError names the failed step."""
    with _locked(build):
        tar, agent_tar = packages_tar(packages, build), packages_tar(AGENT_PACKAGES, build)
        digest = hashlib.sha256(f"{tar.name} {agent_tar.name}".encode())
        for path in sorted(rootfs.rglob("*")):
            digest.update(f"{path.relative_to(rootfs)}:{path.stat().st_mode:o}".encode())
            if path.is_file():
                digest.update(path.read_bytes())
        for source in (cpio.__file__, elf.__file__, __file__):
            digest.update(Path(str(source)).read_bytes())
        out = build / f"initramfs-{digest.hexdigest()[:16]}.cpio"
        if not out.exists():
            data = assemble([*_package_entries(tar), *_program_entries(agent_tar, AGENT)], rootfs)
            partial = out.with_suffix(".partial")
            partial.write_bytes(data)
            os.replace(partial, out)
        return out
