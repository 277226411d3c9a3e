"""Config checks happen at `vm.boot`, not at `vm.create`, with CH's texts; disk locks; ids.

These drive the simulated VMM (they need files and sockets a real guest would not): each
expected text is CH's own (`vmm/src/config.rs@v53.0` ValidationError and friends).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ch_launcher.ch.api import Conflict, InternalError, InvalidRequest
from tests import real_vmm
from tests.conftest import OPENAPI_SPEC, require_shared
from tests.contract.harness import FAKE, Vmm, real_backend


def _disk(vmm: Vmm, name: str, data: bytes = b"") -> str:
    path = os.path.join(vmm.dir, name)
    with open(path, "wb") as f:
        f.write(data)
        f.truncate(max(len(data), 1 << 20))
    return path


def _boot_error(vmm: Vmm, config: dict[str, Any]) -> Exception:
    vmm.client.create(config)  # accepted: CH does not validate here
    with pytest.raises(Exception) as info:
        vmm.client.boot()
    return info.value


@pytest.fixture
def fake(start: Callable[..., Vmm]) -> Vmm:
    return start(FAKE)


BAD_CONFIGS: list[tuple[str, dict[str, Any], str]] = [
    ("no-payload", {"payload": None}, "No bootitem provided: neither firmware nor kernel"),
    ("firmware-and-kernel", {"payload": {"firmware": "@fw", "kernel": "@fw"}},
     "Specifying a kernel is not supported when a firmware is provided"),
    ("max-below-boot", {"cpus": {"boot_vcpus": 4, "max_vcpus": 2}}, "Max CPUs (2) lower than boot CPUs (4)"),
    ("topology-product", {"cpus": {"boot_vcpus": 2, "max_vcpus": 4, "topology": {
        "threads_per_core": 1, "cores_per_die": 2, "dies_per_package": 1, "packages": 1}}},
     "Product of CPU topology parts does not match maximum vCPU"),
    ("disk-queues", {"disks": [{"path": "@disk", "num_queues": 4, "image_type": "Raw"}]},
     "Queue count (4) must not exceed boot vCPUs (1)"),
    ("disk-serial", {"disks": [{"path": "@disk", "serial": "x" * 21, "image_type": "Raw"}]},
     "Block device serial length (21) exceeds maximum allowed length (20)"),
    ("net-queues", {"net": [{"tap": "tap0", "num_queues": 1}]},
     "Number of queues (1) to virtio_net should be higher than 2"),
    ("mtu", {"net": [{"tap": "tap0", "mtu": 1000}]},
     "Provided MTU 1000 is lower than 1280 (expected by VIRTIO specification)"),
    ("vhost-user-needs-shared", {"net": [{"vhost_user": True, "vhost_socket": "/x"}]},
     "Using vhost-user requires using shared memory or huge pages"),
    ("fs-needs-shared", {"fs": [{"tag": "t", "socket": "/x"}]},
     "Using vhost-user requires using shared memory or huge pages"),
    ("vsock-cid", {"vsock": {"cid": 2, "socket": "/x"}}, "2 is a special VSOCK CID"),
    ("reserved-id", {"disks": [{"id": "__mine", "path": "@disk", "image_type": "Raw"}]},
     "Identifier __mine is not invalid"),
    ("serial-socket-missing", {"serial": {"mode": "Socket"}}, "Path missing when using socket console mode"),
]  # fmt: skip


def _fill(vmm: Vmm, value: Any) -> Any:
    """Replaces "@fw" and "@disk" with real files of the test directory."""
    if isinstance(value, dict):
        return {k: _fill(vmm, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(vmm, v) for v in value]
    if value == "@fw":
        return FAKE.payload(vmm.dir)["firmware"]
    if value == "@disk":
        return _disk(vmm, "disk.img")
    return value


@pytest.mark.parametrize(("case", "override", "text"), BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_invalid_config_is_accepted_at_create_and_refused_at_boot(
    fake: Vmm, case: str, override: dict[str, Any], text: str
) -> None:
    config = fake.config(**_fill(fake, override))
    if config.get("payload") is None:
        config.pop("payload")
    err = _boot_error(fake, config)
    assert isinstance(err, InternalError), repr(err)
    assert err.status == 500
    assert err.messages[:3] == ["Error from API", "The VM could not boot", "Failed to validate config"]
    assert err.root_cause == text
    assert fake.client.info().state == "Created"  # nothing booted; the config stays


@pytest.mark.parametrize(("version", "status", "cls"),
                         [("53.0.0", 500, InternalError), ("54.0.0", 400, InvalidRequest)])
def test_validation_status_follows_the_vmm_version(
    start: Callable[..., Vmm], version: str, status: int, cls: type
) -> None:
    vmm = start(FAKE, version=version)
    err = _boot_error(vmm, vmm.config(cpus={"boot_vcpus": 4, "max_vcpus": 2}))
    assert type(err) is cls and err.status == status


@pytest.mark.parametrize(("version", "status"), [("53.0.0", 500), ("54.0.0", 409)])
def test_duplicate_ids_are_refused_and_are_a_conflict_on_main(start: Callable[..., Vmm], version: str,
                                                              status: int) -> None:
    vmm = start(FAKE, version=version)
    disk = _disk(vmm, "d.img")
    cfg = vmm.config(disks=[{"id": "x", "path": disk, "image_type": "Raw", "readonly": True}],
                     net=[{"id": "x", "tap": "tap0"}])  # fmt: skip
    err = _boot_error(vmm, cfg)
    assert err.status == status
    assert err.root_cause == "Identifier x is not unique"
    assert isinstance(err, Conflict if status == 409 else InternalError)


def test_missing_firmware_fails_at_boot(fake: Vmm) -> None:
    err = _boot_error(fake, fake.config(payload={"firmware": os.path.join(fake.dir, "nope")}))
    assert err.messages[2:] == ["Error manipulating firmware file", "No such file or directory (os error 2)"]


def test_missing_disk_image_fails_at_boot(fake: Vmm) -> None:
    err = _boot_error(fake, fake.config(disks=[{"path": os.path.join(fake.dir, "nope.img"), "image_type": "Raw"}]))
    assert "Cannot open disk path" in err.messages


def test_image_type_must_match_the_file(fake: Vmm) -> None:
    qcow = _disk(fake, "disk.qcow2", b"QFI\xfb\x00\x00\x00\x03")
    err = _boot_error(fake, fake.config(disks=[{"path": qcow, "image_type": "Raw"}]))
    assert err.root_cause == "Disk image type does not match expected type: specified = Raw, detected = Qcow2"


def test_unset_image_type_is_detected_and_shown_in_vm_info(fake: Vmm) -> None:
    qcow = _disk(fake, "disk.qcow2", b"QFI\xfb\x00\x00\x00\x03")
    fake.client.create(fake.config(disks=[{"path": qcow}]))
    fake.client.boot()
    assert fake.client.info().config["disks"][0]["image_type"] == "Qcow2"


def test_a_second_vm_on_the_same_writable_image_fails_to_lock_it(start: Callable[..., Vmm]) -> None:
    first, second = start(FAKE), start(FAKE)
    image = _disk(first, "shared.img")
    first.client.create(first.config(disks=[{"path": image, "image_type": "Raw"}]))
    first.client.boot()
    second.client.create(second.config(disks=[{"path": image, "image_type": "Raw"}]))
    with pytest.raises(InternalError) as info:
        second.client.boot()
    assert "Error locking disk images: Another instance likely holds a lock" in info.value.messages
    assert info.value.root_cause == "The file is already locked"
    # As CH: the Vm object stays (state Created), so boot now says "already created".
    assert second.client.info().state == "Created"
    first.client.shutdown()  # releases the lock
    second.client.delete()
    second.client.create(second.config(disks=[{"path": image, "image_type": "Raw"}]))
    second.client.boot()
    assert second.client.info().state == "Running"


def test_read_only_images_can_be_shared(start: Callable[..., Vmm]) -> None:
    first, second = start(FAKE), start(FAKE)
    image = _disk(first, "base.img")
    for vmm in (first, second):
        vmm.client.create(vmm.config(disks=[{"path": image, "image_type": "Raw", "readonly": True}]))
        vmm.client.boot()
        assert vmm.client.info().state == "Running"


def test_vhost_user_socket_must_accept_a_connection(fake: Vmm) -> None:
    path = os.path.join(fake.dir, "vu.sock")
    cfg = fake.config(memory={"size": 256 << 20, "shared": True},
                      net=[{"vhost_user": True, "vhost_socket": path, "num_queues": 2}])  # fmt: skip
    err = _boot_error(fake, cfg)
    assert "Cannot create vhost-user-net device" in err.messages
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    try:
        fake.client.boot()
        assert fake.client.info().state == "Running"
    finally:
        listener.close()


def test_generated_ids_share_one_counter_across_device_types(fake: Vmm) -> None:
    disk = _disk(fake, "a.img")
    fake.client.create(fake.config(
        cpus={"boot_vcpus": 2, "max_vcpus": 2},
        disks=[{"path": disk, "image_type": "Raw", "readonly": True}, {"id": "named", "path": disk,
               "image_type": "Raw", "readonly": True}],
        net=[{"tap": "tap0"}],
    ))  # fmt: skip
    fake.client.boot()
    cfg = fake.client.info().config
    assert [d["id"] for d in cfg["disks"]] == ["_disk0", "named"]
    assert cfg["net"][0]["id"] == "_net1"
    added = fake.client.add_disk({"path": disk, "image_type": "Raw", "readonly": True})
    assert added is not None and added.id == "_disk2"
    assert set(fake.client.counters()) >= {"_disk0", "named", "_net1", "_disk2"}


def test_hot_add_is_validated_at_once(fake: Vmm) -> None:
    disk = _disk(fake, "a.img")
    fake.client.create(fake.config(disks=[{"id": "d", "path": disk, "image_type": "Raw", "readonly": True}]))
    with pytest.raises(InternalError) as info:
        fake.client.add_disk({"id": "d", "path": disk, "image_type": "Raw", "readonly": True})
    assert info.value.root_cause == "Identifier d is not unique"


def test_removing_an_unknown_device_is_a_conflict(vmm: Vmm) -> None:
    vmm.client.create(vmm.config())
    with pytest.raises(Conflict, match='No device with id "ghost" to remove'):
        vmm.client.remove_device("ghost")
    vmm.client.boot()  # a booted VM asks its DeviceManager first, which words it differently
    with pytest.raises(Conflict, match="Failed to find device corresponding to the given identifier: ghost"):
        vmm.client.remove_device("ghost")


def test_unknown_fields_are_accepted_logged_and_dropped(fake: Vmm) -> None:
    require_shared(OPENAPI_SPEC)  # the simulated VMM learns the known fields from the spec
    cfg = fake.config()
    cfg["cpus"]["boot_vcpu"] = 2  # a typo: the real VMM silently uses the default
    fake.client.create(cfg)
    fake.client.boot()
    assert "boot_vcpu" not in fake.client.info().config["cpus"]
    with open(fake.proc.log_file) as log:
        assert "unknown field `cpus.boot_vcpu` ignored" in log.read()


def test_wrong_types_fail_to_deserialize(fake: Vmm) -> None:
    require_shared(OPENAPI_SPEC)  # types come from the spec
    with pytest.raises(InvalidRequest) as info:
        fake.client.create(fake.config(cpus={"boot_vcpus": "2", "max_vcpus": 2}))
    assert info.value.messages[0] == "Failed to deserialize JSON"
    assert "cpus.boot_vcpus" in info.value.messages[1]


def test_request_log_records_what_the_vmm_received(start: Callable[..., Vmm], sdir: str) -> None:
    log_path = os.path.join(sdir, "requests.jsonl")
    vmm = start(FAKE, env={"FAKE_CH_REQUEST_LOG": log_path})
    cfg = vmm.config()
    vmm.client.create(cfg)
    vmm.client.boot()
    lines = [json.loads(line) for line in Path(log_path).read_text().splitlines()]
    assert {"method": "PUT", "path": "/api/v1/vm.create", "body": cfg} in lines
    assert {"method": "PUT", "path": "/api/v1/vm.boot", "body": None} in lines


def _shape(value: Any) -> Any:
    """The keys and types of a stored config, paths and MACs left out (they differ by design)."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items() if k not in ("path", "socket", "file", "firmware", "mac")}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return type(value).__name__


