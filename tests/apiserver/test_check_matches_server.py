"""`ch-admission check FILE` says, offline, what the webhook will say of a file. Through the real
API server the webhook judges a VMI after KubeVirt's own defaulting webhook (virt-api) has written
into it; `check` applies what of that matters to the verdict (admission/kubevirt_defaults.py: a
disk without a bus, or a volume without a disk, is `sata` to the webhook and warned about). Here
both judge the same objects and must say the same thing: the same refusal causes and the same
warnings as kubectl prints. Every case is valid for KubeVirt (its own refusals come first).
`check` is given the cluster's KubeVirt CR as `kubectl get` prints it (`--kubevirt-cr`), which
says which host devices are USB, as the server's own read of it does."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
from typing import Any

import pytest

from tests.apiserver.cluster import PCI_RESOURCE, USB_RESOURCE
from tests.apiserver.objects_support import vm, vmi

CHECK = pathlib.Path(sys.executable).parent / "ch-admission"


def devices(**extra: Any) -> dict[str, Any]:
    obj = vmi("x")
    obj["spec"]["domain"]["devices"].update(extra)
    return obj


def with_disks(*disks: dict[str, Any]) -> dict[str, Any]:
    obj = vmi("x")
    obj["spec"]["domain"]["devices"]["disks"] = [{"name": "root", "disk": {"bus": "virtio"}}, *disks]
    obj["spec"]["volumes"] += [{"name": d["name"], "containerDisk": {"image": f"example.org/{d['name']}:1"}}
                               for d in disks]
    return obj


CASES = {
    "runs": vmi("x"),
    "display": vmi("x", graphics=True),
    "disk without bus": with_disks({"name": "data", "disk": {}}),
    "sata disk": with_disks({"name": "data", "disk": {"bus": "sata"}}),
    "cdrom without bus": with_disks({"name": "iso", "cdrom": {}}),
    "lun": None,
    "disk without device type": with_disks({"name": "data"}),
    "volume without disk": None,
    "no interfaces no networks": None,
    "vm disk without bus": None,
    "machine type": None,
    "tablet without bus": devices(inputs=[{"name": "tablet", "type": "tablet"}]),
    "nic without model": vmi("x"),
    "e1000 nic": None,
    "sound": devices(sound={"name": "audio"}),
    "watchdog": None,
    "vm with display": vm("x", graphics=True),
    "usb host device": devices(hostDevices=[{"name": "stick", "deviceName": USB_RESOURCE}]),
    "pci host device": devices(hostDevices=[{"name": "t4", "deviceName": PCI_RESOURCE}]),
    "unlisted host device": devices(hostDevices=[{"name": "qat", "deviceName": "intel.com/qat"}]),
    "vm with a usb host device": None,
}


def _e1000() -> dict[str, Any]:
    obj = vmi("x")
    obj["spec"]["domain"]["devices"]["interfaces"][0]["model"] = "e1000"
    return obj


def _watchdog() -> dict[str, Any]:
    obj = vmi("x")
    obj["spec"]["domain"]["devices"]["watchdog"] = {"name": "wd", "i6300esb": {"action": "poweroff"}}
    return obj


CASES["e1000 nic"] = _e1000()

def _lun() -> dict[str, Any]:
    obj = vmi("x")
    obj["spec"]["domain"]["devices"]["disks"].append({"name": "lun", "lun": {}})
    obj["spec"]["volumes"].append({"name": "lun", "persistentVolumeClaim": {"claimName": "data"}})
    return obj


def _no_interfaces(networks: bool) -> dict[str, Any]:
    """No NIC at all (virt-api adds the pod network's, the cluster's default binding)."""
    obj = vmi("x")
    del obj["spec"]["domain"]["devices"]["interfaces"]
    if not networks:
        del obj["spec"]["networks"]
    return obj


def _volume_without_disk() -> dict[str, Any]:
    obj = vmi("x")
    obj["spec"]["volumes"].append({"name": "data", "containerDisk": {"image": "example.org/data:1"}})
    return obj


def _vm_disk_without_bus() -> dict[str, Any]:
    obj = vm("x")
    obj["spec"]["template"]["spec"]["domain"]["devices"]["disks"][0]["disk"] = {}
    return obj


def _machine() -> dict[str, Any]:
    obj = vmi("x")
    obj["spec"]["domain"]["machine"] = {"type": "pc-q35-rhel9.2.0"}
    return obj


def _vm_usb() -> dict[str, Any]:
    obj = vm("x")
    obj["spec"]["template"]["spec"]["domain"]["devices"]["hostDevices"] = [{"name": "s", "deviceName": USB_RESOURCE}]
    return obj


CASES["vm with a usb host device"] = _vm_usb()
CASES["lun"] = _lun()
CASES["volume without disk"] = _volume_without_disk()
CASES["no interfaces no networks"] = _no_interfaces(False)
CASES["vm disk without bus"] = _vm_disk_without_bus()
CASES["machine type"] = _machine()
CASES["watchdog"] = _watchdog()


def check_says(cluster, obj: dict[str, Any], tmp: pathlib.Path) -> list[str]:
    """`ch-admission check`'s causes and warnings, as kubectl would print them."""
    path, cr = tmp / "obj.yaml", tmp / "kubevirt.yaml"
    path.write_text(cluster.yaml(obj))
    cr.write_text(cluster.ok("get", "kubevirt", "kubevirt", "-n", "kubevirt", "-o", "yaml"))
    proc = subprocess.run([str(CHECK), "check", "--kubevirt-cr", str(cr), str(path)], capture_output=True, text=True,
                          timeout=60, check=False)
    said = []
    for line in proc.stdout.splitlines():
        m = re.fullmatch(r"  warning: (.*)", line)
        if m:
            said.append(f"Warning: {m.group(1)}")
            continue
        m = re.fullmatch(r"  (\S+): [A-Za-z]+: (.*)", line)
        if m:
            said.append(f"{m.group(1)}: {m.group(2)}")
    return sorted(said)


def server_says(cluster, obj: dict[str, Any]) -> list[str]:
    r = cluster.kubectl("create", "--dry-run=server", "-f", "-", input=cluster.yaml(obj))
    said = []
    for line in r.lines:
        if line.startswith("Warning: "):
            said.append(line)
        elif line.startswith("The request is invalid: ") and line != "The request is invalid: ":
            said.append(line.removeprefix("The request is invalid: "))
        elif line.startswith("* "):
            said.append(line[2:])
    return sorted(said)


@pytest.mark.parametrize("case", list(CASES))
def test_check_says_what_the_webhook_says_after_kubevirts_defaults(cluster, case, tmp_path):
    obj = CASES[case]
    assert check_says(cluster, obj, tmp_path) == server_says(cluster, obj)
