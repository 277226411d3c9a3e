"""The api.Domain JSON: golden files of reference/data/domain-examples/ and virt-handler's decoder.

virt-handler decodes with Go's encoding/json: keys match struct fields case-insensitively,
unknown keys are ignored, missing keys are zero values, and `Alias`/`MAC` are dereferenced
without nil checks (contract §10.3). The tests below build the same Domains the golden files
describe, compare them key for key, and decode our output the way Go would.
"""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ch_launcher.kubevirt.domain import (
    AccessCredentialResult,
    DomainDisk,
    DomainInterface,
    DomainView,
    GracePeriod,
    GuestAgentView,
    GuestPanicInfo,
    LifeCycle,
    Reason,
    VcpuSlot,
    deleted_domain_view,
    domain_dict,
    domain_json,
    rfc3339,
)
from ch_launcher.kubevirt.guest_info import GuestInterface, GuestOSInfo
from tests.conftest import DOMAIN_EXAMPLES, require_shared

# Values of the golden files (illustrative, but we rebuild them exactly to compare structure).
NAME, NAMESPACE, UID = "testvmi", "mynamespace", "e4686d2c-6e8d-4335-b8fd-81bee22f4814"
UUID = "5b4c5a9e-1f0c-5d7e-9b1a-2f5e3c1d0a11"
DISK = DomainDisk(alias="myvolume", target_dev="vda",
                  source_file="/var/run/kubevirt-private/vmi-disks/myvolume/disk.img")
NIC = DomainInterface(alias="default", mac="02:55:43:00:00:01")

# What the golden files' guest agent told (a Fedora 40 guest), as the launcher hears it over vsock.
FEDORA = GuestOSInfo(name="Fedora Linux", kernel_release="6.8.5-301.fc40.x86_64", version="40 (Cloud Edition)",
                     pretty_name="Fedora Linux 40 (Cloud Edition)", version_id="40",
                     kernel_version="#1 SMP PREEMPT_DYNAMIC", machine="x86_64", id="fedora")
ETH0 = GuestInterface(name="eth0", mac="02:55:43:00:00:01", ip="10.0.2.2", ips=("10.0.2.2", "fd10:0:2::2"))
AGENT = GuestAgentView(connected=True, os_info=FEDORA, interfaces=(ETH0,))


def golden(name: str) -> dict[str, Any]:
    return json.loads((require_shared(DOMAIN_EXAMPLES) / name).read_text())


def example_view(status: LifeCycle, reason: Reason, **changes: Any) -> DomainView:
    base: dict[str, Any] = {
        "name": NAME, "namespace": NAMESPACE, "uid": UID, "status": status, "reason": reason,
        "grace": GracePeriod(30), "memory_bytes": 8388608, "disks": (DISK,), "interfaces": (NIC,),
        "uuid": UUID, "machine": "q35", "arch": "x86_64", "cpu_mode": "host-model", "agent": AGENT,
    }
    base.update(changes)
    return DomainView(**base)


EXAMPLES = {
    "domain-example-running.json": lambda: example_view(LifeCycle.RUNNING, Reason.UNKNOWN),
    "domain-example-paused-user.json": lambda: example_view(LifeCycle.PAUSED, Reason.USER),
    "domain-example-marked-graceful-shutdown.json": lambda: example_view(
        LifeCycle.RUNNING, Reason.UNKNOWN, grace=GracePeriod(30, None, True)),
    "domain-example-shutoff-shutdown.json": lambda: example_view(  # the agent's NICs are gone with the guest
        LifeCycle.SHUTOFF, Reason.SHUTDOWN, agent=GuestAgentView(connected=True, os_info=FEDORA)),
    "domain-example-deleted.json": lambda: deleted_domain_view(
        NAME, NAMESPACE, UID, datetime(2026, 8, 22, 10, 0, 0, tzinfo=UTC)),
}