@pytest.mark.real_vmm
def test_vm_info_shows_the_config_with_the_real_vmms_serde_defaults(start: Callable[..., Vmm], sdir: str) -> None:
    # The same VmConfig on both VMMs: vm.info shows the same keys, defaults and types, and a NIC
    # without a MAC gets a random locally administered one at vm.create.
    reason = real_vmm.unavailable()
    if reason:
        pytest.skip(f"real cloud-hypervisor: {reason}")
    configs = {}
    for backend in (FAKE, real_backend()):
        vmm = start(backend)
        disk = os.path.join(sdir, f"{backend.name}.img")
        with open(disk, "wb") as f:
            f.truncate(1 << 20)
        vmm.client.create(vmm.config(
            disks=[{"path": disk}], net=[{"tap": "tap0"}], rng={"src": "/dev/urandom"}, pvpanic=True,
            balloon={"size": 1 << 20}, vsock={"cid": 3, "socket": os.path.join(sdir, f"{backend.name}.vsock")},
            fs=[{"tag": "t", "socket": os.path.join(sdir, "fs.sock")}], platform={"num_pci_segments": 1}))
        configs[backend.name] = vmm.client.info().config
    assert _shape(configs["fake"]) == _shape(configs["real"])
    for config in configs.values():
        mac = config["net"][0]["mac"]
        assert int(mac.split(":")[0], 16) & 0x03 == 0x02, mac  # locally administered, unicast
    assert configs["fake"]["cpus"] == configs["real"]["cpus"]
    assert configs["fake"]["debug_console"] == configs["real"]["debug_console"]
