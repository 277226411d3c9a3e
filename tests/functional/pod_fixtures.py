"""Fixtures for launcher stories in a pod sandbox, on the simulated and on the real VMM.

`pod` is a fresh `PodSandbox`; `vmm_kind` is "simulated" or "real" (parametrized; the real one
is the binary at `CH_BINARY` or `../shared/vmm/cloud-hypervisor`, with the tiny guest of
`tests/guest/` as its `hypervisor-fw`); `launch(vmi, ...)` starts a real ch-launcher for `vmi`
in the pod, Syncs it and waits for Running, and returns the `Harness`; `vmm` is a bare VMM of
that kind run as the pod runs it (`PodVmm`), for the same REST calls against both. conftest.py
makes them available to every functional test.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest

from ch_launcher._proto import kubevirt_cmd_v1_pb2 as cmd_pb2
from tests import real_vmm as tests_real_vmm
from tests.framework import FAKE_CH
from tests.functional.harness import Harness, RealVmm
from tests.functional.pod_probes import api, vm_info
from tests.functional.pod_sandbox import PodSandbox, missing_requirements
from tests.guest.build import guest_payload, missing_tools


def real_binary() -> str | None:
    """The real cloud-hypervisor: `CH_BINARY`, else ../shared/vmm's, else None (tests/real_vmm.py)."""
    return tests_real_vmm.binary() or None


def real_vmm_reason() -> str | None:
    """Why the real VMM cannot run here with the tiny guest (a skip reason), or None."""
    return tests_real_vmm.unavailable(tiny_guest=True)


@pytest.fixture
def pod():
    reason = missing_requirements()
    if reason:
        pytest.skip(reason)
    with PodSandbox() as sandbox:
        yield sandbox


@pytest.fixture(params=["simulated", pytest.param("real", marks=pytest.mark.real_vmm)])
def vmm_kind(request):
    if request.param == "real":
        reason = real_vmm_reason()
        if reason:
            pytest.skip(reason)
    return request.param


def real_vmm(pod: PodSandbox) -> RealVmm:
    """The real binary with the tiny guest as `hypervisor-fw` and a small raw disk image."""
    firmware = pod.root / "fw"
    firmware.mkdir(exist_ok=True)
    shutil.copyfile(guest_payload(), firmware / "hypervisor-fw")
    image = pod.root / "disk.raw"
    with open(image, "wb") as f:
        f.truncate(1 << 20)
    binary = real_binary()
    assert binary is not None
    return RealVmm(binary, {"hypervisor-fw": firmware / "hypervisor-fw"}, image, tiny_guest=True)


@pytest.fixture
def launch(pod, vmm_kind):
    made: list[Harness] = []

    def start(vmi: dict[str, Any], *, network_info: dict | None = None,
              before_boot: Callable[[Harness], None] | None = None,
              domain_attachments: dict[str, str] | None = None, **settings: Any) -> Harness:
        """`settings`: more Harness settings (`ignores_ejects=True`, `env=...`)."""
        harness = Harness(vmi=vmi, pod=pod, real=real_vmm(pod) if vmm_kind == "real" else None, **settings)
        made.append(harness)
        if network_info is not None:
            info = pod.root / "network-info"
            info.write_text(json.dumps(network_info))
            harness.env["CH_NETWORK_INFO"] = str(info)
        pod.vif_cache(harness.layout.private_dir)
        if before_boot is not None:  # makes files as virt-handler or kubelet would (owners included)
            before_boot(harness)
        if domain_attachments is None:
            harness.run(harness.boot())
            return harness
        # virt-handler's Sync options carry each interface's domain attachment ("tap" for a
        # managedTap plugin: pkg/network/domainspec/interface.go DomainAttachmentByInterfaceName)
        options = cmd_pb2.VirtualMachineOptions(interfaceDomainAttachment=domain_attachments)
        harness.run(harness.start())
        assert harness.client is not None
        harness.run(harness.client.sync(harness.vmi, options))
        harness.run(harness.recorder.wait_for_status("Running", timeout=15))
        harness.vmi["status"]["phase"] = "Running"
        return harness

    yield start
    for harness in made:
        harness.close()


def vmm_info(harness: Harness) -> dict[str, Any]:
    """vm.info of the launcher's VMM, read on its socket: what the VMM really holds."""
    return vm_info(harness.layout.private_dir / "ch" / "api.sock")


def vm_config(**extra: Any) -> dict[str, Any]:
    """A small VmConfig booting the tiny guest (any file will do for the simulated VMM)."""
    firmware = FAKE_CH if missing_tools() else guest_payload()
    return {"payload": {"firmware": str(firmware)}, "cpus": {"boot_vcpus": 2, "max_vcpus": 2},
            "memory": {"size": 64 << 20}, "serial": {"mode": "Null"}, "console": {"mode": "Off"}, **extra}


class PodVmm:
    """A VMM process run as the compute container would run it, in `pod`."""

    def __init__(self, pod: PodSandbox, binary: str) -> None:
        self.dir = pod.root / f"vmm{len(list(pod.root.glob('vmm*')))}"
        self.dir.mkdir()
        pod.own(self.dir)
        self.socket = self.dir / "api.sock"
        self.log = self.dir / "out.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                pod.command([binary, "--api-socket", f"path={self.socket}", "--log-file", str(self.dir / "ch.log")]),
                stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
        deadline = time.monotonic() + 15
        while not self._answers():  # bound is not enough: it may not listen yet
            assert self.proc.poll() is None, f"the VMM exited with {self.proc.returncode}: {self.log.read_text()}"
            assert time.monotonic() < deadline, f"no API socket within 15 s: {self.log.read_text()}"
            time.sleep(0.01)

    def _answers(self) -> bool:
        try:
            return self.call("GET", "vmm.ping")[0] == 200
        except OSError:
            return False

    def call(self, method: str, endpoint: str, body=None):
        return api(self.socket, method, endpoint, body)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def vmm(pod, vmm_kind):
    started = PodVmm(pod, real_binary() if vmm_kind == "real" else str(FAKE_CH))  # type: ignore[arg-type]
    yield started
    started.close()
