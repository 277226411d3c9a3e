"""The simulated VMM's state machine: every API endpoint, per state, with the real answers.

Part of `fake_cloud_hypervisor.py` (stdlib only). Behaviour follows cloud-hypervisor.md §3-§5 and
`api-behaviour-matrix.json`, checked against `vmm/src/lib.rs@v53.0`, `vmm/src/vm.rs@v53.0` and
`vmm/src/api/http/mod.rs@v53.0` (error texts are CH's `Display` strings).

The host (the HTTP/event/console shell in `fake_cloud_hypervisor.py`) supplies `Host`:
events, logging, timers, the serial console, and process exit.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import math
import os
import struct
import time
from collections.abc import Callable
from typing import Any, Protocol

import fakech_checks as checks
from fakech_migration import Migrations
from fakech_ram import GuestRam, RamFailed
from fakech_vcpus import VcpuThreads
from fakech_vsock import Vsock

# ApiError Display strings (vmm/src/api/mod.rs@v53.0): the second element of every error chain.
ACTION = {
    "vm.boot": "The VM could not boot",
    "vm.create": "The VM could not be created",
    "vm.delete": "The VM could not be deleted",
    "vm.info": "The VM info is not available",
    "vm.counters": "The VM info is not available",
    "vm.pause": "The VM could not be paused",
    "vm.resume": "The VM could not resume",
    "vm.shutdown": "The VM could not shutdown",
    "vm.reboot": "The VM could not reboot",
    "vm.snapshot": "The VM could not be snapshotted",
    "vm.restore": "The VM could not be restored",
    "vmm.shutdown": "The VMM could not shutdown",
    "vm.resize": "The VM could not be resized",
    "vm.resize-zone": "The memory zone could not be resized",
    "vm.resize-disk": "The disk could not be resized",
    "vm.add-device": "The device could not be added to the VM",
    "vm.add-user-device": "The user device could not be added to the VM",
    "vm.remove-device": "The device could not be removed from the VM",
    "vm.add-disk": "The disk could not be added to the VM",
    "vm.add-fs": "The fs could not be added to the VM",
    "vm.add-generic-vhost-user": "The generic vhost-user device could not be added to the VM",
    "vm.add-pmem": "The pmem device could not be added to the VM",
    "vm.add-net": "The network device could not be added to the VM",
    "vm.add-vdpa": "The vDPA device could not be added to the VM",
    "vm.add-vsock": "The vsock device could not be added to the VM",
    "vm.receive-migration": "Error receiving migration",
    "vm.power-button": "Error triggering power button",
    "vm.nmi": "Error triggering NMI",
}

# ApiError::VmSendMigration's Display: v53 and later, v52 and earlier (vmm/src/api/mod.rs).
SEND_MIGRATION_ACTION = ("Error dispatching the migration worker", "Error starting migration sender")

# vm.add-* endpoint -> (VmConfig key, is a list, generated-id prefix)
ADDERS = {
    "vm.add-disk": ("disks", True, "_disk"),
    "vm.add-net": ("net", True, "_net"),
    "vm.add-fs": ("fs", True, "_fs"),
    "vm.add-pmem": ("pmem", True, "_pmem"),
    "vm.add-vsock": ("vsock", False, "_vsock"),
    "vm.add-vdpa": ("vdpa", True, "_vdpa"),
    "vm.add-device": ("devices", True, "_vfio"),
    "vm.add-user-device": ("user_devices", True, "_vfio_user"),
    "vm.add-generic-vhost-user": ("generic_vhost_user", True, "_generic_vhost_user"),
}

# Order in which DeviceManager creates devices, so generated ids match the real ones
# (vmm/src/device_manager.rs@v53.0 make_virtio_devices, then VFIO devices).
CREATION_ORDER = [
    ("disks", "_disk"),
    ("net", "_net"),
    ("generic_vhost_user", "_generic_vhost_user"),
    ("fs", "_fs"),
    ("pmem", "_pmem"),
    ("vsock", "_vsock"),
    ("vdpa", "_vdpa"),
    ("devices", "_vfio"),
    ("user_devices", "_vfio_user"),
]

BLOCK_COUNTERS = (
    "read_bytes", "write_bytes", "read_ops", "write_ops",
    "write_latency_min", "write_latency_max", "write_latency_avg",
    "read_latency_min", "read_latency_max", "read_latency_avg",
)  # fmt: skip
NET_COUNTERS = ("rx_bytes", "rx_frames", "tx_bytes", "tx_frames")


# vm.boot when the vsock socket's path exists (DeviceManagerError::CreateVsockBackend(
# VsockUnixError::UnixBind), vmm/src/device_manager.rs, virtio-devices/src/vsock/unix/mod.rs@v53.0)
VSOCK_BIND_FAILED = ("Error from device manager", "Cannot create virtio-vsock backend",
                     "Error binding to the host-side Unix socket")


class Host(Protocol):
    version: tuple[int, int, int]
    no_shutdown: bool
    acpi_delay: float | None  # None: the guest ignores ACPI
    vcpu_removal_delay: float | None  # None: the guest never offlines removed vCPUs
    eject_delay: float | None  # None: the guest never acknowledges a PCI hot-unplug
    virtio_mem_delay: float | None  # None: the guest has no virtio-mem driver
    dirty_pages: float  # pages a second the running guest writes (FAKE_CH_DIRTY_PAGES)
    vsock: Vsock  # the VM's vsock device and the guest's qemu-ga behind it (fakech_vsock.py)
    guest_agent_port: int | None  # the guest runs qemu-ga on this vsock port from boot (FAKE_CH_GUEST_AGENT)
    vsock_driver: bool  # the guest activates its vsock device (FAKE_CH_VSOCK_DRIVER)

    def event(self, source: str, event: str, properties: dict[str, str] | None = None) -> None: ...
    def log(self, level: str, message: str) -> None: ...
    def schedule(self, delay: float, fn: Callable[[], None]) -> None: ...
    def serial_start(self, config: dict[str, Any]) -> str | None: ...
    def serial_stop(self) -> None: ...
    def serial_boot(self) -> None: ...
    def request_exit(self, code: int) -> None: ...
    def fatal_exit(self, code: int, stderr: str) -> None: ...
    def call(self, fn: Callable[[], Any]) -> Any: ...  # from another thread: run on the main loop, wait
    def defer(self) -> Any: ...  # an answer given later (`resolve(status, payload)`)
    def hold_api(self) -> None: ...  # stop serving requests (a blocking call is in progress)
    def release_api(self) -> None: ...


class ApiFailure(Exception):
    """An error answer. `kind` selects the status per version (see `Vmm.error_status`)."""

    def __init__(self, endpoint: str, chain: list[str], kind: str = "other") -> None:
        super().__init__(chain[-1] if chain else endpoint)
        self.endpoint, self.chain, self.kind = endpoint, chain, kind


class HttpFailure(Exception):
    """An HTTP-level error (`HttpError` in vmm/src/api/http/mod.rs): bad request, not found."""

    def __init__(self, status: int, chain: list[str]) -> None:
        super().__init__(status)
        self.status, self.chain = status, chain


def _lock_image(path: str, readonly: bool) -> int:
    """Takes a whole-file OFD lock like CH's `try_lock_image` (read lock if read-only)."""
    fd = os.open(path, (os.O_RDONLY if readonly else os.O_RDWR) | os.O_CLOEXEC)
    ltype = fcntl.F_RDLCK if readonly else fcntl.F_WRLCK
    flock = struct.pack("hhqqi4x", ltype, os.SEEK_SET, 0, 0, 0)
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, flock)
    except OSError:
        os.close(fd)
        raise
    return fd


