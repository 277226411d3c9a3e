"""The `api.Domain` view of a VM, as virt-handler decodes it (contract.md §10, §11).

virt-handler decodes the launcher's Domain JSON with Go's `encoding/json` into
`api.Domain` (kubevirt `pkg/virt-launcher/virtwrap/api/schema.go@d923fdb815cd`). That type has
no `json` tags below the top level, so keys are Go field names (`Spec`, `Devices`, `MAC`,
`Alias`), except `ObjectMeta`, which is an ordinary Kubernetes ObjectMeta (`name`, `namespace`,
`uid`, `creationTimestamp`, `deletionTimestamp`). We emit every key Go itself would emit for the
parts we know (the key sets of `reference/data/domain-examples/`), so a reader cannot tell our
JSON from the Go launcher's.

Rules enforced here, because breaking them crashes or misleads virt-handler (§10.3, §11):
- every interface has a non-nil `Alias` and `MAC` (virt-handler dereferences both; a nil is a
  panic that restarts virt-handler);
- every disk with a `Source.File`/`Source.Dev` has a non-nil `Alias`;
- `Status.Status` is never `"Unknown"` (virt-handler reserves it for unreachable launchers);
- `Spec.Metadata.KubeVirt.UID` is the VMI's uid and `GracePeriod` is present on every live Domain.

`domain_json()` raises `ValueError` naming the offending device when a view would break one
of them; that is a bug in the caller, never something to send.

The device descriptions (`DomainDisk`, `DomainInterface`) come from the translator.

The view itself (`DomainView`, `LifeCycle`, `Reason`, the device descriptions) is
`kubevirt.domain_view`; every name of it is re-exported here.
"""

from __future__ import annotations

import json
from typing import Any

from ch_launcher.kubevirt.domain_view import (  # re-exported
    AGENT_CHANNEL,
    HOST_ARCH,
    AccessCredentialResult,
    DomainDisk,
    DomainHostDevice,
    DomainInterface,
    DomainView,
    GracePeriod,
    GuestAgentView,
    GuestPanicInfo,
    LifeCycle,
    Reason,
    VcpuSlot,
    deleted_domain_view,
    now_rfc3339,
    rfc3339,
)

__all__ = [  # the view's names and the encoders
    "LifeCycle", "Reason", "rfc3339", "now_rfc3339", "GracePeriod", "GuestPanicInfo", "VcpuSlot",
    "DomainDisk", "DomainInterface", "DomainHostDevice", "HOST_ARCH", "DomainView", "AGENT_CHANNEL",
    "AccessCredentialResult", "GuestAgentView",
    "deleted_domain_view", "domain_dict", "domain_json",
]


# --- encoding --------------------------------------------------------------------------------
# Builders below emit keys in Go's struct field order, with `null` for nil pointers/slices,
# exactly the key sets of reference/data/domain-examples/.


def _xml_name(local: str) -> dict[str, str]:
    return {"Space": "", "Local": local}


def _alias(name: str) -> dict[str, Any]:
    # KubeVirt's custom Alias JSON: user-defined aliases carry no `ua-` prefix in JSON.
    return {"Name": name, "UserDefined": True}


def _memory(value: int) -> dict[str, Any]:
    return {"Value": value, "Unit": "b"}


