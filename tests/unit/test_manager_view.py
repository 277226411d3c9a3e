"""The Domain a translated VMI reads as: CPU topology, vCPU list and panic devices as
virt-launcher's converter writes them for the same VMI (kubevirt
`pkg/virt-launcher/virtwrap/converter/compute/cpu.go`, `panic_devices.go`@d923fdb815cd)."""

from __future__ import annotations

from typing import Any

import pytest

from ch_launcher.convert import LauncherEnv, translate
from ch_launcher.kubevirt.domain import GracePeriod, LifeCycle, Reason, domain_dict
from ch_launcher.kubevirt.vmi import parse_vmi
from ch_launcher.manager.view import domain_view
from tests.unit.convert.vmibuild import vmi as make_vmi


def spec(**domain: Any) -> dict[str, Any]:
    vmi = parse_vmi(make_vmi(domain))
    plan = translate(vmi, LauncherEnv())
    view = domain_view(vmi, plan, LifeCycle.RUNNING, Reason.UNKNOWN, grace=GracePeriod(), panic_count=0)
    return domain_dict(view)["Spec"]


def test_what_virt_api_defaults_reads_as_virt_launchers_hotplug_topology():
    # SetDefaultVirtualMachineInstance gives a LiveUpdate cluster's VMI maxSockets = 4 x sockets
    s = spec(cpu={"sockets": 1, "cores": 1, "threads": 1, "maxSockets": 4})
    assert s["CPU"]["Topology"] == {"Sockets": 4, "Cores": 1, "Threads": 1}
    assert s["VCPU"] == {"Placement": "static", "CPUs": 4}
    assert s["VCPUs"] == {"VCPU": [
        {"ID": 0, "Enabled": "yes", "Hotpluggable": "no", "Order": 1},
        {"ID": 1, "Enabled": "no", "Hotpluggable": "yes", "Order": 0},
        {"ID": 2, "Enabled": "no", "Hotpluggable": "yes", "Order": 0},
        {"ID": 3, "Enabled": "no", "Hotpluggable": "yes", "Order": 0},
    ]}


def test_the_vcpus_of_the_first_socket_cannot_be_unplugged():
    s = spec(cpu={"sockets": 2, "cores": 2, "threads": 1, "maxSockets": 3})
    assert s["CPU"]["Topology"] == {"Sockets": 3, "Cores": 2, "Threads": 1}
    assert s["VCPU"]["CPUs"] == 6
    assert [(v["ID"], v["Enabled"], v["Hotpluggable"], v["Order"]) for v in s["VCPUs"]["VCPU"]] == [
        (0, "yes", "no", 1), (1, "yes", "no", 2), (2, "yes", "yes", 3), (3, "yes", "yes", 4),
        (4, "no", "yes", 0), (5, "no", "yes", 0)]


@pytest.mark.parametrize("domain,topology,vcpus", [
    ({"cpu": {"sockets": 2, "cores": 1, "threads": 1}}, {"Sockets": 2, "Cores": 1, "Threads": 1}, 2),
    ({"resources": {"requests": {"cpu": "3"}}}, {"Sockets": 3, "Cores": 1, "Threads": 1}, 3),
    ({}, {"Sockets": 1, "Cores": 1, "Threads": 1}, 1),
])
def test_without_max_sockets_there_is_no_vcpu_list(domain, topology, vcpus):
    s = spec(**domain)
    assert s["CPU"]["Topology"] == topology and s["VCPU"]["CPUs"] == vcpus and s["VCPUs"] is None


@pytest.mark.parametrize("model", ["pvpanic", "isa", None])
def test_a_panic_device_is_listed_as_the_pvpanic_device_the_vm_has(model):
    device = {"model": model} if model else {}
    s = spec(devices={"panicDevices": [device]})
    assert s["Devices"]["PanicDevices"] == [{"Model": "pvpanic"}]
    assert spec()["Devices"]["PanicDevices"] is None


def test_an_efi_vm_shows_virt_launchers_loader_shape_for_firmware_without_nvram():
    # virt-launcher writes OS.BootLoader{Path, ReadOnly, Secure, Type} and no OS.Firmware for an
    # x86 EFI VMI; CH loads CLOUDHV.fd as its payload and keeps no EFI variables ("rom", no NVRam)
    s = spec(firmware={"bootloader": {"efi": {"secureBoot": False}}})
    assert s["OS"]["Firmware"] == "" and s["OS"]["NVRam"] is None
    loader = s["OS"]["BootLoader"]
    assert (loader["ReadOnly"], loader["Secure"], loader["Type"]) == ("yes", "no", "rom")
    assert loader["Path"].endswith("/CLOUDHV.fd")
    assert spec()["OS"]["BootLoader"] is None  # BIOS: no loader element, as libvirt's SeaBIOS default
