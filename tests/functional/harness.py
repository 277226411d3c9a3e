"""A virt-handler stand-in around one real ch-launcher process on the simulated or the real VMM.

`Harness` owns an asyncio loop (the tests are plain functions), a short temporary root (unix
socket paths are limited to 107 bytes), the Notify recorder, the Cmd client and the launcher
process; `close()` stops all of them and kills every process the launcher started, so a failing
test leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import re
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tests import real_vmm
from tests.builders import (
    Option,
    apply,
    new_vmi,
    with_cloud_init,
    with_container_disk,
    with_cpu,
    with_devices,
    with_empty_disk,
    with_firmware_uuid,
    with_grace_period,
    with_hypervisor,
    with_memory,
    with_memory_request,
    with_phase,
    with_spec,
    with_uid,
)
from tests.contract.harness import SIMULATED_GUEST_SIGNALS
from tests.framework import (
    FAKE_CH,
    CmdClient,
    LauncherLayout,
    LauncherProcess,
    NotifyRecorder,
    container_disk_images,
    fake_firmware,
)
from tests.guest.console import PCI_EJECT_IGNORED, POWER_BUTTON_IGNORED, READY, GuestConsole

if TYPE_CHECKING:
    from tests.functional.pod_sandbox import PodSandbox

T = TypeVar("T")

FIRMWARE_UUID = "5d307ca9-b3ef-428c-8861-06e72d69f223"


def make_vmi(*options: Option, name: str = "testvmi", uid: str | None = None, grace: int | None = 30,
             **spec_extra: Any) -> dict[str, Any]:
    """A small VMI the translator accepts: a containerDisk, an emptyDisk, cloud-init, no NICs, then
    `options`; `spec_extra` replaces spec fields (`devices` merges into the devices)."""
    vmi = new_vmi(
        name, with_uid(uid or str(uuid.uuid4())), with_hypervisor(),
        with_cpu(cores=1), with_memory("128Mi"), with_memory_request("128Mi"), with_firmware_uuid(FIRMWARE_UUID),
        with_devices(autoattachPodInterface=False),
        with_container_disk("registry:5000/cirros:devel"), with_empty_disk("scratch", "64Mi"), with_cloud_init(),
        with_phase("Scheduled"),
    )
    if grace is not None:
        apply(vmi, with_grace_period(grace))
    return apply(vmi, *options, with_devices(**spec_extra.pop("devices", {})), with_spec(**spec_extra))


@dataclass(frozen=True)
class RealVmm:
    """A real cloud-hypervisor and a guest for it (tests/real_vmm.py): the binary is `CH_BINARY`
    or ../shared/vmm/cloud-hypervisor; the launcher's `hypervisor-fw` is `CH_FIRMWARE` (or
    `CH_FIRMWARE_DIR`'s hypervisor-fw and CLOUDHV.fd) or the tiny guest; the first containerDisk
    is `CH_DEMO_IMAGE` or a blank raw image (the tiny guest reads no disk). `tiny_guest`: the
    story drives the tiny guest's console, so it always runs the tiny guest."""

    binary: str
    firmware: dict[str, Path]  # file name in the launcher's firmware dir -> source file
    image: Path | None
    tiny_guest: bool

    @classmethod
    def from_environment(cls, *, tiny_guest: bool = False) -> RealVmm | str:
        """The real VMM, or why it cannot be used (for a skip reason)."""
        reason = real_vmm.unavailable(tiny_guest=tiny_guest)
        if reason:
            return reason
        firmware_dir = os.environ.get("CH_FIRMWARE_DIR", "")
        own = not tiny_guest and (os.environ.get("CH_FIRMWARE") or firmware_dir)
        if own and not os.environ.get("CH_FIRMWARE"):
            found = {n: Path(firmware_dir) / n for n in ("hypervisor-fw", "CLOUDHV.fd")
                     if (Path(firmware_dir) / n).is_file()}
            if "hypervisor-fw" not in found:
                return f"no {firmware_dir}/hypervisor-fw (CH_FIRMWARE_DIR)"
        else:
            found = {"hypervisor-fw": real_vmm.firmware_file(tiny_guest=tiny_guest)}
        image = os.environ.get("CH_DEMO_IMAGE", "") if own else ""
        if image and not os.path.isfile(image):
            return f"CH_DEMO_IMAGE={image} is not a file"
        return cls(real_vmm.binary(), found, Path(image) if image else None, not own)


# The endpoint -> the name cloud-hypervisor logs it under ("API request event: VmCreate", vmm/src/api/mod.rs@v53).
_API_EVENT = re.compile(r"API request event: (\w+)")


def _api_event_name(endpoint: str) -> str:
    if endpoint == "vm.add-disk":
        return "AddDisk"
    prefix, _, action = endpoint.partition(".")
    return prefix.capitalize() + "".join(part.capitalize() for part in action.split("-"))