def _disk(d: DomainDisk, index: int) -> dict[str, Any]:
    if (d.source_file or d.source_dev) and not d.alias:
        raise ValueError(f"Domain disk {index} ({d.target_dev or '?'}) has a source but no alias: "
                         "virt-handler dereferences Alias for such disks")
    if d.source_file and d.source_dev:
        raise ValueError(f"Domain disk {d.alias!r} has both a file and a device source")
    return {
        "Device": d.device,
        "Snapshot": "",
        "Type": "block" if d.source_dev else "file",
        "Source": {
            "Dev": d.source_dev,
            "File": d.source_file,
            "StartupPolicy": "",
            "Protocol": "",
            "Name": "",
            "Host": None,
            "Reservations": None,
            "Slices": None,
            "DataStore": None,
        },
        "Target": {"Bus": d.bus, "Device": d.target_dev, "Tray": ""},
        "Serial": d.serial,
        "Driver": {
            "Cache": "",
            "ErrorPolicy": "stop",
            "IO": "",
            "Name": "qemu",  # libvirt's driver name; virt-handler does not read it
            "Type": d.image_type,
            "IOThread": None,
            "IOThreads": None,
            "Queues": None,
            "Discard": "unmap",
            "IOMMU": "",
        },
        "ReadOnly": {} if d.readonly else None,
        "Auth": None,
        "Alias": _alias(d.alias) if d.alias else None,
        "BackingStore": None,
        "BootOrder": {"Order": d.boot_order} if d.boot_order is not None else None,
        "Address": None,
        "Model": "",
        "BlockIO": None,
        "FilesystemOverhead": None,
        "Capacity": None,
        "Shareable": None,
    }


def _interface(i: DomainInterface, index: int) -> dict[str, Any]:
    if not i.alias or not i.mac:
        raise ValueError(f"Domain interface {index} ({i.alias or '?'}) needs both an alias and a "
                         "MAC: virt-handler dereferences both")
    return {
        "XMLName": _xml_name("interface"),
        "Address": None,
        "Type": i.type,
        "TrustGuestRxFilters": "",
        "Source": {"Network": "", "Device": "", "Bridge": "", "Mode": "", "Address": None},
        # libvirt's <target dev=tap managed='no'/>, as KubeVirt writes it for a pre-made tap.
        "Target": {"Device": i.tap, "Managed": "no"} if i.tap else None,
        "Model": {"Type": i.model},
        "MAC": {"MAC": i.mac},
        "MTU": {"Size": str(i.mtu)} if i.mtu else None,
        "BandWidth": None,
        "BootOrder": {"Order": i.boot_order} if i.boot_order is not None else None,
        "LinkState": {"State": i.link_state} if i.link_state else None,
        "FilterRef": None,
        "Alias": _alias(i.alias),
        "Driver": {"Name": "vhost", "Queues": i.queues, "IOMMU": ""} if i.queues else None,
        "Rom": {"Enabled": "no"},
        "ACPI": None,
        "Backend": None,
        "PortForward": None,
    }


def _address(**fields: str) -> dict[str, str]:
    keys = ("Type", "Domain", "Bus", "Slot", "Function", "Controller", "Target", "Unit", "UUID", "Device",
            "CSSID", "SSID", "DevNo")
    return {k: fields.get(k, "") for k in keys}


def _host_device(h: DomainHostDevice) -> dict[str, Any]:
    if h.mdev_uuid:
        source, kind, mode, model, managed = _address(UUID=h.mdev_uuid), "mdev", "subsystem", "vfio-pci", ""
    else:
        domain, bus, rest = h.pci_address.split(":")
        slot, function = rest.split(".")
        source = _address(Type="pci", Domain=f"0x{domain}", Bus=f"0x{bus}", Slot=f"0x{slot}", Function=f"0x{function}")
        kind, mode, model, managed = "pci", "", "", "no"
    return {
        "XMLName": _xml_name("hostdev"),
        "Source": {"Address": source},
        "Type": kind,
        "BootOrder": None,
        "Managed": managed,
        "Mode": mode,
        "Model": model,
        "Address": None,
        "Alias": _alias(h.alias),
        "Display": "",
        "RamFB": "",
        "Driver": None,
        "ACPI": None,
    }


def _channels(agent: GuestAgentView | None) -> list[dict[str, Any]] | None:
    # virt-launcher's guest agent channel (converter/compute/channels.go), with the state libvirt
    # reports in the live XML, the shape of reference/data/domain-examples/domain-example-running.json.
    if agent is None:
        return None
    state = "connected" if agent.connected else "disconnected"
    return [{"Type": "unix", "Source": None,
             "Target": {"Name": AGENT_CHANNEL, "Type": "virtio", "Address": "", "Port": 0, "State": state}}]


