"""PersistentVolumeClaims on the real node without a storage provisioner, as an administrator makes
them: static `local` PersistentVolumes with node affinity to the node, each bound to its claim by
name (`spec.volumeName`; kube-controller-manager's binder marks both Bound) and no StorageClass.

- **Filesystem**: a directory of the cluster's own (the node sees the host's directories). A VMI's
  launcher creates `disk.img` in it at its first start (KubeVirt's rule for a claim without one);
  a claim meant for hotplug gets its `disk.img` here first, as CDI leaves one in a DataVolume:
  virt-handler's hotplug mounter bind-mounts that file and creates none.
- **Block**: a loop device over a file of the cluster's own (`losetup --find`, on the machine: the
  node's /dev is the host's), as the PV's `local.path`. kubelet maps a block volume into a pod
  through a loop device of its own over that device node (`.../volumeDevices/<pv>/<pod uid>`),
  which it detaches when the pod goes.

What the guest wrote is read where the administrator would look: `disk.img` in the directory,
the loop device. `close()` deletes the claims and volumes, waits until kubelet has let go of every
loop device over them, and detaches its own (each step is tried even when an earlier one failed).
Loop devices are the machine's: each one's backing file, and each volume (which names kubelet's),
carries the cluster's namespace (`kvch-api-<pid>-<n>`), so what a killed test run left is
detached by the next one (`sweep_stale_loops`).
"""

from __future__ import annotations

import contextlib
import functools
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.apiserver.cluster import ClusterError
from tests.cluster.node import NodeCluster
from tests.netns import pid_alive

HOSTNAME = "kubernetes.io/hostname"
# a loop device of a cluster's volume: ours (`<netns>-<claim>.img`) or kubelet's (`.../volumeDevices/<netns>-<claim>/`)
_STALE_LOOP = re.compile(r"/kvch-api-(\d+)-\d+-")


def loop_devices() -> dict[str, str]:
    """The machine's loop devices: device -> backing file (`losetup --list`)."""
    listing = subprocess.run(["losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE"], capture_output=True,
                             text=True, check=True, timeout=60).stdout
    return dict(line.split(None, 1) for line in listing.splitlines() if len(line.split(None, 1)) == 2)


@functools.cache
def sweep_stale_loops() -> None:
    """Detach the loop devices of volumes of clusters whose test process is gone (once per
    process). Only this module's names."""
    for device, backing in loop_devices().items():
        m = _STALE_LOOP.search(backing)
        if m and not pid_alive(int(m.group(1))):
            subprocess.run(["losetup", "--detach", device], capture_output=True, timeout=60, check=False)


@dataclass(frozen=True)
class Claim:
    """A claim and what backs it on the machine."""

    name: str
    volume_mode: str  # "Filesystem" or "Block"
    backing: Path  # the directory (Filesystem) or the loop device's backing file (Block)
    device: str = ""  # the loop device (Block)

    @property
    def image(self) -> Path:
        """The file the VMM's disk is: `disk.img` in the directory, or the loop device's backing file."""
        return self.backing / "disk.img" if self.volume_mode == "Filesystem" else self.backing


def _volume(name: str, node: str, size: str, mode: str, path: str) -> dict[str, Any]:
    affinity = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": HOSTNAME, "operator": "In", "values": [node]}]}]}}
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": "Retain", "volumeMode": mode, "storageClassName": "",
                     "local": {"path": path}, "nodeAffinity": affinity}}


def _claim(name: str, volume: str, size: str, mode: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": {"storageClassName": "", "volumeName": volume, "accessModes": ["ReadWriteOnce"],
                     "volumeMode": mode, "resources": {"requests": {"storage": size}}}}


class StaticVolumes:
    """Claims bound to static volumes on `node` (module docstring), their files under `directory`."""

    def __init__(self, cluster: NodeCluster, directory: Path, node: str = "node01") -> None:
        sweep_stale_loops()
        self.cluster = cluster
        self.directory = directory
        self.node = node
        self.claims: list[Claim] = []

    def volume_name(self, claim: str) -> str:
        """The PersistentVolume of `claim`: named after the cluster's namespace, so that the loop
        devices kubelet makes for it (named after the volume) are told apart from other runs'."""
        return f"{self.cluster.netns}-{claim}"

    def filesystem(self, name: str, size: str = "64Mi", disk_image: int = 0) -> Claim:
        """A Filesystem claim; `disk_image` > 0: its directory holds a `disk.img` of that many bytes
        (sparse), as for a volume to hotplug."""
        backing = self.directory / name
        backing.mkdir(parents=True)
        if disk_image:
            with open(backing / "disk.img", "wb") as f:
                f.truncate(disk_image)
        return self._create(Claim(name, "Filesystem", backing), size, str(backing))

    def block(self, name: str, size: str = "64Mi", size_bytes: int = 64 << 20) -> Claim:
        """A Block claim on a loop device over a sparse file of `size_bytes`."""
        self.directory.mkdir(parents=True, exist_ok=True)
        backing = self.directory / f"{self.volume_name(name)}.img"
        with open(backing, "wb") as f:
            f.truncate(size_bytes)
        device = subprocess.run(["losetup", "--find", "--show", str(backing)], capture_output=True, text=True,
                                check=True, timeout=60).stdout.strip()
        return self._create(Claim(name, "Block", backing, device), size, device)

    def _create(self, claim: Claim, size: str, path: str) -> Claim:
        self.claims.append(claim)
        volume = self.volume_name(claim.name)
        self.cluster.ok("create", "-f", "-", input=self.cluster.yaml(
            _volume(volume, self.node, size, claim.volume_mode, path), _claim(claim.name, volume, size,
                                                                            claim.volume_mode)))
        self.cluster.wait_for(lambda: self.cluster.json("get", "pvc", claim.name)["status"].get("phase") == "Bound",
                              f"claim {claim.name} to be Bound", timeout=60)
        return claim

    def kubelet_loops(self) -> list[str]:
        """The loop devices kubelet holds over this object's block volumes."""
        names = "|".join(re.escape(self.volume_name(c.name)) for c in self.claims if c.volume_mode == "Block")
        if not names:
            return []
        return [device for device, backing in loop_devices().items()
                if re.search(rf"/volumeDevices/({names})/", backing)]

    def close(self) -> None:
        """Claims and volumes deleted, kubelet's loop devices gone (60 s at most), ours detached."""
        errors: list[str] = []
        for claim in self.claims:
            for kind, name in (("pvc", claim.name), ("pv", self.volume_name(claim.name))):
                r = self.cluster.kubectl("delete", kind, name, "--ignore-not-found", "--wait=false")
                if r.rc != 0:
                    errors.append(r.out)
        with contextlib.suppress(ClusterError):
            self.cluster.wait_for(lambda: not self.kubelet_loops(), "kubelet to let go of the block volumes",
                                  timeout=60, every=1)
        for claim in self.claims:
            if claim.device:
                done = subprocess.run(["losetup", "--detach", claim.device], capture_output=True, text=True,
                                      timeout=60, check=False)
                if done.returncode != 0:
                    errors.append(f"losetup --detach {claim.device}: {done.stderr.strip()}")
        self.claims.clear()
        if errors:
            raise ClusterError("; ".join(errors))