class LockFailed(Exception):
    def __init__(self, path: str, access: str) -> None:
        super().__init__(path)
        self.path, self.access = path, access


class Vm:
    """The `Vm` object CH owns while booted (`VmOwnership::Owned`)."""

    def __init__(self, config: dict[str, Any], ram: GuestRam | None) -> None:
        self.config = config  # the stored config, shared (ids written back into it)
        self.state = "Created"
        self.lock_fds: list[int] = []
        self.booted_at = time.monotonic()
        self.bdfs: dict[str, str] = {}
        self.pending_guest: list[str] = []  # guest actions deferred while paused
        self.vcpu_removal_until = 0.0  # the guest is still offlining vCPUs (CpuManager's, gone with the Vm)
        self.vcpus_present = 0  # while a removal is pending: the vCPUs still there
        self.disk_locks: dict[str, int] = {}  # disk id -> its lock fd (also in lock_fds)
        self.tap_fds: dict[str, list[int]] = {}  # NIC id -> its tap fds (also in lock_fds)
        self.tpm_conn: Any = None  # the control connection to swtpm, for the life of the Vm
        self.virtio_mem_plugged = 0  # bytes the guest's virtio-mem driver has plugged
        self.ram = ram  # Vm::new maps the guest RAM first thing (fakech_ram.py)
        self.vcpus = VcpuThreads((config.get("cpus") or {}).get("affinity"))  # started at boot (fakech_vcpus.py)

    def release(self) -> None:
        if self.tpm_conn is not None:
            self.tpm_conn.close()
            self.tpm_conn = None
        for fd in self.lock_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.lock_fds.clear()
        self.vcpus.stop()
        if self.ram is not None:
            self.ram.close()
            self.ram = None