def _devices(view: DomainView) -> dict[str, Any]:
    interfaces = [_interface(i, n) for n, i in enumerate(view.interfaces)]
    host_devices = [_host_device(h) for h in view.host_devices]
    disks = [_disk(d, n) for n, d in enumerate(view.disks)]
    return {
        "Emulator": "",
        "Interfaces": interfaces or None,
        "Channels": _channels(view.agent),  # the guest agent's, reached over vsock
        "HostDevices": host_devices or None,
        "PanicDevices": [{"Model": m} for m in view.panic_models] or None,
        "Controllers": None,
        "Video": None,
        "Graphics": None,
        "Ballooning": None,
        "Disks": disks or None,
        "Inputs": None,
        "Serials": None,
        "Consoles": None,
        "Watchdogs": None,
        "Rng": None,
        "Filesystems": None,
        "Redirs": None,
        "SoundCards": None,
        "TPMs": None,
        "VSOCK": None,
        "Memory": None,
        "IOMMU": None,
    }


def _features(view: DomainView) -> dict[str, Any] | None:
    if not view.defined:
        return None
    return {
        # Presence of ACPI makes a Destroyed domain count as Failed (vm.go isACPIEnabled).
        "ACPI": {} if view.acpi else None,
        "APIC": {},
        "Hyperv": None,
        "SMM": None,
        "KVM": None,
        "PVSpinlock": None,
        "PMU": None,
        "VMPort": None,
    }


def _vcpus(slots: tuple[VcpuSlot, ...]) -> dict[str, Any] | None:
    if not slots:
        return None
    return {"VCPU": [{"ID": v.id, "Enabled": "yes" if v.enabled else "no",
                      "Hotpluggable": "yes" if v.hotpluggable else "no", "Order": v.order} for v in slots]}


def _panic_info(info: GuestPanicInfo | None) -> dict[str, Any] | None:
    if info is None:
        return None
    a1, a2, a3, a4, a5 = info.args
    return {"Type": info.type, "Arg1": a1, "Arg2": a2, "Arg3": a3, "Arg4": a4, "Arg5": a5}


def _grace(g: GracePeriod | None) -> dict[str, Any] | None:
    if g is None:
        return None
    return {
        "DeletionGracePeriodSeconds": int(g.deletion_grace_period_seconds),
        "DeletionTimestamp": rfc3339(g.deletion_timestamp) if g.deletion_timestamp else None,
        "MarkedForGracefulShutdown": g.marked_for_graceful_shutdown,
    }


def _access_credential(agent: GuestAgentView | None) -> dict[str, Any] | None:
    result = agent.access_credential if agent is not None else None
    return None if result is None else {"Succeeded": result.succeeded, "Message": result.message}