class Harness:
    """One launcher, one VMI, and virt-handler's two sides.

    `real`: the real cloud-hypervisor (else the simulated one). `ignores_acpi`: a guest that
    ignores the power button (FAKE_CH_ACPI_DELAY=never; the tiny guest's `ignore-acpi` command
    once it runs). `ignores_ejects`: a guest that never ejects what is hot-unplugged, PCI devices
    or vCPUs (FAKE_CH_EJECT_DELAY and FAKE_CH_VCPU_REMOVAL_DELAY never; the tiny guest's
    `ignore-eject`). Guest actions, on either VMM: `guest_does()`."""

    def __init__(self, *, vmi: dict[str, Any] | None = None, env: dict[str, str] | None = None,
                 grace_period_seconds: int = 45, qemu_timeout: str = "60s", notify: bool = True,
                 real: RealVmm | None = None, pod: PodSandbox | None = None, ignores_acpi: bool = False,
                 ignores_ejects: bool = False, runtime_processes: bool | None = None) -> None:
        self.runner = asyncio.Runner()
        self.owns_runner = True  # False: the loop is another Harness's, which closes it
        self.closed = False
        # In a pod sandbox the launcher runs as the compute container (uid 107, its own network
        # namespace): its directories are the pod's, under the sandbox's root.
        self.pod = pod
        self.root = Path(tempfile.mkdtemp(prefix="kc", dir="/tmp")) if pod is None else pod.root / "l"
        self.layout = LauncherLayout(self.root).create()
        self.vmi = vmi or make_vmi()
        self.request_log = self.root / "requests.jsonl"
        self.real = real
        self.ignores_acpi = ignores_acpi
        self.env = dict(os.environ)
        if ignores_acpi:
            self.env["FAKE_CH_ACPI_DELAY"] = "never"
        self.ignores_ejects = ignores_ejects
        if ignores_ejects:
            self.env.update(FAKE_CH_EJECT_DELAY="never", FAKE_CH_VCPU_REMOVAL_DELAY="never")
        self.env.update({"FAKE_CH_REQUEST_LOG": str(self.request_log), **(env or {})})
        self.grace_period_seconds = grace_period_seconds
        self.qemu_timeout = qemu_timeout
        # `--kubevirt-runtime-processes` (docs/process-model.md): None = as the pod mutator decides
        # for this VMI (admission/mutate.py), True/False to choose.
        self.runtime_processes = runtime_processes
        self.recorder = NotifyRecorder(self.layout.notify_socket)
        self.with_notify = notify
        self.launcher: LauncherProcess | None = None
        self.client: CmdClient | None = None
        self.ch_binary = str(FAKE_CH) if real is None else real.binary
        if real is None:
            fake_firmware(self.layout)
            container_disk_images(self.vmi, self.layout, size=16 << 20)
        else:
            for name, source in real.firmware.items():
                shutil.copyfile(source, self.layout.firmware_dir / name)
            container_disk_images(self.vmi, self.layout, size=1 << 20,
                                  image=str(real.image) if real.image else None)
        if pod is not None:
            pod.own(self.root)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.runner.run(coro)

    async def start(self, *, wait_ready: bool = True) -> Harness:
        if self.with_notify:
            await self.recorder.start()
            if self.pod is not None:  # virt-handler's socket, dialled by the pod's user
                self.pod.own(self.layout.notify_socket)
        meta = self.vmi["metadata"]
        self.launcher = LauncherProcess(self.layout, name=meta["name"], namespace=meta["namespace"],
                                        uid=meta["uid"], ch_binary=self.ch_binary, env=self.env,
                                        grace_period_seconds=self.grace_period_seconds,
                                        qemu_timeout=self.qemu_timeout, extra_args=self._launcher_flags(),
                                        wrap=self.pod.command if self.pod is not None else None).start()
        if wait_ready:
            await self.launcher.wait_ready(15.0)
            self.client = CmdClient(self.layout.cmd_socket)
        return self

    def _launcher_flags(self) -> list[str]:
        wanted = self.runtime_processes
        if wanted is None:
            from ch_launcher.convert.runtime import runtime_processes_needed
            from ch_launcher.kubevirt.vmi import parse_vmi

            wanted = runtime_processes_needed(parse_vmi(self.vmi))
        return ["--kubevirt-runtime-processes"] if wanted else []

    async def boot(self) -> None:
        """Start, Sync, and wait for the Running event (then the VMI is Running, as virt-handler
        would record it). With the tiny guest, also until it answers on its console (and, for
        `ignores_acpi`, has been told to ignore the power button; for `ignores_ejects`, to ignore
        hot-unplug requests)."""
        await self.start()
        assert self.client is not None
        await self.client.sync(self.vmi)
        await self.recorder.wait_for_status("Running", timeout=15)
        self.vmi["status"]["phase"] = "Running"
        if self.tiny_guest:
            await self.guest_does("ignore-acpi" if self.ignores_acpi else "hello")
            if self.ignores_ejects:
                await self.guest_does("ignore-eject")

    @property
    def simulated(self) -> bool:
        return self.real is None

    @property
    def tiny_guest(self) -> bool:
        return self.real is not None and self.real.tiny_guest

    @property
    def boot_marker(self) -> bytes:
        """What the guest prints on its console at every boot."""
        return READY if self.tiny_guest else b"fake-guest login: "

    @property
    def console_socket(self) -> Path:
        return self.layout.console_socket(self.vmi["metadata"]["uid"])

    @property
    def serial_log(self) -> Path:
        return self.console_socket.parent / "virt-serial0-log"

    @property
    def vmm_log(self) -> Path:
        return self.layout.private_dir / "ch" / "ch.log"

    async def guest_does(self, action: str) -> None:
        """The guest powers off, reboots, triple-faults, panics (tests/guest/console.py
        COMMANDS; on the simulated VMM: SIMULATED_GUEST_SIGNALS). The tiny guest's command goes
        through the launcher's console socket, displacing any other console client."""
        if self.simulated:
            self.signal_vmm(SIMULATED_GUEST_SIGNALS[action])
            return

        def command() -> None:
            with GuestConsole(str(self.console_socket)) as guest:
                guest.hello()
                guest.command(action)

        await asyncio.to_thread(command)

    async def wait_for_ignored_power_buttons(self, count: int, timeout: float = 10.0) -> None:
        """Until the guest has ignored `count` power-button presses: the tiny guest says so on
        its console (hence in the serial log), the simulated VMM in its log."""
        path, line = ((self.serial_log, POWER_BUTTON_IGNORED) if self.tiny_guest else
                      (self.vmm_log, b"power button pressed: the guest ignores ACPI"))
        await wait_for_file(path, lambda text: text.count(line) >= count, timeout,
                            f"{count} ignored power-button presses")

    async def wait_for_ignored_eject(self, what: bytes = PCI_EJECT_IGNORED, count: int = 1,
                                     timeout: float = 10.0) -> None:
        """Until an `ignores_ejects` guest has been asked to eject `count` devices and ignored it:
        the tiny guest says so on its console (PCI_EJECT_IGNORED, CPU_EJECT_IGNORED), the
        simulated VMM in its log."""
        if self.tiny_guest:
            path, line = self.serial_log, what
        else:
            path, line = self.vmm_log, (b"the guest never ejects it" if what == PCI_EJECT_IGNORED
                                        else b"the guest never offlines them")
        await wait_for_file(path, lambda text: text.count(line) >= count, timeout,
                            f"{count} ignored hot-unplug requests")

    def requests(self, endpoint: str | None = None) -> list[dict[str, Any]]:
        """The VMM's requests, optionally only those to `endpoint`: the simulated VMM's
        FAKE_CH_REQUEST_LOG (with bodies); the real VMM's log lines `API request event: X` (no
        bodies, and only the current VMM's: cloud-hypervisor truncates its log at start)."""
        if self.real is not None:
            text = self.vmm_log.read_text(errors="replace") if self.vmm_log.exists() else ""
            names = _API_EVENT.findall(text)
            wanted = None if endpoint is None else _api_event_name(endpoint)
            return [{"event": n} for n in names if wanted is None or n == wanted]
        if not self.request_log.exists():
            return []
        entries = [json.loads(line) for line in self.request_log.read_text().splitlines() if line.strip()]
        return [e for e in entries if endpoint is None or e.get("path", "").endswith("/" + endpoint)]

    def vmm_pid(self) -> int:
        assert self.launcher is not None
        children = self.launcher.children()
        assert children, f"the launcher has no VMM child\n{self.launcher.log_text()}"
        return children[0]

    def signal_vmm(self, sig: int) -> int:
        pid = self.vmm_pid()
        os.kill(pid, sig)
        return pid

    def vmi_copy(self) -> dict[str, Any]:
        return copy.deepcopy(self.vmi)

    def log_text(self) -> str:
        return self.launcher.log_text() if self.launcher is not None else ""

    def close(self) -> None:
        """Stop the launcher and its VMM, remove the directories. Idempotent (a story may close
        a Harness early, its fixture closes it again)."""
        if self.closed:
            return
        self.closed = True
        try:
            if self.client is not None:
                self.run(self.client.close())
            if self.launcher is not None:
                self.launcher.kill()
            self.run(self.recorder.stop())
        finally:
            if self.owns_runner:
                self.runner.close()
            shutil.rmtree(self.root, ignore_errors=True)


async def wait_for_file(path: Path, condition: Callable[[bytes], bool], timeout: float, what: str) -> bytes:
    """The file's content once `condition` holds for it; AssertionError after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        text = path.read_bytes() if path.exists() else b""
        if condition(text):
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} in {path} within {timeout} s; it ends with {text[-300:]!r}")
        await asyncio.sleep(0.02)


def kill_quietly(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
