"""The Linux guest on the real node: its kernel-boot container image and the objects that boot it.

KubeVirt boots a kernel from a container image (`spec.domain.firmware.kernelBoot.container`):
virt-controller adds two containers of that image to the launcher pod, the init container
`kernel-boot-init` and the container `kernel-boot`, both running KubeVirt's `container-disk`
(copied from its launcher image into the pod's `/usr/bin`), which only holds a socket open; then
virt-handler bind-mounts the image's `kernelPath` and `initrdPath` files, read-only, at
`<container-disks>/kernel-boot/<base name>` in the launcher's view (`pkg/container-disk`,
`pkg/virt-handler/container-disk/mount.go` `mountKernelArtifacts`, @d923fdb815cd). So the image
holds nothing but the two files: `/boot/vmlinux` (../shared/guest's PVH kernel) and
`/boot/initramfs` (tests/linux_guest), readable by the launcher's uid 107.

`KernelBootImage.build()` writes it as an OCI archive (`../shared/k8s/oci-archive.py`, no
registry) under `build/cluster/`; `load(cluster)` imports it into node01 (`node-import.sh`).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from tests.cluster.images import BUILD, SHARED_K8S, Archive, read_archive
from tests.cluster.node import NodeCluster, archive_reference
from tests.cluster.objects import CH
from tests.linux_guest import build as linux

IMAGE = "localhost/kubevirt-ch/linux-guest:1"
KERNEL_PATH = "/boot/vmlinux"
INITRD_PATH = "/boot/initramfs"


def missing() -> str | None:
    """What the Linux guest's image lacks here (one line), or None."""
    return linux.missing()


def build_image(out_dir: Path = BUILD) -> Archive:
    """The kernel-boot container image as an OCI archive (the module docstring)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / "linux-guest.oci.tar"
    argv = ["python3", str(SHARED_K8S / "oci-archive.py"), "-n", IMAGE, "-o", str(out),
            f"--add={linux.kernel()}:{KERNEL_PATH}:644", f"--add={linux.initramfs()}:{INITRD_PATH}:644"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        raise linux.GuestBuildError(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return read_archive(out)


def load(cluster: NodeCluster, archive: Archive) -> None:
    """Import `archive` into node01's containerd as a registry pull leaves it."""
    out = cluster.node_script("node-import.sh", str(archive.path))
    if f"{archive.name} {archive_reference(archive)}" not in out.splitlines():
        raise linux.GuestBuildError(f"node-import.sh did not load {archive.name} ({archive.digest}):\n{out}")


def kernel_boot(kernel_args: str | None = None) -> dict[str, Any]:
    """`spec.domain.firmware` booting the Linux guest, with ../shared/guest's command line."""
    return {"kernelBoot": {"container": {"image": IMAGE, "kernelPath": KERNEL_PATH, "initrdPath": INITRD_PATH,
                                         "imagePullPolicy": "IfNotPresent"},
                           "kernelArgs": kernel_args if kernel_args is not None else linux.kernel_args()}}


def linux_vmi_spec(*, memory: str = "256Mi", user_data: str | None = None, nic: bool = True) -> dict[str, Any]:
    """The spec of an annotated VMI booting the Linux guest: no disk but the cloud-init NoCloud
    one (with `user_data`), a masquerade interface on the pod network (unless `nic` is False),
    no display."""
    devices: dict[str, Any] = {"autoattachGraphicsDevice": False, "disks": []}
    spec: dict[str, Any] = {"domain": {"memory": {"guest": memory}, "firmware": kernel_boot(), "devices": devices},
                            "volumes": []}
    if nic:
        devices["interfaces"] = [{"name": "default", "masquerade": {}}]
        spec["networks"] = [{"name": "default", "pod": {}}]
    else:
        devices["autoattachPodInterface"] = False
    if user_data is not None:
        devices["disks"].append({"name": "cloudinitdisk", "disk": {"bus": "virtio"}})
        spec["volumes"].append({"name": "cloudinitdisk", "cloudInitNoCloud": {"userData": user_data}})
    return spec


def linux_vmi(name: str, **options: Any) -> dict[str, Any]:
    """An annotated VMI booting the Linux guest (`linux_vmi_spec(**options)`)."""
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": name, "annotations": dict(CH)}, "spec": linux_vmi_spec(**options)}


def linux_vm(name: str, **options: Any) -> dict[str, Any]:
    """A VirtualMachine (runStrategy Always) whose template is `linux_vmi_spec(**options)`."""
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": name},
            "spec": {"runStrategy": "Always",
                     "template": {"metadata": {"annotations": dict(CH)}, "spec": linux_vmi_spec(**options)}}}
