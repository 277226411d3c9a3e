"""The `api.Domain` view of a VM, as virt-handler decodes it (contract.md §10).

Device descriptions used by the translator to tell the Domain view what the VM has. The JSON
builder itself lives below (written by the launcher work).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DomainDisk:
    """One disk as `Spec.Devices.Disks[]` shows it. `alias` is the VMI disk name."""

    alias: str
    target_dev: str  # vda, vdb, ... in VMI disk order
    source_file: str = ""
    source_dev: str = ""
    readonly: bool = False
    serial: str = ""
    boot_order: int | None = None
    image_type: str = "raw"  # Driver.Type: raw | qcow2
    bus: str = "virtio"


@dataclass(frozen=True)
class DomainInterface:
    """One NIC as `Spec.Devices.Interfaces[]` shows it. `alias` is the VMI interface name;
    `mac` is never empty (virt-handler dereferences it)."""

    alias: str
    mac: str
    tap: str = ""
    mtu: int | None = None
    queues: int | None = None
    model: str = "virtio-non-transitional"
    type: str = "ethernet"