def _spec(view: DomainView) -> dict[str, Any]:
    defined = view.defined
    current = view.memory_bytes if view.current_memory_bytes is None else view.current_memory_bytes
    return {
        "XMLName": _xml_name("domain" if defined else ""),
        "Type": "kvm" if defined else "",
        "XmlNS": "",
        "Name": view.domain_name if defined else "",
        "UUID": view.uuid if defined else "",
        "Memory": _memory(view.memory_bytes) if defined else {"Value": 0, "Unit": ""},
        "CurrentMemory": _memory(current) if defined else None,
        "MaxMemory": None,
        "MemoryBacking": None,
        "OS": {
            "Firmware": view.firmware,
            "FirmwareInfo": None,
            "Type": {"OS": "hvm" if defined else "", "Arch": view.arch if defined else "",
                     "Machine": view.machine if defined else ""},
            "ACPI": None,
            "SMBios": None,
            "BootOrder": None,
            "BootMenu": None,
            "BIOS": None,
            # virt-launcher's EFI loader shape (converter/compute/os.go configureEFI); Cloud
            # Hypervisor loads CLOUDHV.fd as its firmware payload and keeps no EFI variables, as
            # libvirt's stateless "rom" loader (which KubeVirt uses for SEV-SNP and TDX).
            "BootLoader": ({"ReadOnly": "yes", "Secure": "no", "Type": "rom", "Path": view.loader}
                           if view.loader else None),
            "NVRam": None,
            "Kernel": view.kernel,
            "Initrd": view.initrd,
            "KernelArgs": view.kernel_args,
        },
        "SysInfo": None,
        "Devices": _devices(view),
        "Clock": None,
        "Resource": None,
        "QEMUCmd": None,
        "Metadata": {
            "KubeVirt": {
                "UID": view.uid,
                "GracePeriod": _grace(view.grace),
                "Migration": view.migration.to_dict() if view.migration is not None else None,
                "Backup": None,
                "AccessCredential": _access_credential(view.agent),
                "MemoryDump": None,
            }
        },
        "Features": _features(view),
        "CPU": {
            "Mode": view.cpu_mode if defined else "",
            "Model": "",
            "Features": None,
            "Topology": ({"Sockets": view.sockets, "Cores": view.cores, "Threads": view.threads}
                         if defined else None),
            "NUMA": None,
        },
        "VCPU": {"Placement": "static", "CPUs": view.vcpus} if defined else None,
        "VCPUs": _vcpus(view.vcpu_slots) if defined else None,
        "CPUTune": None,
        "NUMATune": None,
        "IOThreads": None,
        "LaunchSecurity": None,
        "OnReboot": "",
        "IOMMUFD": None,
    }


_EMPTY_OS_INFO = {"Name": "", "KernelRelease": "", "Version": "", "PrettyName": "",
                  "VersionId": "", "KernelVersion": "", "Machine": "", "Id": ""}


def domain_dict(view: DomainView) -> dict[str, Any]:
    """The Domain as a JSON-ready dict (see `domain_json`). Raises ValueError on a view that
    breaks virt-handler's nil-safety rules or names no VMI."""
    if not view.name or not view.namespace or not view.uid:
        raise ValueError("a Domain needs the VMI's name, namespace and uid "
                         f"(got {view.name!r}, {view.namespace!r}, {view.uid!r})")
    if view.defined and view.grace is None:
        raise ValueError("a live Domain carries GracePeriod metadata (contract §6)")
    meta: dict[str, Any] = {
        "name": view.name,
        "namespace": view.namespace,
        "uid": view.uid,
        "creationTimestamp": None,
    }
    if view.deletion_timestamp:
        meta["deletionTimestamp"] = rfc3339(view.deletion_timestamp)
    agent = view.agent
    os_info = agent.os_info if agent is not None else None
    interfaces = agent.interfaces if agent is not None else None
    return {
        "kind": "Domain",
        "apiVersion": "1.2.2",
        "ObjectMeta": meta,
        "Spec": _spec(view),
        "Status": {
            "Status": view.status.value,
            "Reason": view.reason.value,
            "Interfaces": [i.to_domain() for i in interfaces] if interfaces else None,  # from the guest agent
            "OSInfo": os_info.to_domain() if os_info is not None else dict(_EMPTY_OS_INFO),
            "FSFreezeStatus": {"Status": agent.fs_freeze_status if agent is not None else ""},
            "GuestPanicInfo": _panic_info(view.panic_info),
            "PanicCount": view.panic_count,
        },
    }


def domain_json(view: DomainView) -> str:
    """The `api.Domain` JSON virt-handler decodes (compact, as Go's json.Marshal writes it).

    Raises ValueError when the view would crash or mislead virt-handler (see module doc)."""
    return json.dumps(domain_dict(view), separators=(",", ":"))
