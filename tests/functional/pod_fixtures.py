"""Fixtures for launcher stories in a pod sandbox, on the simulated and on the real VMM.

`pod` is a fresh `PodSandbox`; `vmm_kind` is "simulated" or "real" (parametrized; the real one
is the binary at `CH_BINARY` or `../shared/vmm/cloud-hypervisor`, with the tiny guest of
`tests/guest/` as its `hypervisor-fw`); `launch(vmi, ...)` starts a real ch-launcher for `vmi`
in the pod, Syncs it and waits for Running, and returns the `Harness`. Import them with
`from tests.functional.pod_fixtures import launch, pod, vmm_kind  # noqa: F401`.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.functional.harness import Harness, RealVmm
from tests.functional.pod_sandbox import PodSandbox, missing_requirements, vm_info
from tests.guest.build import guest_payload, missing_tools

REPO = Path(__file__).resolve().parents[2]
SHARED_CH = REPO.parent / "shared" / "vmm" / "cloud-hypervisor"


def real_binary() -> str | None:
    """The real cloud-hypervisor: `CH_BINARY`, else ../shared/vmm's, else None."""
    binary = os.environ.get("CH_BINARY") or (str(SHARED_CH) if SHARED_CH.exists() else "")
    return binary or None


def real_vmm_reason() -> str | None:
    """Why the real VMM cannot run here (a skip reason), or None."""
    if real_binary() is None:
        return "no real cloud-hypervisor: ../shared/vmm is absent and CH_BINARY is not set"
    if not os.path.exists("/dev/kvm"):
        return "/dev/kvm is absent"
    return missing_tools()


@pytest.fixture
def pod():
    reason = missing_requirements()
    if reason:
        pytest.skip(reason)
    with PodSandbox() as sandbox:
        yield sandbox


@pytest.fixture(params=["simulated", "real"])
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
    return RealVmm(binary, firmware, image)


@pytest.fixture
def launch(pod, vmm_kind):
    made: list[Harness] = []

    def start(vmi: dict[str, Any], *, network_info: dict | None = None,
              before_boot: Callable[[Harness], None] | None = None) -> Harness:
        harness = Harness(vmi=vmi, pod=pod, real=real_vmm(pod) if vmm_kind == "real" else None)
        made.append(harness)
        if network_info is not None:
            info = pod.root / "network-info"
            info.write_text(json.dumps(network_info))
            harness.env["CH_NETWORK_INFO"] = str(info)
        pod.vif_cache(harness.layout.private_dir)
        if before_boot is not None:
            before_boot(harness)
            pod.own(harness.root)
        harness.run(harness.boot())
        return harness

    yield start
    for harness in made:
        harness.close()


def vmm_info(harness: Harness) -> dict[str, Any]:
    """vm.info of the launcher's VMM, read on its socket: what the VMM really holds."""
    return vm_info(harness.layout.private_dir / "ch" / "api.sock")