class Vmm:
    """The VMM thread: the stored config, the optional `Vm`, and one handler per endpoint."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.config: dict[str, Any] | None = None
        self.vm: Vm | None = None
        self.id_counter = 0
        self.next_slot = 1
        self.exiting = False
        self.migrations = Migrations(self)

    # --- errors ---------------------------------------------------------------------------

    def error_status(self, kind: str) -> int:
        """Status per version (cloud-hypervisor.md §4.2)."""
        major = self.host.version[0]
        if major >= 54:  # "main after v53"
            return {
                "not_created": 404, "unknown_device": 404, "duplicate": 409,
                "validation": 400,
            }.get(kind, 500)  # fmt: skip
        if major == 53 and kind == "not_created":
            return 404
        return 500

    def fail(self, endpoint: str, *chain: str, kind: str = "other") -> ApiFailure:
        action = ACTION.get(endpoint, endpoint)
        if endpoint == "vm.send-migration":  # the sender became a worker thread in v53
            action = SEND_MIGRATION_ACTION[0] if self.host.version[0] >= 53 else SEND_MIGRATION_ACTION[1]
        return ApiFailure(endpoint, ["Error from API", action, *chain], kind)

    @staticmethod
    def http(status: int, *chain: str) -> HttpFailure:
        return HttpFailure(status, list(chain))

    @property
    def state(self) -> str:
        if self.vm is not None:
            return self.vm.state
        return "Created" if self.config is not None else "NONE"

    # --- dispatch -------------------------------------------------------------------------

    def handle(self, endpoint: str, body: Any) -> tuple[int, Any]:
        """Runs one API action; returns (status, JSON-able body or None). Raises ApiFailure."""
        answer = self.migrations.guard(endpoint)  # a VM owned by a migration worker answers differently
        if answer is not None:
            return answer
        fn = getattr(self, "api_" + endpoint.replace(".", "_").replace("-", "_"), None)
        if fn is None and endpoint in ADDERS:
            return self.add_device(endpoint, body)
        assert fn is not None, endpoint
        return fn(body)

    # --- VMM ------------------------------------------------------------------------------

    def api_vmm_ping(self, _: Any) -> tuple[int, Any]:
        major, minor, patch = self.host.version
        return 200, {
            "build_version": f"v{major}.{minor}.{patch}-fake",
            "version": f"{major}.{minor}.{patch}",
            "pid": os.getpid(),
            "features": ["kvm"],
        }

    def api_vmm_shutdown(self, _: Any) -> tuple[int, Any]:
        self.shutdown_vmm()
        return 200, b""

    def shutdown_vmm(self) -> None:
        """vmm_shutdown: delete the VM, then `vmm:shutdown`; the host exits after answering."""
        if self.exiting:
            return
        self.delete_vm()
        self.exiting = True
        self.host.event("vmm", "shutdown")
        self.host.request_exit(0)

    def delete_vm(self) -> None:
        if self.vm is not None:
            self.stop_vm(event=self.vm.state != "Created")
        self.host.serial_stop()  # a console made by a failed boot goes with the config
        if self.config is not None:
            self.config = None
            self.host.event("vm", "deleted")

    def stop_vm(self, event: bool = True) -> None:
        vm, self.vm = self.vm, None
        if vm is None:
            return
        vm.release()
        self.host.vsock.stop()
        self.host.serial_stop()
        if event:
            self.host.event("vm", "shutdown")

    # --- VM lifecycle ---------------------------------------------------------------------

    def api_vm_create(self, body: Any) -> tuple[int, Any]:
        if self.config is not None:
            raise self.fail("vm.create", "VM is already created")
        if not isinstance(body, dict):
            raise HttpFailure(400, ["Bad Request"])
        self.config = checks.with_defaults(body)  # serde fills in defaults; vm.info shows them
        return 204, None

    def api_vm_boot(self, _: Any) -> tuple[int, Any]:
        if self.vm is not None:
            raise self.fail("vm.boot", "VM is already created")
        self.host.event("vm", "booting")
        if self.config is None:
            raise self.fail("vm.boot", "VM config is missing", kind="not_created")
        self.boot_vm("vm.boot")
        self.host.event("vm", "booted")
        return 204, None

    def boot_vm(self, endpoint: str) -> None:
        """`Vm::new` + `Vm::boot`: validate, create devices (ids, files, sockets), lock disks."""
        assert self.config is not None
        # pre_create_console_devices runs before Vm::new and survives a failed boot.
        try:
            pty = self.host.serial_start(self.config)
        except OSError as exc:
            raise self.fail(endpoint, "Error creating console devices", "Error creating console device",
                            checks.io_error(exc)) from None  # fmt: skip
        try:
            checks.validate_config(self.config)
        except checks.ConfigInvalid as exc:
            raise self.fail(endpoint, "Failed to validate config", *exc.chain, kind=exc.kind) from None
        try:  # Vm::new creates the MemoryManager before any device
            ram = GuestRam.for_config(self.config)
        except RamFailed as exc:
            raise self.fail(endpoint, "Memory manager error", exc.what, checks.io_error(exc.error)) from None
        candidate = copy.deepcopy(self.config)
        counter = self.assign_ids(candidate)
        taps: dict[str, list[int]] = {}
        try:
            held = checks.create_devices(candidate, taps)
        except checks.DeviceError as exc:
            if ram is not None:
                ram.close()
            raise self.fail(endpoint, *exc.chain) from None
        # Ids (and autodetected image types) are written back into the stored config.
        tpm = (candidate.get("tpm") or {}).get("socket")
        tpm_conn = None
        if tpm:
            try:
                tpm_conn = _connect_tpm(tpm)
            except OSError as exc:
                for fd in held:
                    os.close(fd)
                if ram is not None:
                    ram.close()
                raise self.fail(endpoint, "Error from device manager", "Failed to create TPM device",
                                f"Failed while initializing tpm emulator: {checks.io_error(exc)}") from None
        try:
            self.host.vsock.start(candidate, self.guest_shutdown)
        except OSError as exc:
            for fd in held:
                os.close(fd)
            if tpm_conn is not None:
                tpm_conn.close()
            raise self.fail(endpoint, *VSOCK_BIND_FAILED, checks.io_error(exc)) from None
        self.config.clear()
        self.config.update(candidate)
        self.id_counter = counter
        vm = Vm(self.config, ram)
        vm.lock_fds.extend(held)  # the taps stay open while the VM exists, or until ejected
        vm.tap_fds = taps
        vm.tpm_conn = tpm_conn
        if pty is not None:
            self.config.setdefault("serial", {})["file"] = pty
        self.allocate_bdfs(vm)
        try:
            self.lock_disks(vm)
        except LockFailed as exc:
            # Vm::boot failed after Vm::new: CH keeps the Vm object (state Created) anyway.
            self.vm = vm
            raise self.fail(
                endpoint,
                "Error locking disk images: Another instance likely holds a lock",
                "Cannot lock images of all block devices",
                f"Failed to get {exc.access} lock for disk image: {exc.path}",
                "The file is already locked",
            ) from None
        vm.state = "Running"
        self.vm = vm
        vm.vcpus.resize(int((self.config.get("cpus") or {}).get("boot_vcpus") or 1))
        self.host.serial_boot()
        self.schedule_activation(vm)
        self.schedule_dirtying(vm)

    def assign_ids(self, config: dict[str, Any]) -> int:
        """Generated ids from one counter shared by all device types, skipping used ids."""
        used = checks.user_ids(config)
        counter = self.id_counter
        for key, prefix in CREATION_ORDER:
            items = config.get(key)
            if items is None:
                continue
            for item in items if isinstance(items, list) else [items]:
                if isinstance(item, dict) and not item.get("id"):
                    while f"{prefix}{counter}" in used:
                        counter += 1
                    item["id"] = f"{prefix}{counter}"
                    used.add(item["id"])
                    counter += 1
        return counter

    def allocate_bdfs(self, vm: Vm) -> None:
        self.next_slot = 1
        for dev_id in checks.device_ids(vm.config):
            vm.bdfs[dev_id] = f"0000:00:{self.next_slot:02x}.0"
            self.next_slot += 1

    def lock_disks(self, vm: Vm) -> None:
        for disk in vm.config.get("disks") or []:
            if disk.get("vhost_user") or not disk.get("path"):
                continue
            readonly = bool(disk.get("readonly"))
            try:
                vm.lock_fds.append(_lock_image(disk["path"], readonly))
                vm.disk_locks[disk.get("id") or disk["path"]] = vm.lock_fds[-1]
            except OSError:
                vm.release()
                raise LockFailed(disk["path"], "Read" if readonly else "Write") from None

    def schedule_activation(self, vm: Vm) -> None:
        """The guest drives its virtio devices shortly after boot: `virtio-device:activated`;
        the vsock device only with its driver (FAKE_CH_VSOCK_DRIVER), and then an init starts
        qemu-ga (FAKE_CH_GUEST_AGENT)."""

        def activate() -> None:
            if self.vm is vm and vm.state != "Created":
                vsock = (vm.config.get("vsock") or {}).get("id")
                for dev_id in checks.virtio_ids(vm.config):
                    if dev_id == vsock and not self.host.vsock_driver:
                        continue
                    self.host.event("virtio-device", "activated", {"id": dev_id})
                if vsock and self.host.vsock_driver:
                    self.host.vsock.activate()
                    if self.host.guest_agent_port is not None:
                        self.host.vsock.start_agent(self.host.guest_agent_port)

        self.host.schedule(0.05, activate)

    def schedule_dirtying(self, vm: Vm) -> None:
        """`FAKE_CH_DIRTY_PAGES`: the running guest writes that many random RAM pages a second."""
        rate = self.host.dirty_pages
        if rate <= 0:
            return

        def write() -> None:
            if self.vm is not vm or vm.ram is None:
                return  # the VM stopped or rebooted (a reboot schedules its own)
            if vm.state == "Running":
                vm.ram.dirty(max(int(rate / 10), 1))
            self.host.schedule(0.1, write)

        self.host.schedule(0.1, write)

    def api_vm_info(self, _: Any) -> tuple[int, Any]:
        if self.config is None:
            raise self.fail("vm.info", "VM is not created", kind="not_created")
        info: dict[str, Any] = {"config": self.config, "state": self.state}
        if self.host.version[0] < 53:
            info = checks.with_nulls(info)
        memory = self.config.get("memory") or {}
        base = memory.get("size", 512 << 20)  # total_size() - hotplugged_size() (vmm/src/lib.rs vm_info)
        info["memory_actual_size"] = base
        if self.vm is not None:
            balloon = (self.config.get("balloon") or {}).get("size", 0)
            info["memory_actual_size"] = max(base - balloon, 0) + self.vm.virtio_mem_plugged
            info["device_tree"] = {
                dev_id: {"id": dev_id, "resources": [], "children": [], "pci_bdf": bdf}
                for dev_id, bdf in self.vm.bdfs.items()
            }
        return 200, info

    def api_vm_counters(self, _: Any) -> tuple[int, Any]:
        vm = self.vm
        if vm is None:
            raise self.fail("vm.counters", "VM is not running")
        # Monotonic, growing with uptime, so stats consumers see movement.
        tick = int((time.monotonic() - vm.booted_at) * 1000) + 1
        counters: dict[str, dict[str, int]] = {}
        for disk in vm.config.get("disks") or []:
            counters[disk["id"]] = {k: (tick * 512 if "bytes" in k else tick) for k in BLOCK_COUNTERS}
        for net in vm.config.get("net") or []:
            counters[net["id"]] = {k: (tick * 64 if "bytes" in k else tick) for k in NET_COUNTERS}
        return 200, counters

    def api_vm_pause(self, _: Any) -> tuple[int, Any]:
        vm = self.vm
        if vm is None:
            raise self.fail("vm.pause", "VM is not running")
        if vm.state not in ("Running", "Created"):
            raise self.fail(
                "vm.pause", "Cannot pause VM", "Failed to pause migratable component",
                f"Invalid transition: InvalidStateTransition({vm.state}, Paused)",
            )  # fmt: skip
        self.host.event("vm", "pausing")
        vm.state = "Paused"
        self.host.vsock.set_paused(True)
        self.host.event("vm", "paused")
        return 204, None

    def api_vm_resume(self, _: Any) -> tuple[int, Any]:
        vm = self.vm
        if vm is None:
            raise self.fail("vm.resume", "VM is not running")
        if vm.state != "Paused":
            raise self.fail(
                "vm.resume", "Cannot resume VM", "Failed to resume migratable component",
                f"Invalid transition: InvalidStateTransition({vm.state}, Running)",
            )  # fmt: skip
        self.host.event("vm", "resuming")
        vm.state = "Running"
        self.host.vsock.set_paused(False)
        self.host.event("vm", "resumed")
        pending, vm.pending_guest = vm.pending_guest, []
        for action in pending:
            self.host.schedule(0.0, lambda a=action: self.guest(a))
        return 204, None

    def api_vm_shutdown(self, _: Any) -> tuple[int, Any]:
        if self.vm is None:
            raise self.fail("vm.shutdown", "VM is not running")
        self.stop_vm()
        return 204, None

    def api_vm_reboot(self, _: Any) -> tuple[int, Any]:
        self.host.event("vm", "rebooting")
        if self.vm is None:
            raise self.fail("vm.reboot", "VM is not created", kind="not_created")
        self.reboot_vm("vm.reboot")
        return 204, None

    def reboot_vm(self, endpoint: str) -> None:
        """Drop the Vm (locks, console) and build a new one from the config; ends Running."""
        vm, self.vm = self.vm, None
        assert vm is not None
        vm.release()
        self.host.vsock.stop()
        self.host.serial_stop()
        self.boot_vm(endpoint)
        self.host.event("vm", "rebooted")

    def api_vm_power_button(self, _: Any) -> tuple[int, Any]:
        if self.vm is None:
            raise self.fail("vm.power-button", "VM is not running")
        delay = self.host.acpi_delay
        if delay is None:
            self.host.log("INFO", "power button pressed: the guest ignores ACPI (FAKE_CH_ACPI_DELAY=never)")
        else:
            vm = self.vm
            self.host.schedule(delay, lambda: self.guest("poweroff") if self.vm is vm else None)
        return 204, None

    def api_vm_nmi(self, _: Any) -> tuple[int, Any]:
        if self.vm is None:
            raise self.fail("vm.nmi", "VM is not running")
        return 204, None

    def api_vm_delete(self, _: Any) -> tuple[int, Any]:
        self.delete_vm()
        return 204, None

    # --- guest-initiated actions ----------------------------------------------------------

    def guest_shutdown(self, mode: str) -> None:
        """qemu-ga's `guest-shutdown`: the guest powers off (`powerdown`, `halt`) or reboots."""
        self.host.schedule(0.0, lambda: self.guest("reboot" if mode == "reboot" else "poweroff"))

    def guest(self, action: str) -> None:
        """A guest action: "poweroff", "reboot", or "panic"/"crash_loaded" (pvpanic),
        "emulation-failure" (the vCPU fails), or "eject:<id>"; deferred while paused."""
        vm = self.vm
        if vm is None or vm.state == "Created":
            self.host.log("WARN", f"guest {action} ignored: no VM is running")
            return
        if vm.state == "Paused":
            self.host.log("INFO", f"guest {action} deferred: the VM is paused")
            vm.pending_guest.append(action)
            return
        if action.startswith("eject:"):
            self.guest_ejects(vm, action[len("eject:"):])
        elif action == "poweroff":
            self.stop_vm()
            if not self.host.no_shutdown:
                self.shutdown_vmm()
        elif action == "emulation-failure":
            # KVM_RUN fails (KVM_EXIT_INTERNAL_ERROR): the vCPU thread logs it and writes exit_evt,
            # whose handler runs vmm_shutdown as for a poweroff, but whatever --no-shutdown says
            # (cloud-hypervisor vmm/src/cpu.rs, vmm/src/lib.rs EpollDispatch::Exit@v53; the same
            # text as the real v53.0 with the tiny guest's `~e`, without a backtrace).
            self.host.log("ERROR", "VCPU generated error: VcpuRun(Failed to run vcpu\n\nCaused by:\n"
                                   "    Unexpected exit reason on vcpu run: InternalError)")
            self.host.log("INFO", "VM exit event")
            self.shutdown_vmm()
        elif action == "reboot":
            self.host.event("vm", "rebooting")
            try:
                self.reboot_vm("vm.reboot")
            except ApiFailure as exc:
                self.host.log("ERROR", f"guest reboot failed: {exc.chain}")
        elif action in ("panic", "crash_loaded"):
            if vm.config.get("pvpanic"):
                self.host.event("guest", "panic", {"event": action})
            else:
                self.host.log("WARN", "guest panicked, but there is no pvpanic device")

    # --- resize and devices ---------------------------------------------------------------

    def api_vm_resize(self, body: Any) -> tuple[int, Any]:
        """`vm_resize` (vmm/src/lib.rs, vm.rs, cpu.rs, memory_manager.rs@v53.0). Without a booted VM
        only the config changes. Booted: vCPUs are added at once and removed when the guest has
        offlined them (another resize meanwhile: 429); virtio-mem memory is requested from the
        guest's driver (`hotplugged_size` in the config), which plugs it after
        FAKE_CH_VIRTIO_MEM_DELAY (never: no driver); ACPI memory grows `size`."""
        if self.config is None:
            raise self.fail("vm.resize", "VM is not created", kind="not_created")
        if not isinstance(body, dict):
            raise HttpFailure(400, ["Bad Request"])
        vcpus, ram, balloon = body.get("desired_vcpus"), body.get("desired_ram"), body.get("desired_balloon")
        cpus = self.config.setdefault("cpus", {"boot_vcpus": 1, "max_vcpus": 1})
        memory = self.config.setdefault("memory", {"size": 512 << 20})
        vm = self.vm
        if vm is None:  # the stored config only (vmm/src/lib.rs vm_resize, VmOwnership::None)
            if vcpus is not None:
                cpus["boot_vcpus"] = vcpus
            if ram is not None:
                memory["size"] = ram
            if balloon is not None and self.config.get("balloon") is not None:
                self.config["balloon"]["size"] = balloon
            return 204, None
        self.host.event("vm", "resizing")
        if vcpus is not None:
            # CpuManager::resize compares with the vCPUs present, which include those the
            # guest has not offlined yet; the config takes the desired count either way.
            present = cpus.get("boot_vcpus", 1) if time.monotonic() >= vm.vcpu_removal_until else vm.vcpus_present
            if vcpus != present:
                if vcpus < 1:
                    raise self.fail("vm.resize", "Error from CPU manager", "Requested zero vCPUs")
                if time.monotonic() < vm.vcpu_removal_until:
                    raise HttpFailure(429, ["Too Many Requests"])
                if vcpus > cpus.get("max_vcpus", 1):
                    raise self.fail("vm.resize", "Error from CPU manager", "Requested vCPUs exceed maximum")
                if vcpus < present:
                    # The guest removes vCPUs asynchronously; meanwhile another resize gets 429,
                    # and the removed vCPUs' threads run on until it is done (for ever: never).
                    delay = self.host.vcpu_removal_delay
                    if delay is None:
                        self.host.log("INFO", f"vCPUs {vcpus}..{present - 1}: removal requested; the guest never "
                                      "offlines them (FAKE_CH_VCPU_REMOVAL_DELAY=never)")
                    vm.vcpu_removal_until = math.inf if delay is None else time.monotonic() + delay
                    vm.vcpus_present = present
                    if delay is not None:
                        self.host.schedule(delay, lambda: vm.vcpus.resize(vcpus) if self.vm is vm else None)
                else:
                    vm.vcpus.resize(vcpus)
            cpus["boot_vcpus"] = vcpus
        if ram is not None:
            self.resize_memory(vm, memory, ram)
        if balloon is not None and self.config.get("balloon") is not None:
            self.config["balloon"]["size"] = balloon
        self.host.event("vm", "resized")
        return 204, None

    def resize_memory(self, vm: Vm, memory: dict[str, Any], ram: int) -> None:
        boot = memory.get("size", 512 << 20)
        if memory.get("hotplug_method") != "VirtioMem":
            if ram > boot and memory.get("hotplug_size"):
                memory["size"] = ram  # ACPI: a new DIMM region, the guest onlines it
            return
        if ram < boot:
            raise self.fail("vm.resize", "Memory manager error",
                            f"Invalid resize request: desired_size = {ram} below boot size = {boot}")
        requested = ram - boot
        current = memory.get("hotplugged_size") or 0
        region = memory.get("hotplug_size") or 0
        why = ""
        if requested == current:
            why = f"new size 0x{requested:x} and requested_size are identical"
        elif requested > region:
            why = f"new size 0x{requested:x} is bigger than region_size 0x{region:x}"
        elif requested % (2 << 20):
            why = f"new size 0x{requested:x} is not aligned on block_size 0x{2 << 20:x}"
        if why:
            raise self.fail("vm.resize", "Memory manager error", "Failed to virtio-mem resize",
                            "Resize invalid argument",
                            f"Failed to update virtio configuration: ResizeError({why})")  # fmt: skip
        if requested:
            memory["hotplugged_size"] = requested
        else:
            memory.pop("hotplugged_size", None)
        delay = self.host.virtio_mem_delay
        if delay is not None:
            def plug() -> None:
                if self.vm is vm:
                    vm.virtio_mem_plugged = requested
            self.host.schedule(delay, plug)

    def api_vm_resize_zone(self, body: Any) -> tuple[int, Any]:
        if self.config is None:
            raise self.fail("vm.resize-zone", "VM is not created", kind="not_created")
        zones = (self.config.get("memory") or {}).get("zones") or []
        for zone in zones:
            if isinstance(body, dict) and zone.get("id") == body.get("id"):
                zone["size"] = body.get("desired_ram", zone.get("size"))
                return 204, None
        raise self.fail("vm.resize-zone", "Failed resizing a memory zone")

    def api_vm_resize_disk(self, body: Any) -> tuple[int, Any]:
        """`vm_resize_disk` (v50+): only a booted VM resizes a disk. As the real v53 does
        (virtio-devices/src/block.rs `Block::resize`, block/src/formats/raw/mod.rs): the size
        must be a multiple of 512; a raw image file is set to it (grown or shrunk), a block
        device must already have it; then the guest is told. qcow2 images are not resized here
        (the real VMM grows one without a backing file)."""
        if self.config is None:
            raise self.fail("vm.resize-disk", "VM is not created", kind="not_created")
        if self.vm is None:
            raise self.fail("vm.resize-disk", "Failed resizing a disk image")
        disk_id = body.get("id") if isinstance(body, dict) else None
        disk = next((d for d in self.vm.config.get("disks") or [] if d.get("id") == disk_id), None)
        if disk is None:
            # DeviceManager::resize_disk (vmm/src/device_manager.rs@v53.0)
            raise self.fail("vm.resize-disk", "Error from device manager",
                            f"Failed to find device corresponding to the given identifier: {disk_id}",
                            kind="unknown_device")  # fmt: skip
        size = body.get("desired_size")
        if not isinstance(size, int) or size < 0:
            raise HttpFailure(400, ["Failed to deserialize JSON", f"invalid value: desired_size {size!r}"])
        resize = ("Error from device manager", "Disk resize error")
        if size % 512:
            raise self.fail("vm.resize-disk", *resize, "Disk image size is not a multiple of 512")
        path = disk.get("path") or ""
        try:
            if _is_block(path):
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    actual = os.lseek(fd, 0, os.SEEK_END)
                finally:
                    os.close(fd)
                if actual != size:
                    raise self.fail("vm.resize-disk", *resize, "Disk resize failed", "I/O error", "Resize failed",
                                    f"Block device size {actual} does not match requested size {size}")
            elif disk.get("image_type", "Raw") in ("Raw", "Unknown"):
                os.truncate(path, size)
            else:
                raise self.fail("vm.resize-disk", *resize,
                                "the simulated VMM resizes raw images and block devices only")
        except OSError as exc:
            raise self.fail("vm.resize-disk", *resize, "Disk resize failed", "I/O error", "Resize failed",
                            f"{exc.strerror} (os error {exc.errno})") from None
        self.host.log("INFO", f"{disk_id}: resized to {size} bytes; the guest is told (virtio config change)")
        return 204, None

    def add_device(self, endpoint: str, body: Any) -> tuple[int, Any]:
        if self.config is None:
            raise self.fail(endpoint, "VM is not created", kind="not_created")
        if not isinstance(body, dict):
            raise HttpFailure(400, ["Bad Request"])
        key, is_list, prefix = ADDERS[endpoint]
        candidate = copy.deepcopy(self.config)
        body = checks.with_defaults({key: [body]})[key][0] if is_list else body
        if is_list:
            candidate.setdefault(key, []).append(body)
        else:
            candidate[key] = body
        # vm_add_*: validate a clone of the config at once (unlike vm.create).
        try:
            checks.validate_config(candidate, boot=False)
        except checks.ConfigInvalid as exc:
            raise self.fail(endpoint, "Failed to validate config", *exc.chain, kind=exc.kind) from None
        if self.vm is None:
            self.config.clear()
            self.config.update(candidate)
            return 204, None  # cold add: the device is created at boot
        dev = candidate[key][-1] if is_list else candidate[key]
        if not dev.get("id"):
            used = checks.user_ids(candidate) | set(self.vm.bdfs)
            while f"{prefix}{self.id_counter}" in used:
                self.id_counter += 1
            dev["id"] = f"{prefix}{self.id_counter}"
            self.id_counter += 1
        taps: dict[str, list[int]] = {}
        try:
            held = checks.create_devices({key: [dev] if is_list else dev, "memory": candidate.get("memory")}, taps)
        except checks.DeviceError as exc:
            raise self.fail(endpoint, *exc.chain) from None
        self.vm.lock_fds.extend(held)  # a hot-added NIC's taps, closed with the VM or when ejected
        self.vm.tap_fds.update(taps)
        if key == "disks" and dev.get("path") and not dev.get("vhost_user"):
            try:
                self.vm.lock_fds.append(_lock_image(dev["path"], bool(dev.get("readonly"))))
                self.vm.disk_locks[dev["id"]] = self.vm.lock_fds[-1]
            except OSError:
                raise self.fail(endpoint, "Error from device manager",
                                "Cannot lock images of all block devices") from None
        self.config.clear()
        self.config.update(candidate)
        bdf = f"0000:00:{self.next_slot:02x}.0"
        self.next_slot += 1
        self.vm.bdfs[dev["id"]] = bdf
        vm = self.vm
        self.host.schedule(
            0.02, lambda: self.host.event("virtio-device", "activated", {"id": dev["id"]}) if self.vm is vm else None
        )
        return 200, {"id": dev["id"], "bdf": bdf}

    def api_vm_remove_device(self, body: Any) -> tuple[int, Any]:
        """`vm_remove_device` (vmm/src/lib.rs, device_manager.rs@v53.0): on a booted VM the device
        leaves the config at once and the guest is told (ACPI PCID); it stays in the device tree,
        its image locked, until the guest ejects it (B0EJ), and only then `vm:device-removed`.
        A guest that never ejects (FAKE_CH_EJECT_DELAY=never) keeps it forever; one that ejects at
        once (FAKE_CH_EJECT_DELAY=0) does so before the answer, its event written first."""
        if not isinstance(body, dict) or not isinstance(body.get("id"), str):
            raise HttpFailure(400, ["Bad Request"])
        dev_id = body["id"]
        if self.config is None:
            raise self.fail("vm.remove-device", "VM is not created", kind="not_created")
        vm = self.vm
        if vm is None:
            if not checks.remove_from_config(self.config, dev_id):
                raise self.fail("vm.remove-device", f'No device with id "{dev_id}" to remove', kind="unknown_device")
            return 204, None
        if dev_id not in vm.bdfs or not checks.remove_from_config(self.config, dev_id):
            raise self.fail("vm.remove-device", "Error from device manager",
                            f"Failed to find device corresponding to the given identifier: {dev_id}",
                            kind="unknown_device")  # fmt: skip
        delay = self.host.eject_delay
        if delay is None:
            self.host.log("INFO",
                          f"{dev_id}: hot-unplug requested; the guest never ejects it (FAKE_CH_EJECT_DELAY=never)")
        elif delay == 0:  # a guest that ejects at once: the real VMM's vCPU thread may say
            self.guest_ejects(vm, dev_id)  # vm:device-removed before the API thread answers
        else:
            self.host.schedule(delay, lambda: self.guest_ejects(vm, dev_id))
        return 204, None

    def guest_ejects(self, vm: Vm, dev_id: str) -> None:
        """The guest wrote the device's slot to B0EJ: `eject_device`, then `vm:device-removed`."""
        if self.vm is not vm or dev_id not in vm.bdfs:
            return  # the VM stopped or was rebuilt from its config (which no longer has the device)
        if vm.state == "Paused":
            vm.pending_guest.append(f"eject:{dev_id}")
            return
        bdf = vm.bdfs.pop(dev_id)
        lock_fd = vm.disk_locks.pop(dev_id, None)
        # a NIC's taps are closed as its device goes, as the real VMM does (the same tap can be
        # added again at once; kept open, the next TUNSETIFF would fail with EBUSY)
        for fd in ([lock_fd] if lock_fd is not None else []) + vm.tap_fds.pop(dev_id, []):
            vm.lock_fds.remove(fd)
            os.close(fd)
        self.host.event("vm", "device-removed", {"id": dev_id, "bdf": bdf})

    # --- snapshot, restore, migration -----------------------------------------------------

    def api_vm_snapshot(self, body: Any) -> tuple[int, Any]:
        if self.vm is None:
            raise self.fail("vm.snapshot", "VM is not running")
        if self.vm.state != "Paused":
            raise self.fail(
                "vm.snapshot", "Cannot snapshot VM", "Failed to snapshot migratable component",
                "Trying to snapshot while VM is running",
            )  # fmt: skip
        url = body.get("destination_url", "") if isinstance(body, dict) else ""
        directory = checks.file_url_dir(url)
        if directory is None or not os.path.isdir(directory):
            raise self.fail("vm.snapshot", "Cannot snapshot VM", "Failed to snapshot migratable component",
                            f"Invalid destination URL {url!r}")  # fmt: skip
        self.host.event("vm", "snapshotting")
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump(self.config, f)
        with open(os.path.join(directory, "state.json"), "w") as f:
            json.dump({"fake": True, "state": "Paused"}, f)
        with open(os.path.join(directory, "memory-ranges"), "wb") as f:
            f.write(b"\0" * 64)
        self.host.event("vm", "snapshotted")
        return 204, None

    def api_vm_restore(self, body: Any) -> tuple[int, Any]:
        if self.config is not None or self.vm is not None:
            raise self.fail("vm.restore", "VM is already created")
        url = body.get("source_url", "") if isinstance(body, dict) else ""
        directory = checks.file_url_dir(url)
        if directory is None:  # never a path relative to wherever the VMM runs
            raise self.fail("vm.restore", "Cannot restore VM", f"Invalid source URL {url!r}")
        # The chains of the real v53.0 (vmm/src/vm.rs, migration.rs): the directory is checked by
        # the "send" helper, hence its wording.
        if not os.path.isdir(directory):
            raise self.fail("vm.restore", "Cannot restore VM", "Failed to send migratable component snapshot",
                            f'Destination is not a directory: "{directory}"')
        config_file = os.path.join(directory, "config.json")
        try:
            with open(config_file) as f:
                config = json.load(f)
        except OSError:
            raise self.fail("vm.restore", "Cannot restore VM", "Failed to receive migratable component snapshot",
                            f'Error opening VM config snapshot file "{config_file}"') from None
        except ValueError as exc:
            raise self.fail("vm.restore", "Cannot restore VM", f"Could not read the snapshot: {exc}") from None
        self.host.event("vm", "restoring")
        self.config = config
        self.boot_vm("vm.restore")
        assert self.vm is not None
        self.vm.state = "Running" if body.get("resume") else "Paused"
        self.host.event("vm", "restored")
        return 204, None

    def api_vm_send_migration(self, body: Any) -> tuple[int, Any]:
        return self.migrations.send(body)

    def api_vm_receive_migration(self, body: Any) -> Any:
        return self.migrations.receive(body)


