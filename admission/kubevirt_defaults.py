"""What KubeVirt's own mutating webhook (virt-api) writes into a new VMI before any validating
webhook sees it, as far as the translator's verdict depends on it. Pure.

The server never needs this: the API server sends it the VMI after virt-api's defaulting. `ch-
admission check` reads files as written, so it applies these defaults to VMIs first, to say what
the webhook will say of them (held against the real virt-api in
tests/apiserver/test_check_matches_server.py). Templates (VMs, replica sets, pools) are judged as
written by both: virt-api does not default a VM's template; their VMIs are defaulted when
virt-controller creates them.

In virt-api's order (kubevirt pkg/defaults/defaults.go@d923fdb815cd,
SetDefaultVirtualMachineInstance):

- every volume that no disk and no filesystem names gets a disk of its name (kubevirt
  pkg/util/util.go@d923fdb815cd, SetDefaultVolumeDisk);
- a disk without a device type becomes a `disk` (kubevirt
  staging/src/kubevirt.io/api/core/v1/defaults.go@d923fdb815cd, SetDefaults_DiskDevice);
- an empty `disk`, `cdrom` or `lun` bus becomes `sata`, KubeVirt's default on amd64 (kubevirt
  pkg/defaults/amd64.go@d923fdb815cd, setDefaultAmd64DisksBus), which the translator attaches as
  virtio-blk with a warning (docs/translation.md). amd64 is the only architecture the backend
  runs (others are refused whatever their buses);
- a VMI without `spec.evictionStrategy` gets the KubeVirt CR's
  `spec.configuration.evictionStrategy`, when there is one (setDefaultEvictionStrategy; offline:
  only with `check --kubevirt-cr`).

virt-api sets more (machine type, resource requests, CPU topology, a default NIC, hotplug limits),
none of which changes a verdict of the cases the test above holds against it.

Never raises: shapes the translator would refuse are left as they are for it to refuse.
"""

from __future__ import annotations

import copy
from typing import Any

DEVICE_TYPES = ("disk", "cdrom", "lun")  # DiskDevice at d923fdb815cd (no floppy any more)


def with_virt_api_defaults(vmi: Any, eviction_strategy: str = "") -> Any:
    """A copy of a VMI document with the defaults above applied (the document itself when it is
    not a VMI-shaped mapping); `eviction_strategy`: the cluster's default ("": none)."""
    spec = vmi.get("spec") if isinstance(vmi, dict) else None
    domain = spec.get("domain") if isinstance(spec, dict) else None
    devices = domain.get("devices", {}) if isinstance(domain, dict) else None
    if not isinstance(devices, dict) or not isinstance(devices.get("disks", []), list):
        return vmi
    out = copy.deepcopy(vmi)
    if eviction_strategy and out["spec"].get("evictionStrategy") is None:
        out["spec"]["evictionStrategy"] = eviction_strategy
    devices = out["spec"]["domain"].setdefault("devices", {})
    disks = devices.get("disks", [])
    filesystems = devices.get("filesystems")
    named = {d.get("name") for d in [*disks, *(filesystems if isinstance(filesystems, list) else [])]
             if isinstance(d, dict) and isinstance(d.get("name"), str)}
    volumes = out["spec"].get("volumes")
    for volume in volumes if isinstance(volumes, list) else []:
        if isinstance(volume, dict) and isinstance(volume.get("name"), str) and volume["name"] not in named:
            disks.append({"name": volume["name"]})
            named.add(volume["name"])
    if disks:
        devices["disks"] = disks
    for disk in disks:
        if not isinstance(disk, dict):
            continue
        if all(disk.get(kind) is None for kind in DEVICE_TYPES):
            disk["disk"] = {}
        for kind in DEVICE_TYPES:
            target = disk.get(kind)
            if isinstance(target, dict) and not target.get("bus"):
                target["bus"] = "sata"
    return out
