"""VMIs for the tests, built the way KubeVirt's libvmi builds them: `new_vmi(name, *options)`.

`new_vmi` returns a plain dict in KubeVirt's JSON names (what the API server hands out): apiVersion,
kind, metadata with the name and namespace "default", and `spec.domain.devices` empty. Each option
is a function that edits that dict; options run in order, so a later one wins where two set the
same field. An option adds what it names and nothing else (no default disk, memory or NIC comes
with it), and the VMI holds copies of what an option was given. A test that needs a shape no
option makes edits the returned dict.

Presets built from these options live beside the tests that share them. `harness.make_vmi` (the
launcher's stories), `migration_handler.migratable_vmi` and `tests/unit/admission/builders.vmi`
(the webhooks) take further options, as libvmifact's presets do; the translator's
`tests/unit/convert/vmibuild.py` and `netbuild.py` keep their keyword forms.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from admission.selection import ANNOTATION, VALUE

VMI = dict[str, Any]
Option = Callable[[VMI], None]

CLOUD_CONFIG = "#cloud-config\n"


def new_vmi(name: str = "testvmi", *options: Option) -> VMI:
    """A VMI named `name` in namespace "default" with no devices, then `options` applied in order."""
    vmi: VMI = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"domain": {"devices": {}}}}
    return apply(vmi, *options)


def apply(vmi: VMI, *options: Option) -> VMI:
    """`options` applied to `vmi` in place, in order; returns `vmi`."""
    for option in options:
        option(vmi)
    return vmi


def _domain(vmi: VMI) -> dict[str, Any]:
    domain: dict[str, Any] = vmi["spec"].setdefault("domain", {})
    return domain


def _devices(vmi: VMI) -> dict[str, Any]:
    devices: dict[str, Any] = _domain(vmi).setdefault("devices", {})
    return devices


# metadata

def with_namespace(namespace: str | None) -> Option:
    """The VMI's namespace; None leaves the field out (an object as a client wrote it)."""
    def option(vmi: VMI) -> None:
        if namespace is None:
            vmi["metadata"].pop("namespace", None)
        else:
            vmi["metadata"]["namespace"] = namespace
    return option


def with_uid(uid: str) -> Option:
    def option(vmi: VMI) -> None:
        vmi["metadata"]["uid"] = uid
    return option


def with_resource_version(version: str) -> Option:
    def option(vmi: VMI) -> None:
        vmi["metadata"]["resourceVersion"] = version
    return option


def with_annotations(annotations: Mapping[str, str] | None) -> Option:
    """Adds `annotations` to the VMI's; an empty mapping still writes the field, None does not."""
    def option(vmi: VMI) -> None:
        if annotations is not None:
            vmi["metadata"].setdefault("annotations", {}).update(annotations)
    return option


def with_annotation(key: str, value: str) -> Option:
    return with_annotations({key: value})


def with_hypervisor(value: str = VALUE) -> Option:
    """The annotation that hands the VMI to Cloud Hypervisor (admission.selection)."""
    return with_annotation(ANNOTATION, value)


def with_labels(labels: Mapping[str, str] | None) -> Option:
    """Adds `labels` to the VMI's; an empty mapping still writes the field, None does not."""
    def option(vmi: VMI) -> None:
        if labels is not None:
            vmi["metadata"].setdefault("labels", {}).update(labels)
    return option


def with_label(key: str, value: str) -> Option:
    return with_labels({key: value})


# spec

def with_spec(**fields: Any) -> Option:
    """Sets top-level spec fields (networks, evictionStrategy, ...), replacing what was there."""
    def option(vmi: VMI) -> None:
        vmi["spec"].update(copy.deepcopy(fields))
    return option


def with_grace_period(seconds: int) -> Option:
    return with_spec(terminationGracePeriodSeconds=seconds)


def with_domain(**fields: Any) -> Option:
    """Sets `spec.domain` fields (cpu, features, clock, ...), each replacing what was there."""
    def option(vmi: VMI) -> None:
        _domain(vmi).update(copy.deepcopy(fields))
    return option


def with_devices(**fields: Any) -> Option:
    """Sets `spec.domain.devices` fields (tpm, gpus, autoattach*, ...), each replacing what was there."""
    def option(vmi: VMI) -> None:
        _devices(vmi).update(copy.deepcopy(fields))
    return option


def with_cpu(**cpu: Any) -> Option:
    """`spec.domain.cpu` as given (cores, sockets, dedicatedCpuPlacement, ...), replacing it."""
    return with_domain(cpu=dict(cpu))