def _is_block(path: str) -> bool:
    import stat

    try:
        return stat.S_ISBLK(os.stat(path).st_mode)
    except OSError:
        return False


def _connect_tpm(path: str) -> Any:
    """What Cloud Hypervisor's TPM emulator does with swtpm's control socket when the VM boots
    (tpm/src/emulator.rs@v53.0 `Emulator::new`, then the device's reset): connect, read the
    capabilities, and CMD_INIT (the TPM loads its state, or manufactures a new one). The data
    channel (CMD_SET_DATAFD) is left out: no guest sends TPM commands here."""
    import socket

    if not os.path.exists(path):
        raise FileNotFoundError(2, f"The input TPM Socket path: {path!r} does not exist")
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(5.0)
    try:
        conn.connect(path)
        conn.sendall(struct.pack(">I", 1))  # CMD_GET_CAPABILITY
        if len(conn.recv(8)) != 8:
            raise OSError(71, "no capabilities from the TPM emulator")
        conn.sendall(struct.pack(">II", 2, 0))  # CMD_INIT, flags 0
        result = conn.recv(4)
        if len(result) != 4 or struct.unpack(">I", result)[0] != 0:
            raise OSError(71, f"CMD_INIT failed ({result.hex()})")
    except OSError:
        conn.close()
        raise
    return conn
