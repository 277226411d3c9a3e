"""The simulated VMM's checks: `VmConfig::validate`, device creation, and the OpenAPI schema.

Part of `fake_cloud_hypervisor.py` (stdlib only). Error texts are CH's `Display` strings from
`vmm/src/config.rs@v53.0` (ValidationError), `vmm/src/vm.rs@v53.0` and
`vmm/src/device_manager.rs@v53.0`; the order of checks follows `VmConfig::validate`.
"""

from __future__ import annotations

import copy
import json
import os
import socket
import urllib.parse
from typing import Any

import fakech_tap
import fakech_yaml

MAX_SUPPORTED_CPUS = 8192  # x86_64 KVM
VIRTIO_MAX_QUEUE_SIZE = 32768
MIN_MTU = 1280
VIRTIO_BLK_ID_BYTES = 20
SPECIAL_VSOCK_CIDS = (0, 1, 2, 0xFFFFFFFF)

# serde defaults of the stored config (vmm/src/vm_config.rs@v53.0), shown by vm.info, as the real
# v53.0 shows them (../shared/vmm; tests/contract/test_boot_checks.py compares the two). A false
# `iommu` is not serialised; every PCI device has its `pci_segment`.
DEFAULTS: dict[str, Any] = {
    "cpus": {"boot_vcpus": 1, "max_vcpus": 1, "kvm_hyperv": False, "max_phys_bits": 46,
             "features": {"amx": False}, "nested": True, "core_scheduling": "Vm", "profile": "Host"},
    "memory": {"size": 512 << 20, "mergeable": False, "hotplug_method": "Acpi", "shared": False,
               "hugepages": False, "prefault": False, "reserve": False, "thp": True},
    "rng": {"pci_segment": 0, "src": "/dev/urandom"},
    "serial": {"mode": "Null"},
    "console": {"mode": "Tty", "pci_segment": 0},
    "debug_console": {"mode": "Off", "iobase": 0xE9},
    "iommu": False, "watchdog": False, "pvpanic": False, "landlock_enable": False,
}  # fmt: skip
# Defaults of optional sections, filled in only when the section is given.
SECTION_DEFAULTS: dict[str, dict[str, Any]] = {
    "balloon": {"pci_segment": 0, "deflate_on_oom": False, "free_page_reporting": False},
    "vsock": {"pci_segment": 0},
    "platform": {"iommu_address_width_bits": 64, "iommufd": False, "vfio_p2p_dma": True},
}  # fmt: skip
ITEM_DEFAULTS: dict[str, dict[str, Any]] = {
    "disks": {"pci_segment": 0, "readonly": False, "direct": False, "num_queues": 1, "queue_size": 128,
              "vhost_user": False, "disable_io_uring": False, "disable_aio": False, "backing_files": False,
              "sparse": True, "image_type": "Unknown", "lock_granularity": "ByteRange"},
    "net": {"pci_segment": 0, "num_queues": 2, "queue_size": 256, "vhost_user": False, "vhost_mode": "Client",
            "offload_tso": True, "offload_ufo": True, "offload_csum": True},
    "fs": {"pci_segment": 0, "num_queues": 1, "queue_size": 1024},
    "pmem": {"pci_segment": 0, "discard_writes": False},
    "devices": {"pci_segment": 0, "x_exclude_mmap_bars": []},
}  # fmt: skip


def random_mac() -> str:
    """A NetConfig without `mac` gets a random locally administered unicast one at vm.create
    (MacAddr::local_random, as the real v53.0 shows in vm.info)."""
    octets = bytearray(os.urandom(6))
    octets[0] = (octets[0] & 0xFE) | 0x02
    return ":".join(f"{b:02x}" for b in octets)