def key_mismatches(ours: Any, theirs: Any, path: str = "") -> list[str]:
    """Where both sides are objects, their key sets must be equal; recurse into lists pairwise."""
    out: list[str] = []
    if isinstance(ours, dict) and isinstance(theirs, dict):
        if set(ours) != set(theirs):
            out.append(f"{path or '<root>'}: extra {sorted(set(ours) - set(theirs))}, "
                       f"missing {sorted(set(theirs) - set(ours))}")
        for k in set(ours) & set(theirs):
            out += key_mismatches(ours[k], theirs[k], f"{path}.{k}")
    elif isinstance(ours, list) and isinstance(theirs, list):
        for n, (a, b) in enumerate(zip(ours, theirs, strict=False)):
            out += key_mismatches(a, b, f"{path}[{n}]")
    return out


def without(doc: dict[str, Any], paths: set[tuple[str, ...]]) -> dict[str, Any]:
    doc = json.loads(json.dumps(doc))
    for p in paths:
        node = doc
        for k in p[:-1]:
            node = node[k]
        node.pop(p[-1], None)
    return doc


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_domain_has_exactly_the_golden_key_sets(example: str) -> None:
    ours = json.loads(domain_json(EXAMPLES[example]()))
    assert key_mismatches(ours, golden(example)) == []


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_domain_equals_the_golden_file_with_what_the_guest_agent_told(example: str) -> None:
    assert json.loads(domain_json(EXAMPLES[example]())) == golden(example)


def test_the_agent_channel_shows_disconnected_until_the_agent_is_reached_and_a_vm_without_one_has_none() -> None:
    waiting = json.loads(domain_json(example_view(LifeCycle.RUNNING, Reason.UNKNOWN, agent=GuestAgentView())))
    assert waiting["Spec"]["Devices"]["Channels"] == [{"Type": "unix", "Source": None, "Target": {
        "Name": "org.qemu.guest_agent.0", "Type": "virtio", "Address": "", "Port": 0, "State": "disconnected"}}]
    assert waiting["Status"]["OSInfo"] == golden("domain-example-deleted.json")["Status"]["OSInfo"]  # all empty
    assert waiting["Status"]["Interfaces"] is None and waiting["Status"]["FSFreezeStatus"] == {"Status": ""}
    none = json.loads(domain_json(example_view(LifeCycle.RUNNING, Reason.UNKNOWN, agent=None)))
    assert none["Spec"]["Devices"]["Channels"] is None


def test_the_freeze_status_and_the_access_credentials_result_show_as_virt_launcher_shows_them() -> None:
    agent = GuestAgentView(connected=True, fs_freeze_status="frozen",
                           access_credential=AccessCredentialResult(False, "Guest agent is offline"))
    doc = json.loads(domain_json(example_view(LifeCycle.RUNNING, Reason.UNKNOWN, agent=agent)))
    assert doc["Status"]["FSFreezeStatus"] == {"Status": "frozen"}
    assert doc["Spec"]["Metadata"]["KubeVirt"]["AccessCredential"] == {"Succeeded": False,
                                                                        "Message": "Guest agent is offline"}


def test_every_golden_file_is_covered_by_a_test() -> None:
    files = {p.name for p in require_shared(DOMAIN_EXAMPLES).glob("domain-example-*.json")}
    assert files == set(EXAMPLES)


def test_domain_carries_every_key_of_the_zero_skeleton() -> None:
    """Where the zero Domain has an object, ours has the same keys (ObjectMeta's omitempty aside)."""
    skeleton = golden("domain-zero-skeleton.json")
    ours = json.loads(domain_json(example_view(LifeCycle.RUNNING, Reason.UNKNOWN)))

    def missing(a: Any, b: Any, path: str) -> list[str]:
        if not (isinstance(a, dict) and isinstance(b, dict)):
            return []
        out = [f"{path}.{k}" for k in b if k not in a]
        return out + [m for k in b if k in a for m in missing(a[k], b[k], f"{path}.{k}")]

    assert missing(ours, skeleton, "") == []


def test_no_domain_has_status_unknown() -> None:
    with pytest.raises(ValueError, match="never status 'Unknown'"):
        DomainView(NAME, NAMESPACE, UID, "Unknown", Reason.UNKNOWN)  # type: ignore[arg-type]


