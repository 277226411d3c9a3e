"""The translator's output: a VmConfig, the preparation steps that must run before `vm.create`,
and what the Domain view needs to describe the devices.

Steps are plain data; `ch_launcher.prepare` executes them (the only I/O of a translation).
Each step names the VMI field it serves, so a failure at launch points at the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ch_launcher.ch.vmconfig import VmConfig
from ch_launcher.convert.errors import Degradation
from ch_launcher.kubevirt.domain import DomainDisk, DomainInterface


@dataclass(frozen=True)
class Step:
    """Base of every preparation step. `field` is the VMI field the step serves."""

    field: str


@dataclass(frozen=True)
class RequireFile(Step):
    """A file (or block device) that must exist before boot: firmware, kernel, a PVC image."""

    path: str
    what: str  # e.g. "firmware hypervisor-fw", "block device of PVC mypvc"
    block_device: bool = False


@dataclass(frozen=True)
class CreateOverlay(Step):
    """A copy-on-write qcow2 overlay at `path` over the read-only `backing` image."""

    path: str
    backing: str
    backing_format: str  # "raw" | "qcow2"; detected at preparation when "" (container disks)


@dataclass(frozen=True)
class CreateSparseImage(Step):
    """A sparse raw image of `size` bytes at `path`; left alone when it already exists (unless
    `overwrite`), as KubeVirt does for PVC `disk.img` files, emptyDisks and hostDisks."""

    path: str
    size: int
    overwrite: bool = False


@dataclass(frozen=True)
class IsoFile:
    """One file of an ISO: inline bytes, or the contents of `source` read at preparation."""

    name: str
    data: bytes | None = None
    source: str | None = None
    optional: bool = False  # a missing `source` is skipped instead of failing


@dataclass(frozen=True)
class BuildIso(Step):
    """An ISO 9660 image (Joliet and Rock Ridge) with `volume_label` and `files`."""

    path: str
    volume_label: str
    files: tuple[IsoFile, ...]
    source_dir: str | None = None  # also add every file of this directory (configMap, secret, ...)


@dataclass(frozen=True)
class WaitForSocket(Step):
    """A unix socket another container serves (vhost-user, virtiofsd); bounded wait."""

    path: str
    what: str
    timeout_seconds: float = 30.0


@dataclass
class Plan:
    config: VmConfig
    steps: list[Step] = field(default_factory=list)
    warnings: list[Degradation] = field(default_factory=list)
    disks: list[DomainDisk] = field(default_factory=list)
    interfaces: list[DomainInterface] = field(default_factory=list)
    serial_socket: str | None = None  # where the VMM's serial console listens, if anywhere