class ConfigInvalid(Exception):
    """A ValidationError. `kind` is "validation", or "duplicate" (409 on main)."""

    def __init__(self, message: str, kind: str = "validation", prefix: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.chain = [*prefix, message]
        self.kind = kind


class DeviceError(Exception):
    """A failure while creating devices or loading the payload in `Vm::new` (500)."""

    def __init__(self, *chain: str) -> None:
        super().__init__(chain[-1])
        self.chain = list(chain)


def io_error(exc: OSError) -> str:
    """Rust's `io::Error` Display."""
    return f"{os.strerror(exc.errno or 0)} (os error {exc.errno or 0})"


def with_defaults(config: dict[str, Any]) -> dict[str, Any]:
    """The config as CH stores it after deserialising: serde defaults filled in."""
    out = copy.deepcopy(config)
    for key, default in DEFAULTS.items():
        if isinstance(default, dict):
            if key not in out or out[key] is None:
                out[key] = dict(default)
            elif isinstance(out[key], dict):
                out[key] = {**default, **out[key]}
        elif key not in out:
            out[key] = default
    for key, default in SECTION_DEFAULTS.items():
        if isinstance(out.get(key), dict):
            out[key] = {**default, **out[key]}
    for key, default in ITEM_DEFAULTS.items():
        if isinstance(out.get(key), list):
            out[key] = [{**copy.deepcopy(default), **item} if isinstance(item, dict) else item for item in out[key]]
    for net in out.get("net") or []:
        if isinstance(net, dict) and not net.get("mac"):
            net["mac"] = random_mac()
    return out


def with_nulls(info: dict[str, Any]) -> dict[str, Any]:
    """Before v53 unset options were serialised as null; we show the common ones."""
    info = copy.deepcopy(info)
    cfg = info.get("config", {})
    for key in ("balloon", "fs", "pmem", "devices", "vdpa", "vsock", "numa", "platform", "tpm", "disks", "net"):
        cfg.setdefault(key, None)
    return info


# --- VmConfig::validate ---------------------------------------------------------------------


def _shared(config: dict[str, Any]) -> bool:
    mem = config.get("memory") or {}
    if mem.get("shared") or mem.get("hugepages"):
        return True
    return any(z.get("shared") or z.get("hugepages") for z in mem.get("zones") or [])


def _pow2(n: Any) -> bool:
    return isinstance(n, int) and n > 0 and n & (n - 1) == 0


def validate_config(config: dict[str, Any], boot: bool = True) -> None:
    """Raises ConfigInvalid like `VmConfig::validate` (first problem only, as CH does).

    `boot=False` (vm.add-*) still runs every check: CH validates a clone of the whole config.
    """
    cfg = with_defaults(config)
    ids: set[str] = set()

    def ident(dev: dict[str, Any]) -> None:
        dev_id = dev.get("id")
        if dev_id is None:
            return
        if dev_id.startswith("__"):
            raise ConfigInvalid(f"Identifier {dev_id} is not invalid")  # sic: CH's text
        if dev_id in ids:
            raise ConfigInvalid(f"Identifier {dev_id} is not unique", kind="duplicate")
        ids.add(dev_id)

    payload = cfg.get("payload")
    if not payload or (not payload.get("firmware") and not payload.get("kernel") and not payload.get("igvm")):
        raise ConfigInvalid(
            "No bootitem provided: neither firmware nor kernel", prefix=("Payload configuration is not bootable",)
        )
    if payload.get("firmware") and payload.get("kernel"):
        raise ConfigInvalid(
            "Specifying a kernel is not supported when a firmware is provided",
            prefix=("Payload configuration is not bootable",),
        )
    for key in ("console", "serial"):
        con = cfg.get(key) or {}
        if con.get("mode") == "File" and not con.get("file"):
            raise ConfigInvalid("Path missing when using file console mode")
        if con.get("mode") == "Socket" and not con.get("socket"):
            raise ConfigInvalid("Path missing when using socket console mode")
    cpus = cfg["cpus"]
    boot_vcpus, max_vcpus = cpus.get("boot_vcpus", 1), cpus.get("max_vcpus", 1)
    if max_vcpus < boot_vcpus:
        raise ConfigInvalid(f"Max CPUs ({max_vcpus}) lower than boot CPUs ({boot_vcpus})")
    if max_vcpus > MAX_SUPPORTED_CPUS:
        raise ConfigInvalid(f"Too many CPUs: specified {max_vcpus} but {MAX_SUPPORTED_CPUS} is the limit")
    for disk in cfg.get("disks") or []:
        if disk.get("vhost_socket") and disk.get("path"):
            raise ConfigInvalid("Disk path and vhost socket both provided")
        if disk.get("vhost_user") and not _shared(cfg):
            raise ConfigInvalid("Using vhost-user requires using shared memory or huge pages")
        if disk.get("vhost_user") and not disk.get("vhost_socket"):
            raise ConfigInvalid("No socket provided when using vhost-user")
        if disk["num_queues"] > boot_vcpus:
            raise ConfigInvalid(f"Queue count ({disk['num_queues']}) must not exceed boot vCPUs ({boot_vcpus})")
        _queue_size(disk["queue_size"])
        if disk["queue_size"] <= 2:
            raise ConfigInvalid(f"Block queue size must be greater than 2: {disk['queue_size']}")
        serial = disk.get("serial")
        if serial is not None and len(serial.encode()) > VIRTIO_BLK_ID_BYTES:
            raise ConfigInvalid(
                f"Block device serial length ({len(serial.encode())}) exceeds maximum allowed length"
                f" ({VIRTIO_BLK_ID_BYTES})"
            )
        ident(disk)
    for net in cfg.get("net") or []:
        if net.get("vhost_user") and not _shared(cfg):
            raise ConfigInvalid("Using vhost-user requires using shared memory or huge pages")
        if net.get("vhost_user") and not net.get("vhost_socket"):
            raise ConfigInvalid("No socket provided when using vhost-user")
        nq = net["num_queues"]
        if nq < 2:
            raise ConfigInvalid(f"Number of queues ({nq}) to virtio_net should be higher than 2")
        if nq // 2 > boot_vcpus:
            raise ConfigInvalid(f"Queue count ({nq}) must not exceed boot vCPUs ({boot_vcpus})")
        _queue_size(net["queue_size"])
        mtu = net.get("mtu")
        if mtu is not None and mtu < MIN_MTU:
            raise ConfigInvalid(f"Provided MTU {mtu} is lower than 1280 (expected by VIRTIO specification)")
        if not net["offload_csum"] and (net["offload_tso"] or net["offload_ufo"]):
            raise ConfigInvalid('"offload_tso" and "offload_ufo" depend on "offload_csum"')
        if net.get("mask") and not net.get("ip"):
            raise ConfigInvalid("Mask provided without an IP")
        if net.get("ip") and not net.get("mask"):
            raise ConfigInvalid("IP provided without a mask")
        ident(net)
    if cfg.get("fs") and not _shared(cfg):
        raise ConfigInvalid("Using vhost-user requires using shared memory or huge pages")
    for fs in cfg.get("fs") or []:
        ident(fs)
    if cfg.get("generic_vhost_user") and not _shared(cfg):
        raise ConfigInvalid("Using vhost-user requires using shared memory or huge pages")
    for dev in (cfg.get("generic_vhost_user") or []) + (cfg.get("pmem") or []):
        ident(dev)
    ident(cfg["rng"])
    ident(cfg["console"])
    topo = cpus.get("topology")
    if topo:
        parts = [topo.get(k, 0) for k in ("threads_per_core", "cores_per_die", "dies_per_package", "packages")]
        if 0 in parts:
            raise ConfigInvalid("No part of the CPU topology can be zero")
        if parts[0] > 2:
            raise ConfigInvalid("CPU topology supports at most 2 threads per core")
        if parts[2] != 1:
            raise ConfigInvalid("Dies per package must be 1")
        if parts[0] * parts[1] * parts[2] * parts[3] != max_vcpus:
            raise ConfigInvalid("Product of CPU topology parts does not match maximum vCPU")
    mem = cfg["memory"]
    if mem.get("hugepage_size") is not None:
        if not mem.get("hugepages"):
            raise ConfigInvalid("Huge page size specified but huge pages not enabled")
        if not _pow2(mem["hugepage_size"]):
            raise ConfigInvalid(f"Huge page size is not power of 2: {mem['hugepage_size']}")
    if mem.get("shared") and mem.get("mergeable"):
        raise ConfigInvalid("Invalid to set both 'mergeable' and 'shared' for memory")
    if cfg.get("user_devices") and not _shared(cfg):
        raise ConfigInvalid("Using user devices requires using shared memory or huge pages")
    for dev in (cfg.get("user_devices") or []) + (cfg.get("vdpa") or []):
        ident(dev)
    vsock = cfg.get("vsock")
    if vsock and vsock.get("cid") in SPECIAL_VSOCK_CIDS:
        raise ConfigInvalid(f"{vsock['cid']} is a special VSOCK CID")
    balloon = cfg.get("balloon")
    if balloon:
        ident(balloon)
        ram = mem.get("size", 0) + sum(z.get("size", 0) for z in mem.get("zones") or [])
        if balloon.get("size", 0) >= ram:
            raise ConfigInvalid(f"Balloon size ({balloon.get('size')}) greater than RAM ({ram})")
    paths: set[str] = set()
    for dev in cfg.get("devices") or []:
        path = dev.get("path")
        if path is not None:
            if path in paths:
                raise ConfigInvalid(f"Duplicated device path: {path}", kind="duplicate")
            paths.add(path)
        ident(dev)
    if vsock:
        ident(vsock)
    for zone in mem.get("zones") or []:
        ident({"id": zone.get("id")})


def _queue_size(size: Any) -> None:
    if not _pow2(size) or size > VIRTIO_MAX_QUEUE_SIZE:
        raise ConfigInvalid(f"Queue size must be a power of 2 no greater than {VIRTIO_MAX_QUEUE_SIZE}: {size}")


# --- Vm::new: payload and devices -----------------------------------------------------------


def detect_image_type(path: str) -> str:
    with open(path, "rb") as f:
        head = f.read(8)
        if head[:4] == b"QFI\xfb":
            return "Qcow2"
        if head == b"vhdxfile":
            return "Vhdx"
        f.seek(0, os.SEEK_END)
        size = f.tell()
        if size >= 512:
            f.seek(size - 512)
            if f.read(8) == b"conectix":
                return "FixedVhd"
    return "Raw"


MAX_NESTING_DEPTH = 10  # block/src/qcow/mod.rs@v53.0 (a backing chain longer than this is refused)


def _backing_file(path: str) -> str | None:
    """The backing file a qcow2 image names (relative names are relative to its directory)."""
    with open(path, "rb") as f:
        header = f.read(20)
        offset, size = int.from_bytes(header[8:16], "big"), int.from_bytes(header[16:20], "big")
        if not offset or not size:
            return None
        f.seek(offset)
        name = f.read(size).decode(errors="replace")
    return name if name.startswith("/") else os.path.join(os.path.dirname(path), name)


def open_disk_image(path: str, readonly: bool, backing_files: bool) -> str:
    """Open a disk image as CH's block layer does at device creation: read-write unless
    `readonly` (a read-only file of a writable disk fails here, before any lock), and a qcow2
    image's backing chain read-only, only when `backing_files` allows it. Returns the detected
    image type; raises DeviceError with CH's chain (`Cannot open disk path` / `I/O error
    (path=<image> op=open)` / [`Backing file I/O error: <file>`] / the OS error)."""
    where = f"I/O error (path={path} op=open)"
    try:
        os.close(os.open(path, (os.O_RDONLY if readonly else os.O_RDWR) | os.O_CLOEXEC))
        detected = detect_image_type(path)
    except OSError as exc:
        raise DeviceError("Error from device manager", "Cannot open disk path", where, io_error(exc)) from None
    image, depth = path, 0
    while detect_image_type(image) == "Qcow2":
        backing = _backing_file(image)
        if backing is None:
            break
        depth += 1
        if not backing_files or depth > MAX_NESTING_DEPTH:
            raise DeviceError("Error from device manager", "Cannot open disk path",
                              f"Unsupported feature (path={path} op=open)", "Maximum disk nesting depth exceeded")
        try:
            os.close(os.open(backing, os.O_RDONLY | os.O_CLOEXEC))
        except OSError as exc:
            raise DeviceError("Error from device manager", "Cannot open disk path", where,
                              f"Backing file I/O error: {backing}", io_error(exc)) from None
        image = backing
    return detected


def _connect(path: str) -> None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(path)
    finally:
        s.close()


def create_devices(config: dict[str, Any], taps: dict[str, list[int]] | None = None) -> list[int]:
    """The checks `Vm::new` makes against the host: payload files, disk images (type detected
    and written back), taps (opened for real, `fakech_tap`), vhost-user and virtio-fs sockets.
    Returns the fds the VM keeps (its taps); `taps`, when given, gets each NIC's by its id (the
    device closes them when the guest ejects it). Raises DeviceError."""
    fds: list[int] = []
    try:
        _create_devices(config, fds, taps)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return fds


def _create_devices(config: dict[str, Any], fds: list[int], taps: dict[str, list[int]] | None) -> None:
    payload = config.get("payload") or {}
    for key, text in (("firmware", "Error manipulating firmware file"), ("kernel", "Cannot open kernel file"),
                      ("initramfs", "Cannot open initramfs file")):  # fmt: skip
        path = payload.get(key)
        if path is None or (key == "initramfs" and payload.get("firmware")):
            continue
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise DeviceError(text, io_error(exc)) from None
    for disk in config.get("disks") or []:
        if disk.get("vhost_user"):
            _backend(disk.get("vhost_socket"), "Cannot create vhost-user-blk device")
            continue
        path = disk.get("path")
        if not path:
            raise DeviceError("Error from device manager", "No disk path was specified when one was expected")
        detected = open_disk_image(path, bool(disk.get("readonly")), bool(disk.get("backing_files")))
        specified = disk.get("image_type", "Unknown")
        if specified in (None, "Unknown"):
            disk["image_type"] = detected
        elif specified != detected:
            raise DeviceError(
                "Error from device manager",
                f"Disk image type does not match expected type: specified = {specified}, detected = {detected}",
            )
    for net in config.get("net") or []:
        if net.get("vhost_user"):
            if net.get("vhost_mode") == "Server":
                _serve_backend(net.get("vhost_socket"), "Cannot create vhost-user-net device")
            else:
                _backend(net.get("vhost_socket"), "Cannot create vhost-user-net device")
            continue
        try:
            opened = fakech_tap.open_tap(net)
            fds.extend(opened)
            if taps is not None and net.get("id"):
                taps[net["id"]] = opened
        except fakech_tap.TapError as exc:
            raise DeviceError(*exc.chain) from None
    for fs in config.get("fs") or []:
        _backend(fs.get("socket"), "Cannot create virtio-fs device")
    _vfio_devices(config.get("devices") or [])


def _vfio_devices(devices: list[dict[str, Any]]) -> None:
    """VFIO devices in legacy container/group mode: the real VMM opens the container
    `/dev/vfio/vfio` first (vmm/src/device_manager.rs@v53.0 create_vfio_ops, VfioContainer::new)
    and says so when it is missing, as on a host without VFIO; then the device's sysfs path.
    Host paths are under env FAKE_CH_HOST_ROOT (tests; default: the real ones)."""
    if not devices:
        return
    root = os.environ.get("FAKE_CH_HOST_ROOT", "").rstrip("/")
    if not os.path.exists(root + "/dev/vfio/vfio"):
        missing = "No such file or directory (os error 2)"
        raise DeviceError("Error from device manager", "Cannot create a VFIO device",
                          f"failed to open /dev/vfio/vfio container: {missing}", missing)
    for dev in devices:
        path = dev.get("path")
        if path and not os.path.exists(root + path):
            raise DeviceError("Error from device manager", "Cannot create a VFIO device",
                              f"No such file or directory: {path}")  # fmt: skip


def _serve_backend(path: str | None, what: str) -> None:
    """Server mode (`vhost_mode: Server`): CH binds the socket and blocks in accept() until the
    backend connects (`connect_vhost_user` in `virtio-devices/src/vhost_user/vu_common_ctrl.rs`)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            listener.bind(path or "")
            listener.listen(1)
        except OSError as exc:
            raise DeviceError("Error from device manager", what, "Failed binding vhost-user socket",
                              io_error(exc)) from None
        try:
            conn, _ = listener.accept()
        except OSError as exc:
            raise DeviceError("Error from device manager", what, "Failed accepting connection", io_error(exc)) from None
        conn.close()
    finally:
        listener.close()


def _backend(path: str | None, what: str) -> None:
    try:
        _connect(path or "")
    except OSError as exc:
        raise DeviceError(
            "Error from device manager", what, f"Failed connecting the backend for socket {path}: {io_error(exc)}"
        ) from None


# --- ids ------------------------------------------------------------------------------------

_DEVICE_LISTS = ("disks", "net", "fs", "pmem", "vdpa", "devices", "user_devices", "generic_vhost_user")


def user_ids(config: dict[str, Any]) -> set[str]:
    ids = set()
    for key in _DEVICE_LISTS:
        for item in config.get(key) or []:
            if isinstance(item, dict) and item.get("id"):
                ids.add(item["id"])
    for key in ("vsock", "balloon"):
        if isinstance(config.get(key), dict) and config[key].get("id"):
            ids.add(config[key]["id"])
    return ids


def virtio_ids(config: dict[str, Any]) -> list[str]:
    """Ids of devices a guest driver activates, in creation order."""
    ids = [d["id"] for key in ("disks", "net", "fs", "pmem") for d in config.get(key) or [] if d.get("id")]
    ids.insert(len(config.get("disks") or []) + len(config.get("net") or []), "__rng")
    if config.get("vsock"):
        ids.append(config["vsock"].get("id") or "_vsock")
    if config.get("balloon"):
        ids.append("__balloon")
    if (config.get("console") or {}).get("mode", "Tty") != "Off":
        ids.insert(0, "__console")
    return ids


def device_ids(config: dict[str, Any]) -> list[str]:
    """Ids of PCI devices (the device tree), virtio first, then VFIO."""
    ids = virtio_ids(config)
    if config.get("watchdog"):
        ids.append("__watchdog")
    if config.get("pvpanic"):
        ids.append("__pvpanic")
    ids += [d["id"] for d in config.get("devices") or [] if d.get("id")]
    return ids


def remove_from_config(config: dict[str, Any], dev_id: str) -> bool:
    for key in _DEVICE_LISTS:
        items = config.get(key)
        if isinstance(items, list):
            kept = [d for d in items if not (isinstance(d, dict) and d.get("id") == dev_id)]
            if len(kept) != len(items):
                config[key] = kept
                return True
    if isinstance(config.get("vsock"), dict) and config["vsock"].get("id") == dev_id:
        config["vsock"] = None
        return True
    return False


def file_url_dir(url: str) -> str | None:
    parsed = urllib.parse.urlparse(url)
    return parsed.path if parsed.scheme == "file" and parsed.path else None


# --- the OpenAPI spec -----------------------------------------------------------------------

# Spec entries the code contradicts (cloud-hypervisor.md §3 "Where the spec is wrong").
NOT_REALLY_REQUIRED = {
    ("VmConfig", "payload"), ("FsConfig", "num_queues"), ("FsConfig", "queue_size"),
    ("RngConfig", "src"), ("VdpaConfig", "num_queues"),
}  # fmt: skip

BODY_SCHEMA = {
    "vm.create": "VmConfig", "vm.add-disk": "DiskConfig", "vm.add-net": "NetConfig",
    "vm.add-fs": "FsConfig", "vm.add-pmem": "PmemConfig", "vm.add-vsock": "VsockConfig",
    "vm.add-vdpa": "VdpaConfig", "vm.add-device": "DeviceConfig", "vm.add-user-device": "VmAddUserDevice",
    "vm.add-generic-vhost-user": "GenericVhostUserConfig", "vm.resize": "VmResize",
    "vm.resize-zone": "VmResizeZone", "vm.resize-disk": "VmResizeDisk", "vm.remove-device": "VmRemoveDevice",
    "vm.snapshot": "VmSnapshotConfig", "vm.restore": "RestoreConfig",
    "vm.send-migration": "SendMigrationData", "vm.receive-migration": "ReceiveMigrationData",
}  # fmt: skip


def load_spec(path: str) -> dict[str, Any] | None:
    """The spec's `components.schemas`, or None if the file is absent or unreadable."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    try:
        import yaml  # optional: PyYAML when the interpreter has it

        doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except ImportError:
        doc = fakech_yaml.parse_yaml(text)
    except Exception:  # noqa: BLE001 - a broken spec must not stop the VMM from starting
        return None
    schemas = copy.deepcopy((doc or {}).get("components", {}).get("schemas", {}))
    props = schemas.get("VmConfig", {}).get("properties", {})
    if "generic-vhost-user" in props:  # the v53.0 spec's typo; the code's key has an underscore
        props["generic_vhost_user"] = props.pop("generic-vhost-user")
    return schemas


def check_schema(
    value: Any, name: str, schemas: dict[str, Any], prune: bool = False
) -> tuple[list[str], list[str]]:
    """(errors serde would reject, unknown fields serde silently ignores) for `value`.

    `prune=True` also deletes the unknown fields from `value`, as deserialising drops them.
    """
    errors: list[str] = []
    unknown: list[tuple[str, dict[str, Any], str]] = []
    _check(value, {"$ref": f"#/components/schemas/{name}"}, name, schemas, errors, unknown, "")
    if prune:
        for _path, container, key in unknown:
            container.pop(key, None)
    return errors, [path for path, _c, _k in unknown]


def _check(value: Any, schema: dict[str, Any], name: str, schemas: dict[str, Any],
           errors: list[str], unknown: list[Any], path: str) -> None:  # fmt: skip
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = schemas.get(name, {})
    where = path or "the body"
    typ = schema.get("type")
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"unknown variant `{value}` at {where}, expected one of {', '.join(map(str, schema['enum']))}")
        return
    if typ == "integer" and (not isinstance(value, int) or isinstance(value, bool)):
        errors.append(f"invalid type: {_kind(value)} at {where}, expected an integer")
    elif typ == "number" and (not isinstance(value, (int, float)) or isinstance(value, bool)):
        errors.append(f"invalid type: {_kind(value)} at {where}, expected a number")
    elif typ == "string" and not isinstance(value, str):
        errors.append(f"invalid type: {_kind(value)} at {where}, expected a string")
    elif typ == "boolean" and not isinstance(value, bool):
        errors.append(f"invalid type: {_kind(value)} at {where}, expected a boolean")
    elif typ == "array":
        if not isinstance(value, list):
            errors.append(f"invalid type: {_kind(value)} at {where}, expected a sequence")
        else:
            for i, item in enumerate(value):
                _check(item, schema.get("items", {}), name, schemas, errors, unknown, f"{path}[{i}]")
    elif typ == "object" or "properties" in schema:
        if not isinstance(value, dict):
            errors.append(f"invalid type: {_kind(value)} at {where}, expected a map")
            return
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = f"{path}.{key}" if path else key
            if key in props:
                if item is not None:  # serde accepts null for every Option
                    _check(item, props[key], name, schemas, errors, unknown, sub)
            elif isinstance(extra, dict):
                _check(item, extra, name, schemas, errors, unknown, sub)
            elif extra is not True:
                unknown.append((sub, value, key))
        errors.extend(f"missing field `{key}` at {where}" for key in schema.get("required", [])
                      if (name, key) not in NOT_REALLY_REQUIRED and value.get(key) is None)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean `{str(value).lower()}`"
    if isinstance(value, (int, float)):
        return f"number {value}"
    if isinstance(value, str):
        return f"string {json.dumps(value)}"
    return "sequence" if isinstance(value, list) else "map"
