"""The images the real node runs, built here without a registry (no image is pulled, none faked).

- **ch-launcher and ch-admission**: `make images` (the Containerfile's `launcher` and `admission`
  targets, built with podman and saved as OCI archives in `build/images/`), offline: `PYTHON_IMAGE`
  is a Debian bookworm base made here with mmdebstrap (python3, its venv module, `python` as in
  the python images) and imported into podman; `VMM_ASSETS` holds `../shared/vmm/cloud-hypervisor`
  and the tiny guest of `tests/guest/` as both firmware files (every BIOS or EFI VMI boots it).
- **KubeVirt's launcher image** (virt-controller's `--launcher-image`): KubeVirt's own, QEMU and
  libvirt with KubeVirt's launcher binaries, built by `../shared/kubevirt/qemu-launcher/build-image.sh`
  (`qemu_launcher.py`, cached under `build/cluster/`). VMIs without the add-on's annotation run on
  QEMU in it; it also renders the launcher pod's containers other than `compute` for annotated ones
  (`guest-console-log` runs `/usr/bin/virt-tail`, `container-disk-binary` copies
  `/usr/bin/container-disk` with `/usr/bin/cp`).
- **a containerDisk** `localhost/kubevirt-ch/disk:1`: `/disk/disk.img`, 1 MiB whose first sector is
  `bootsector.S` (`bootdisk.py`): SeaBIOS boots it on QEMU, where it prints a line and powers off
  on the ACPI button; Cloud Hypervisor VMIs boot the tiny guest as firmware and read no disk (the
  launcher puts a qcow2 overlay over it).

Everything lives under `build/` (ignored by git): podman's storage of its own (`build/cluster/podman`,
so the machine's `/var/lib/containers` is never touched), the base root filesystem (kept and reused:
mmdebstrap takes about a minute), the archives. Only podman's run root (its locks and transient
state), whose path podman refuses above 50 characters, lives outside it: `short_runroot()`, a
directory under /tmp named after the storage, so that a checkout at any depth builds. `podman build`
reuses its layers, so a rebuild with unchanged sources takes seconds; KubeVirt's launcher image,
when its archive is not kept yet, builds beside the others (its own mmdebstrap and podman storage).
A file lock serialises concurrent builds of one checkout.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.apiserver.cluster import Cluster
from tests.cluster import qemu_launcher
from tests.cluster.bootdisk import boot_disk
from tests.cluster.podman_runroot import short_runroot
from tests.guest.build import guest_payload, missing_tools
from tests.real_vmm import SHARED, SHARED_CH

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build" / "cluster"
IMAGES_DIR = REPO / "build" / "images"
SHARED_K8S = SHARED / "k8s"
UNPACK = SHARED / "unpack.sh"
BASE_IMAGE = "localhost/kubevirt-ch/python:3.11-bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3")
DISK_IMAGE = "localhost/kubevirt-ch/disk:1"
# what the Containerfile's header tags (and addon_manifests/ and the ConfigMap name)
LAUNCHER_IMAGE = "ghcr.io/kubevirt-ch/ch-launcher:v0.1.0"
ADMISSION_IMAGE = "ghcr.io/kubevirt-ch/ch-admission:v0.1.0"


class BuildError(RuntimeError):
    """A build step failed; the message carries its command and output."""


def missing() -> str | None:
    """What the image build lacks here (one line, for a skip reason), or None."""
    for tool, package in (("podman", "podman"), ("mmdebstrap", "mmdebstrap"), ("make", "make"),
                          ("unshare", "util-linux")):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian package {package}; `make test` installs it as root)"
    if not SHARED_CH.exists():
        return f"{SHARED_CH} is absent: ../shared is not beside this checkout"
    return qemu_launcher.missing() or missing_tools()


@dataclass(frozen=True)
class Archive:
    """An OCI image archive and the image it holds (name and manifest digest)."""

    path: Path
    name: str
    digest: str


@dataclass(frozen=True)
class Images:
    launcher: Archive  # ch-launcher (Containerfile target `launcher`)
    admission: Archive  # ch-admission (target `admission`)
    virt_launcher: Archive  # KubeVirt's launcher image, as virt-controller is configured with it
    disk: Archive  # the containerDisk of the test VMIs

    def all(self) -> tuple[Archive, ...]:
        return (self.launcher, self.admission, self.virt_launcher, self.disk)


def read_archive(path: Path) -> Archive:
    """The one image an OCI archive holds: its reference name and its manifest's digest."""
    with tarfile.open(path) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise BuildError(f"{path} has no index.json")
        index = json.load(member)
    (manifest,) = index["manifests"]
    annotations = manifest.get("annotations", {})
    name = annotations.get("io.containerd.image.name") or annotations["org.opencontainers.image.ref.name"]
    return Archive(path, name, manifest["digest"])