def test_enums_hold_kubevirts_exact_strings() -> None:
    assert [s.value for s in LifeCycle] == ["NoState", "Running", "Blocked", "Paused", "ShuttingDown",
                                            "Shutoff", "Crashed", "PMSuspended"]
    assert LifeCycle.SHUTDOWN is LifeCycle.SHUTTING_DOWN  # Go's constant `Shutdown` = "ShuttingDown"
    assert {r.value for r in Reason} == {
        "Unknown", "User", "Shutdown", "Destroyed", "Migrated", "Crashed", "Panicked", "Saved", "Failed",
        "FromSnapshot", "NonExistent", "Migration", "Save", "Dump", "IOError", "Watchdog",
        "ShuttingDown", "Snapshot", "StartingUp", "Postcopy", "PostcopyFailed"}


def test_interface_without_mac_is_refused_before_it_reaches_virt_handler() -> None:
    view = example_view(LifeCycle.RUNNING, Reason.UNKNOWN, interfaces=(DomainInterface("default", ""),))
    with pytest.raises(ValueError, match=r"interface 0 .*MAC"):
        domain_json(view)


def test_interface_without_alias_is_refused() -> None:
    view = example_view(LifeCycle.RUNNING, Reason.UNKNOWN,
                        interfaces=(DomainInterface("", "02:00:00:00:00:01"),))
    with pytest.raises(ValueError, match="alias"):
        domain_json(view)


def test_disk_with_a_source_but_no_alias_is_refused() -> None:
    view = example_view(LifeCycle.RUNNING, Reason.UNKNOWN, disks=(DomainDisk("", "vdb", source_dev="/dev/x"),))
    with pytest.raises(ValueError, match=r"disk 0 \(vdb\).*alias"):
        domain_json(view)


def test_live_domain_without_grace_metadata_is_refused() -> None:
    with pytest.raises(ValueError, match="GracePeriod"):
        domain_json(example_view(LifeCycle.RUNNING, Reason.UNKNOWN, grace=None))


def test_domain_without_the_vmi_identity_is_refused() -> None:
    with pytest.raises(ValueError, match="name, namespace and uid"):
        domain_json(example_view(LifeCycle.RUNNING, Reason.UNKNOWN, uid=""))


def test_spec_name_is_namespace_underscore_name_and_object_meta_is_the_vmis() -> None:
    d = domain_dict(example_view(LifeCycle.RUNNING, Reason.UNKNOWN))
    assert d["Spec"]["Name"] == "mynamespace_testvmi"
    assert (d["ObjectMeta"]["name"], d["ObjectMeta"]["namespace"], d["ObjectMeta"]["uid"]) == (NAME, NAMESPACE, UID)
    assert d["Spec"]["Metadata"]["KubeVirt"]["UID"] == UID


def test_acpi_feature_is_present_only_when_the_guest_has_acpi() -> None:
    assert domain_dict(example_view(LifeCycle.RUNNING, Reason.UNKNOWN))["Spec"]["Features"]["ACPI"] == {}
    no_acpi = domain_dict(example_view(LifeCycle.RUNNING, Reason.UNKNOWN, acpi=False))
    assert no_acpi["Spec"]["Features"]["ACPI"] is None


def test_grace_deletion_timestamp_is_rfc3339_utc_seconds() -> None:
    when = datetime(2026, 8, 22, 12, 0, 1, 999999, tzinfo=timezone(timedelta(hours=2)))
    view = example_view(LifeCycle.RUNNING, Reason.UNKNOWN, grace=GracePeriod(45, rfc3339(when), True))
    g = domain_dict(view)["Spec"]["Metadata"]["KubeVirt"]["GracePeriod"]
    assert g == {"DeletionGracePeriodSeconds": 45, "DeletionTimestamp": "2026-08-22T10:00:01Z",
                 "MarkedForGracefulShutdown": True}


def test_rfc3339_rejects_garbage_with_a_clear_error() -> None:
    with pytest.raises(ValueError, match="not an RFC 3339 time"):
        rfc3339("yesterday")
    with pytest.raises(ValueError, match="without a zone"):
        rfc3339("2026-08-22T10:00:00")


def test_deleted_domain_is_nostate_nonexistent_with_deletion_timestamp() -> None:
    d = domain_dict(deleted_domain_view(NAME, NAMESPACE, UID, "2026-08-22T10:00:00Z"))
    assert (d["Status"]["Status"], d["Status"]["Reason"]) == ("NoState", "NonExistent")
    assert d["ObjectMeta"]["deletionTimestamp"] == "2026-08-22T10:00:00Z"
    assert d["Spec"]["Metadata"]["KubeVirt"]["UID"] == UID


