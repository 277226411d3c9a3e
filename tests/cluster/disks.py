"""What the VMM and the guest of a launcher pod say about its disks, for the storage stories:
the VMM's own config and device tree (`vm.info` on its API socket, reached through its root, as
an administrator of the node could), and the tiny guest's disk commands on `virtctl console`
(`~w` writes its mark on every writable disk, `~d` reads each disk's first 4 KiB; the guest names
a disk by its PCI slot, which the device tree maps to the VMI's disk name)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from tests.cluster.node import Console, NodeCluster
from tests.functional.pod_probes import vm_info
from tests.guest.console import COMMANDS, disk_states

VMM_COMM = "cloud-hyperviso"  # the kernel's 15 characters of `cloud-hypervisor`


def vmm_info(cluster: NodeCluster, pod: dict[str, Any], comm: str = VMM_COMM) -> dict[str, Any]:
    """vm.info of the VMM in the compute container of `pod` (on node01)."""
    vmm = cluster.process_in(pod, "compute", comm)
    argv = Path(f"/proc/{vmm}/cmdline").read_text().split("\0")
    (socket,) = [arg.split("path=", 1)[1].split(",")[0] for prev, arg in itertools.pairwise(argv)
                 if prev == "--api-socket"]
    info: dict[str, Any] = vm_info(cluster.path_in(vmm, socket))
    return info


def slots(info: dict[str, Any]) -> dict[str, str]:
    """Each disk's "<segment>:<slot>" as the guest reports it: the bdf of its virtio-pci transport,
    the device tree's node whose child the disk is."""
    disks = {d["id"] for d in info["config"].get("disks") or []}
    found = {}
    for node in (info.get("device_tree") or {}).values():
        for child in node.get("children") or []:
            if child in disks and node.get("pci_bdf"):
                segment, _bus, device = str(node["pci_bdf"]).split(".")[0].split(":")
                found[child] = f"{int(segment, 16)}:{int(device, 16)}"
    return found


def disk_command(console: Console, command: str, timeout: float = 60) -> dict[str, str]:
    """Type the guest's `disk-write` or `disk-read` command; what it printed for each disk, by slot
    (WRITTEN, READ-ONLY, MARKED, UNMARKED, ERROR)."""
    letter, done = COMMANDS[command]
    start = len(console.text)
    count = console.text.count(done.decode())
    console.type(b"~" + letter)
    out = console.wait_for(done.decode(), count=count + 1, timeout=timeout)
    return disk_states(out[start:].encode())


def by_name(states: dict[str, str], info: dict[str, Any]) -> dict[str, str]:
    """`disk_command`'s answer keyed by the VMI's disk names (from `info`'s device tree)."""
    names = {slot: name for name, slot in slots(info).items()}
    return {names.get(slot, slot): state for slot, state in states.items()}