def _run(argv: list[str], *, cwd: Path = REPO, timeout: float = 1200, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        raise BuildError(f"{' '.join(argv)} failed ({proc.returncode}):\n{tail}")
    return proc.stdout


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    BUILD.mkdir(parents=True, exist_ok=True)
    with open(BUILD / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


class Builder:
    """Builds the four archives (see the module docstring); `build()` returns them."""

    def __init__(self, build: Path = BUILD, images_dir: Path = IMAGES_DIR) -> None:
        self.build_dir = build
        self.images_dir = images_dir
        storage = build / "podman"
        self.storage_root = storage / "root"
        self.podman = ["podman", "--root", str(self.storage_root), "--runroot", str(short_runroot(storage))]

    def build(self) -> Images:
        with _locked(), concurrent.futures.ThreadPoolExecutor(1) as pool:
            virt_launcher = pool.submit(self.virt_launcher_image)  # a storage of its own: built beside the rest
            self.adopt_storage()
            rootfs = self.base_rootfs()
            self.base_image(rootfs)
            launcher, admission = self.addon_images()
            return Images(launcher, admission, virt_launcher.result(), self.disk_image())

    def adopt_storage(self) -> None:
        """A storage an earlier build made with another run root (its database records it, and
        podman refuses it: "database configuration mismatch") gets a new database: it holds
        the state of containers, of which a build keeps none; the images and layers stay."""
        proc = subprocess.run([*self.podman, "images", "--quiet"], capture_output=True, text=True, timeout=300,
                              check=False)
        if proc.returncode != 0 and "database configuration mismatch" in proc.stderr:
            (self.storage_root / "libpod" / "bolt_state.db").unlink(missing_ok=True)
            _run([*self.podman, "images", "--quiet"], timeout=300)

    # --- the base: Debian bookworm with python3 --------------------------------------------

    def base_rootfs(self) -> Path:
        """mmdebstrap's root filesystem tar, made once per package list and kept."""
        key = hashlib.sha256(" ".join(("bookworm", "minbase", *BASE_PACKAGES)).encode()).hexdigest()[:12]
        out = self.build_dir / f"bookworm-{key}.tar"
        if not out.exists():
            partial = out.with_suffix(".partial.tar")
            # its own mount namespace: mmdebstrap's mounts (proc, dev, ...) stay private
            _run(["unshare", "--mount", "mmdebstrap", "--quiet", "--variant=minbase",
                  f"--include={','.join(BASE_PACKAGES)}", "bookworm", str(partial)], timeout=900)
            partial.rename(out)
        return out

    def base_image(self, rootfs: Path) -> None:
        """The root filesystem as podman's PYTHON_IMAGE (imported once per root filesystem)."""
        label = f"kubevirt-ch.rootfs={rootfs.name}"
        found = _run([*self.podman, "images", "--filter", f"reference={BASE_IMAGE}", "--filter", f"label={label}",
                      "--format", "{{.ID}}"])
        if found.strip():
            return
        _run([*self.podman, "import", "--change", f"LABEL {label}", "--change", 'CMD ["/bin/bash"]',
              str(rootfs), BASE_IMAGE], timeout=300)

    # --- make images ------------------------------------------------------------------------

    def vmm_assets(self) -> Path:
        """The directory `VMM_ASSETS` names: the real binary, the tiny guest as both firmwares."""
        assets = self.build_dir / "vmm-assets"
        assets.mkdir(parents=True, exist_ok=True)
        guest = guest_payload()
        for name, source in (("cloud-hypervisor", SHARED_CH), ("hypervisor-fw", guest), ("CLOUDHV.fd", guest)):
            target = assets / name
            if not target.exists() or target.read_bytes() != source.read_bytes():
                shutil.copyfile(source, target)
        return assets

    def addon_images(self) -> tuple[Archive, Archive]:
        out = _run(["make", "--no-print-directory", "images", f"PODMAN={' '.join(self.podman)}",
                    f"PYTHON_IMAGE={BASE_IMAGE}", f"VMM_ASSETS={self.vmm_assets()}", f"IMAGES_DIR={self.images_dir}"])
        self._forget_older_layers(out)
        launcher = read_archive(self.images_dir / "ch-launcher.oci.tar")
        admission = read_archive(self.images_dir / "ch-admission.oci.tar")
        if (launcher.name, admission.name) != (LAUNCHER_IMAGE, ADMISSION_IMAGE):
            raise BuildError(f"make images tagged {launcher.name} and {admission.name}, "
                             f"not {LAUNCHER_IMAGE} and {ADMISSION_IMAGE}")
        return launcher, admission

    def _forget_older_layers(self, build_output: str) -> None:
        """Remove the untagged images (build steps) this build did not use: each change of the
        sources leaves a chain of them behind. The ones it used stay, as the next build's cache."""
        used = set(re.findall(r"^--> (?:Using cache )?([0-9a-f]{11,64})$", build_output, re.MULTILINE))
        dangling = _run([*self.podman, "images", "--quiet", "--no-trunc", "--filter", "dangling=true"]).split()
        stale = [image for image in dangling
                 if not any(image.removeprefix("sha256:").startswith(u) for u in used)]
        if stale:
            _run([*self.podman, "rmi", "--force", *stale])

    # --- KubeVirt's launcher image and the containerDisk -------------------------------------

    def _oci_archive(self, name: str, out: Path, *args: str) -> Archive:
        _run(["python3", str(SHARED_K8S / "oci-archive.py"), "-n", name, "-o", str(out), *args], timeout=300)
        return read_archive(out)

    def virt_launcher_image(self, name: str | None = None) -> Archive:
        path = qemu_launcher.build(self.build_dir, name or Cluster.launcher_image())
        return read_archive(path)

    def disk_image(self) -> Archive:
        return self._oci_archive(DISK_IMAGE, self.build_dir / "disk.oci.tar", f"--add={boot_disk()}:/disk/disk.img:644")