def with_memory(guest: str, **memory: Any) -> Option:
    """`spec.domain.memory`: the guest's size and further memory fields (maxGuest, hugepages, ...)."""
    return with_domain(memory={"guest": guest, **memory})


def with_memory_request(memory: str) -> Option:
    """`spec.domain.resources.requests.memory`, beside any other request."""
    def option(vmi: VMI) -> None:
        _domain(vmi).setdefault("resources", {}).setdefault("requests", {})["memory"] = memory
    return option


def with_firmware_uuid(uuid: str) -> Option:
    def option(vmi: VMI) -> None:
        _domain(vmi).setdefault("firmware", {})["uuid"] = uuid
    return option


# storage

def with_volume(volume: Mapping[str, Any]) -> Option:
    """Appends a volume and no disk for it."""
    def option(vmi: VMI) -> None:
        vmi["spec"].setdefault("volumes", []).append(copy.deepcopy(dict(volume)))
    return option


def with_disk(name: str, source: Mapping[str, Any], *, bus: str = "virtio", **disk: Any) -> Option:
    """Appends a disk on `bus` (further disk fields such as bootOrder beside it) and its volume,
    `source` being the volume's source (`{"containerDisk": {...}}`, ...)."""
    def option(vmi: VMI) -> None:
        _devices(vmi).setdefault("disks", []).append({"name": name, "disk": {"bus": bus}, **copy.deepcopy(disk)})
        with_volume({"name": name, **source})(vmi)
    return option


def with_container_disk(image: str, name: str = "containerdisk", **disk: Any) -> Option:
    return with_disk(name, {"containerDisk": {"image": image}}, **disk)


def with_empty_disk(name: str, capacity: str, **disk: Any) -> Option:
    return with_disk(name, {"emptyDisk": {"capacity": capacity}}, **disk)


def with_cloud_init(user_data: str = CLOUD_CONFIG, name: str = "cloudinitdisk", **disk: Any) -> Option:
    """A cloudInitNoCloud disk with `user_data`."""
    return with_disk(name, {"cloudInitNoCloud": {"userData": user_data}}, **disk)


def with_pvc(name: str, claim: str, **disk: Any) -> Option:
    return with_disk(name, {"persistentVolumeClaim": {"claimName": claim}}, **disk)


def with_cdrom(name: str, image: str, bus: str = "sata") -> Option:
    """A CD-ROM backed by a containerDisk image."""
    def option(vmi: VMI) -> None:
        _devices(vmi).setdefault("disks", []).append({"name": name, "cdrom": {"bus": bus}})
        with_volume({"name": name, "containerDisk": {"image": image}})(vmi)
    return option


# network

def with_interface(interface: Mapping[str, Any]) -> Option:
    """Appends an interface to `spec.domain.devices.interfaces`."""
    def option(vmi: VMI) -> None:
        _devices(vmi).setdefault("interfaces", []).append(copy.deepcopy(dict(interface)))
    return option


def with_network(network: Mapping[str, Any]) -> Option:
    """Appends a network to `spec.networks`."""
    def option(vmi: VMI) -> None:
        vmi["spec"].setdefault("networks", []).append(copy.deepcopy(dict(network)))
    return option


def with_interfaces(interfaces: Iterable[Mapping[str, Any]]) -> Option:
    """`spec.domain.devices.interfaces` exactly these (an empty list included), replacing it."""
    def option(vmi: VMI) -> None:
        _devices(vmi)["interfaces"] = copy.deepcopy([dict(i) for i in interfaces])
    return option


def with_networks(networks: Iterable[Mapping[str, Any]]) -> Option:
    """`spec.networks` exactly these (an empty list included), replacing it."""
    def option(vmi: VMI) -> None:
        vmi["spec"]["networks"] = copy.deepcopy([dict(n) for n in networks])
    return option


def with_masquerade(name: str = "default", **interface: Any) -> Option:
    """An interface with the masquerade binding on the pod network (libvmi's
    InterfaceDeviceWithMasqueradeBinding and DefaultPodNetwork)."""
    def option(vmi: VMI) -> None:
        with_interface({"name": name, "masquerade": {}, **interface})(vmi)
        with_network({"name": name, "pod": {}})(vmi)
    return option


# status

def with_status(**fields: Any) -> Option:
    """Sets `status` fields (nodeName, volumeStatus, interfaces, ...), each replacing what was there."""
    def option(vmi: VMI) -> None:
        vmi.setdefault("status", {}).update(copy.deepcopy(fields))
    return option


def with_phase(phase: str) -> Option:
    return with_status(phase=phase)
