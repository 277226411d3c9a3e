"""The pod's `network-info` downward-API file, pure: which device backs which network.

virt-controller copies the Multus `device-info` of SR-IOV interfaces and of binding plugins with
`downwardAPI: device-info` into the pod annotation `kubevirt.io/network-info` and mounts it into
the compute container as `/etc/podinfo/network-info` (`pkg/network/downwardapi/networkinfo.go`,
`pkg/virt-controller/services/template.go@d923fdb815cd`). Its shape:

    {"interfaces": [{"network": "<VMI network name>",
                     "deviceInfo": {"type": "pci", "version": "1.1.0",
                                    "pci": {"pci-address": "0000:65:00.2"}},
                     "mac": "...", "mtu": 1500}, ...]}

`deviceInfo` follows the NPWG device-info spec v1.1.0 (`k8snetworkplumbingwg/device-info-spec
SPEC.md`): `type` `pci` | `vdpa` | `vhost-user` | `memif`; a vhost-user device has
`{"mode": "client"|"server", "path": "<socket>"}`, the mode stated from the workload's side
("client": the switch creates the socket and the VM connects).

Upstream's launcher resolves SR-IOV PCI addresses from this file
(`pkg/virt-launcher/virtwrap/device/hostdevice/sriov/hostdev.go`), not from `PCI_RESOURCE_*`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

NETWORK_INFO_PATH = "/etc/podinfo/network-info"  # downwardapi.MountPath + NetworkInfoVolumePath


class NetworkInfoError(ValueError):
    """The network-info file is not what virt-controller writes; the message says why."""


@dataclass(frozen=True)
class DeviceInfo:
    network: str
    type: str
    pci_address: str = ""
    vhost_user_mode: str = ""  # "client" | "server" (the VM's role)
    vhost_user_path: str = ""
    mac: str = ""
    mtu: int | None = None


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def parse_network_info(text: str) -> dict[str, DeviceInfo]:
    """Map VMI network name -> DeviceInfo. Entries without `deviceInfo` are skipped.

    Raises NetworkInfoError (never anything else) for text that is not the JSON object above.
    An empty file means "no devices yet" and gives an empty mapping.
    """
    if not text.strip():
        return {}
    try:
        data: Any = json.loads(text)
    except ValueError as e:
        raise NetworkInfoError(f"{NETWORK_INFO_PATH} is not valid JSON: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("interfaces", []), list):
        raise NetworkInfoError(f"{NETWORK_INFO_PATH} must be an object with an 'interfaces' list")
    out: dict[str, DeviceInfo] = {}
    for i, entry in enumerate(data.get("interfaces") or []):
        where = f"{NETWORK_INFO_PATH} interfaces[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("network"), str):
            raise NetworkInfoError(f"{where} must be an object with a 'network' name")
        info = entry.get("deviceInfo")
        if info is None:
            continue
        if not isinstance(info, dict):
            raise NetworkInfoError(f"{where}.deviceInfo must be an object")
        mtu = entry.get("mtu")
        pci = _object(info.get("pci"))
        vhost = _object(info.get("vhost-user"))
        out[entry["network"]] = DeviceInfo(
            network=entry["network"],
            type=str(info.get("type", "")),
            pci_address=str(pci.get("pci-address", "")),
            vhost_user_mode=str(vhost.get("mode", "")),
            vhost_user_path=str(vhost.get("path", "")),
            mac=str(entry.get("mac", "") or ""),
            mtu=mtu if isinstance(mtu, int) and not isinstance(mtu, bool) and mtu > 0 else None,
        )
    return out
