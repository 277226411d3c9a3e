"""KubeVirt's own virt-launcher image for the real node: QEMU 10.0 and libvirt 12.9 from Debian trixie
with KubeVirt's launcher binaries (virt-launcher, virt-launcher-monitor, virt-freezer, virt-probe,
libvirt-hook-client, virt-tail, container-disk) built at virt-handler's commit. It is
virt-controller's `--launcher-image`: VMIs without the add-on's annotation run on QEMU in it, and
annotated ones take their `guest-console-log` (virt-tail) and `container-disk-binary` containers
from it.

`build(build_dir, name)` runs `../shared/kubevirt/qemu-launcher/build-image.sh` (root, mmdebstrap,
podman, a Debian mirror: about a minute quiet, four at a load of 10) from `../shared`, with the
image tagged `name`, and keeps the archive under `build_dir`, keyed by the script's inputs (its
directory and KubeVirt's binaries' checksums) and the name: later runs reuse it. The script's
podman works in a storage of its own under `build_dir` (never the machine's
`/var/lib/containers`), emptied once the archive is written. Raises QemuLauncherBuildError with
the tail of the script's output when it fails; an archive of other inputs kept before stays then.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from tests.cluster.podman_runroot import short_runroot
from tests.real_vmm import SHARED

SCRIPT_DIR = SHARED / "kubevirt" / "qemu-launcher"
SCRIPT = SCRIPT_DIR / "build-image.sh"
KUBEVIRT_SUMS = SHARED / "kubevirt" / "SHA256SUMS.txt"


class QemuLauncherBuildError(RuntimeError):
    """build-image.sh failed; the message carries its output's tail."""


def missing() -> str | None:
    """What building the image lacks here (one line), or None."""
    if not SCRIPT.exists():
        return f"{SCRIPT} is absent: ../shared is not beside this checkout"
    return None


def inputs_key(name: str) -> str:
    """A digest of what the image is built from: the script's directory, KubeVirt's binaries, the name."""
    digest = hashlib.sha256(name.encode())
    for path in [*sorted(SCRIPT_DIR.iterdir()), KUBEVIRT_SUMS]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def build(build_dir: Path, name: str, timeout: float = 1800) -> Path:
    """The OCI archive of the image tagged `name`, built unless an archive of the same inputs is kept."""
    key = inputs_key(name)
    out = build_dir / f"virt-launcher-qemu-{key}.oci.tar"
    if out.exists():
        return out
    build_dir.mkdir(parents=True, exist_ok=True)
    storage = build_dir / "qemu-launcher-podman"
    conf = build_dir / "qemu-launcher-storage.conf"
    conf.write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{storage / "root"}"\n'
                    f'runroot = "{short_runroot(storage)}"\n')
    env = {**os.environ, "TAG": name, "CONTAINERS_STORAGE_CONF": str(conf)}
    partial = out.with_suffix(".partial.tar")
    try:
        proc = subprocess.run(["bash", str(SCRIPT), str(partial)], capture_output=True, text=True, env=env,
                              timeout=timeout, check=False)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
            raise QemuLauncherBuildError(f"{SCRIPT} failed ({proc.returncode}):\n{tail}")
        partial.rename(out)
    finally:
        partial.unlink(missing_ok=True)
        _empty(storage, env)
    for older in build_dir.glob("virt-launcher-qemu-*.oci.tar"):
        if older != out:
            older.unlink()
    return out


def _empty(storage: Path, env: dict[str, str]) -> None:
    """Remove the script's podman storage: its images through podman (which unmounts their layers),
    then the directory and its run root."""
    if storage.exists():
        subprocess.run(["podman", "rmi", "--all", "--force"], capture_output=True, env=env, timeout=300, check=False)
        shutil.rmtree(storage)
    shutil.rmtree(short_runroot(storage), ignore_errors=True)