def test_device_details_reach_the_json() -> None:
    nic = DomainInterface("net1", "02:00:00:00:00:02", tap="tap1", mtu=9000, queues=4, boot_order=2,
                          link_state="down")
    disk = DomainDisk("blk", "vdb", source_dev="/dev/sdb", readonly=True, serial="S1", boot_order=1,
                      image_type="raw")
    d = domain_dict(example_view(LifeCycle.RUNNING, Reason.UNKNOWN, interfaces=(nic,), disks=(disk,),
                                 sockets=2, cores=2, threads=1, vcpus=4, current_memory_bytes=4096))
    i = d["Spec"]["Devices"]["Interfaces"][0]
    assert i["Target"] == {"Device": "tap1", "Managed": "no"}
    assert i["MTU"] == {"Size": "9000"} and i["Driver"]["Queues"] == 4
    assert i["BootOrder"] == {"Order": 2} and i["LinkState"] == {"State": "down"}
    k = d["Spec"]["Devices"]["Disks"][0]
    assert k["Type"] == "block" and k["Source"]["Dev"] == "/dev/sdb" and k["ReadOnly"] == {}
    assert k["BootOrder"] == {"Order": 1} and k["Serial"] == "S1" and k["Alias"]["Name"] == "blk"
    assert d["Spec"]["CPU"]["Topology"] == {"Sockets": 2, "Cores": 2, "Threads": 1}
    assert d["Spec"]["VCPU"] == {"Placement": "static", "CPUs": 4}
    assert d["Spec"]["CurrentMemory"] == {"Value": 4096, "Unit": "b"}


def test_a_panic_reads_as_virt_launchers_guest_panic_info_with_go_field_names() -> None:
    # api.GuestPanicInfo{Type, Arg1..Arg5} (schema.go@d923fdb815cd); virt-launcher reports
    # Type "unknown" when the panic carries no details, as pvpanic's never does.
    d = domain_dict(example_view(LifeCycle.CRASHED, Reason.PANICKED, panic_count=1, panic_info=GuestPanicInfo()))
    assert d["Status"]["GuestPanicInfo"] == {"Type": "unknown", "Arg1": 0, "Arg2": 0, "Arg3": 0, "Arg4": 0,
                                             "Arg5": 0}
    assert d["Status"]["PanicCount"] == 1
    assert domain_dict(example_view(LifeCycle.RUNNING, Reason.UNKNOWN))["Status"]["GuestPanicInfo"] is None


def test_the_panic_count_and_info_outlive_the_vm_in_the_final_domain() -> None:
    d = domain_dict(deleted_domain_view(NAME, NAMESPACE, UID, "2026-08-22T10:00:00Z", panic_count=2,
                                        panic_info=GuestPanicInfo()))
    assert d["Status"]["PanicCount"] == 2 and d["Status"]["GuestPanicInfo"]["Type"] == "unknown"


def test_panic_devices_are_listed_with_their_model() -> None:
    d = domain_dict(example_view(LifeCycle.RUNNING, Reason.UNKNOWN, panic_models=("pvpanic",)))
    assert d["Spec"]["Devices"]["PanicDevices"] == [{"Model": "pvpanic"}]  # api.PanicDevice{Model}
    assert domain_dict(example_view(LifeCycle.RUNNING, Reason.UNKNOWN))["Spec"]["Devices"]["PanicDevices"] is None


def test_hot_pluggable_vcpus_are_listed_as_libvirt_lists_them() -> None:
    slots = (VcpuSlot(0, True, False, 1), VcpuSlot(1, False, True))
    d = domain_dict(example_view(LifeCycle.RUNNING, Reason.UNKNOWN, sockets=2, vcpus=2, vcpu_slots=slots))
    assert d["Spec"]["VCPU"] == {"Placement": "static", "CPUs": 2}
    # api.VCPUs{VCPU []VCPUsVCPU{ID, Enabled, Hotpluggable, Order}}, libvirt's yes/no strings
    assert d["Spec"]["VCPUs"] == {"VCPU": [{"ID": 0, "Enabled": "yes", "Hotpluggable": "no", "Order": 1},
                                           {"ID": 1, "Enabled": "no", "Hotpluggable": "yes", "Order": 0}]}
    assert domain_dict(example_view(LifeCycle.RUNNING, Reason.UNKNOWN))["Spec"]["VCPUs"] is None


# --- decoding as Go's encoding/json does ------------------------------------------------------

@functools.cache
def go_schema() -> dict[str, Any]:
    """A schema from the union of every golden file: for each object path, its field names and
    the JSON type of each value (None where every example holds null: a Go pointer/slice)."""
    schema: dict[str, Any] = {}

    def merge(node: Any, into: dict[str, Any]) -> None:
        if isinstance(node, dict):
            fields = into.setdefault("fields", {})
            for k, v in node.items():
                merge(v, fields.setdefault(k, {}))
        elif isinstance(node, list):
            for item in node:
                merge(item, into.setdefault("items", {}))
        elif node is not None:
            into.setdefault("types", set()).add(type(node))

    for p in sorted(require_shared(DOMAIN_EXAMPLES).glob("domain-*.json")):
        merge(json.loads(p.read_text()), schema)
    return schema


def go_decode(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Problems Go's decoder would have or hide: keys matching two fields case-insensitively
    (Go would pick one silently), keys matching none (Go drops them silently), type mismatches."""
    problems: list[str] = []
    if value is None:
        return problems
    if isinstance(value, dict) and "fields" in schema:
        fields = schema["fields"]
        seen: dict[str, str] = {}
        for key, sub in value.items():
            matches = [f for f in fields if f.lower() == key.lower()]
            if not matches:
                problems.append(f"{path}.{key}: no such field; Go would ignore it")
                continue
            if key.lower() in seen:
                problems.append(f"{path}.{key}: clashes with {seen[key.lower()]} case-insensitively")
            seen[key.lower()] = key
            exact = key if key in fields else matches[0]
            problems += go_decode(sub, fields[exact], f"{path}.{key}")
    elif isinstance(value, list) and "items" in schema:
        for n, item in enumerate(value):
            problems += go_decode(item, schema["items"], f"{path}[{n}]")
    elif "types" in schema:
        ok = {int: (int,), str: (str,), bool: (bool,), float: (int, float)}
        allowed = tuple(t for typ in schema["types"] for t in ok[typ])
        if (isinstance(value, bool) and bool not in schema["types"]) or not isinstance(value, allowed):
            problems.append(f"{path}: {type(value).__name__} where Go has {schema['types']}")
        elif isinstance(value, int) and not isinstance(value, bool) and value < 0:
            problems.append(f"{path}: negative value for an unsigned/size field")
    return problems


def nil_safety_violations(doc: dict[str, Any], vmi_uid: str) -> list[str]:
    """contract §10.3: what virt-handler dereferences or relies on without checking."""
    out = []
    spec, status = doc.get("Spec") or {}, doc.get("Status") or {}
    devices = spec.get("Devices") or {}
    for n, nic in enumerate(devices.get("Interfaces") or []):
        if not (nic.get("Alias") or {}).get("Name"):
            out.append(f"Interfaces[{n}].Alias is nil or empty")
        if not (nic.get("MAC") or {}).get("MAC"):
            out.append(f"Interfaces[{n}].MAC is nil or empty")
    for n, disk in enumerate(devices.get("Disks") or []):
        source = disk.get("Source") or {}
        if (source.get("File") or source.get("Dev")) and not (disk.get("Alias") or {}).get("Name"):
            out.append(f"Disks[{n}] has a source but a nil Alias")
    if status.get("Status") == "Unknown":
        out.append("Status.Status is Unknown")
    kubevirt = (spec.get("Metadata") or {}).get("KubeVirt") or {}
    if kubevirt.get("UID") != vmi_uid:
        out.append("Spec.Metadata.KubeVirt.UID is not the VMI's uid")
    if "GracePeriod" not in kubevirt:
        out.append("Spec.Metadata.KubeVirt.GracePeriod is absent")
    if not doc.get("ObjectMeta", {}).get("deletionTimestamp") and kubevirt.get("GracePeriod") is None:
        out.append("live Domain without GracePeriod")
    return out


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_golden_files_pass_our_go_decoder_and_nil_checks(example: str) -> None:
    """The checker itself: it accepts what the reference says Go emits."""
    doc = golden(example)
    assert go_decode(doc, go_schema()) == []
    assert nil_safety_violations(doc, UID) == []


def test_go_decoder_notices_a_nil_mac_and_a_misspelt_key() -> None:
    doc = golden("domain-example-running.json")
    doc["Spec"]["Devices"]["Interfaces"][0]["MAC"] = None
    doc["Spec"]["devices"] = {}
    assert "Interfaces[0].MAC is nil or empty" in nil_safety_violations(doc, UID)
    assert any("clashes with" in p for p in go_decode(doc, go_schema()))


views = st.builds(
    DomainView,
    name=st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),
    namespace=st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),
    uid=st.uuids().map(str),
    status=st.sampled_from(list(LifeCycle)),
    reason=st.sampled_from(list(Reason)),
    grace=st.builds(GracePeriod, st.integers(0, 3600),
                    st.one_of(st.none(), st.datetimes(timezones=st.just(UTC)).map(rfc3339)),
                    st.sampled_from([None, True])),
    sockets=st.integers(1, 4), cores=st.integers(1, 4), threads=st.integers(1, 2),
    vcpus=st.integers(1, 32), memory_bytes=st.integers(0, 1 << 40),
    disks=st.lists(st.builds(DomainDisk, alias=st.from_regex(r"[a-z]{1,8}", fullmatch=True),
                             target_dev=st.sampled_from(["vda", "vdb", "vdc"]),
                             source_file=st.sampled_from(["", "/d/disk.img"]),
                             readonly=st.booleans(), boot_order=st.one_of(st.none(), st.integers(1, 9))),
                   max_size=3).map(tuple),
    interfaces=st.lists(st.builds(DomainInterface, alias=st.from_regex(r"[a-z]{1,8}", fullmatch=True),
                                  mac=st.just("02:00:00:00:00:01"),
                                  tap=st.sampled_from(["", "tap0"]),
                                  mtu=st.one_of(st.none(), st.integers(1280, 9000)),
                                  queues=st.one_of(st.none(), st.integers(1, 8))),
                        max_size=3).map(tuple),
    acpi=st.booleans(),
)


@settings(max_examples=60, deadline=None)
@given(views)
def test_any_domain_decodes_cleanly_in_go_and_is_nil_safe(view: DomainView) -> None:
    doc = json.loads(domain_json(view))
    assert go_decode(doc, go_schema()) == []
    assert nil_safety_violations(doc, view.uid) == []


def test_vfio_devices_are_host_devices_as_virt_launcher_writes_them() -> None:
    from ch_launcher.kubevirt.domain import DomainHostDevice

    view = example_view(LifeCycle.RUNNING, Reason.UNKNOWN, host_devices=(
        DomainHostDevice(alias="sriov-sriov-net", pci_address="0000:3b:02.1"),
        DomainHostDevice(alias="gpu-vgpu", mdev_uuid="4b20d080-1b54-4048-85b3-a6a62d165c01")))
    pci, mdev = domain_dict(view)["Spec"]["Devices"]["HostDevices"]
    # hostdev.go createPCIHostDevice / createMDEVHostDevice; device.NewPciAddressField
    assert (pci["Type"], pci["Managed"], pci["Alias"]) == ("pci", "no",
                                                           {"Name": "sriov-sriov-net", "UserDefined": True})
    assert {k: v for k, v in pci["Source"]["Address"].items() if v} == {
        "Type": "pci", "Domain": "0x0000", "Bus": "0x3b", "Slot": "0x02", "Function": "0x1"}
    assert (mdev["Type"], mdev["Mode"], mdev["Model"]) == ("mdev", "subsystem", "vfio-pci")
    assert mdev["Source"]["Address"]["UUID"] == "4b20d080-1b54-4048-85b3-a6a62d165c01"
    # every field of api.HostDevice (pkg/virt-launcher/virtwrap/api/schema.go@d923fdb815cd), no other
    assert set(pci) == {"XMLName", "Source", "Type", "BootOrder", "Managed", "Mode", "Model", "Address", "Alias",
                        "Display", "RamFB", "Driver", "ACPI"}
