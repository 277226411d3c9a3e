"""virt-handler's own KVM runtime against the launcher's processes: `kubevirt-probe -scenario
runtime` (../shared/tools: `AdjustResources` before and after Running, `HandleHousekeeping`
before Running, KubeVirt's code at d923fdb815cd) for a VMI with each feature it acts on, on the
simulated and the real VMM (docs/process-model.md).

It finds what it looks for in every case: the launcher's `virtqemud` child, the VMM as a
`qemu-system*` child of the launcher's parent, and no `kvm-pit` thread to pin. What it then does:

- dedicated CPUs and NUMA passthrough: nothing fails, the story is clean;
- VFIO, realtime, `memLock: Required`: it sets the memlock limit of virtqemud and of the VMM to
  unlimited, which needs CAP_SYS_RESOURCE. virt-handler has it on a node; this sandbox's root has
  not, so here the probe flags exactly those two `prlimit` calls (`operation not permitted`), on
  the VMM it reports and on another process (virtqemud: the launcher's log says its model held),
  and the story is clean where the raise is permitted;
- VFIO on the real VMM: this host has no VFIO at all, so `vm.boot` fails creating the device with
  the VMM's own words (the launcher's device check passes on the host tree it is shown).

How the story is run, and why (facts of KubeVirt's code, not of ours):
- the probe runs from `/`, as virt-handler does: `isolation.GetNspid` opens the relative path
  `proc/<pid>/status` (pkg/virt-handler/isolation/isolation.go), found only from `/`;
- the launcher runs in a PID namespace of its own with its own /proc, as in a pod, where the
  monitor is PID 1: `GetNspid` takes the second pid of the VMM's `NSpid:` line and panics
  (index out of range) for a process that is in no nested PID namespace;
- the launcher runs as root, as under `probe-run.sh`: the probe raises limits only after the Sync
  (virt-handler raises virtqemud's before it, test_process_model.py shows that order), so a
  launcher without CAP_IPC_LOCK would rightly refuse a VMI that locks memory before the raise.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import (
    new_vmi,
    with_container_disk,
    with_devices,
    with_domain,
    with_hypervisor,
    with_memory,
    with_namespace,
)
from tests.conftest import SHARED, require_shared
from tests.functional import kubevirt_runtime as vh
from tests.functional.host_support import BDF, RESOURCE, host_tree
from tests.functional.pod_fixtures import real_binary, real_vmm_reason
from tests.guest.build import guest_payload
from tests.hugepages import surplus_hugepages

pytestmark = pytest.mark.probe
PROBE_RUN = SHARED / "tools" / "probe-run.sh"
FAKE_CH = Path(__file__).resolve().parents[1] / "fakes" / "fake_cloud_hypervisor.py"
UNLIMITED = vh.can_raise_memlock_to_unlimited()
EPERM = re.compile(r"virt-handler AdjustResources \(VMI (not yet Running|Running)\) fails: failed to set process "
                   r"(\d+) memlock rlimit to unlimited: error setting prlimit: operation not permitted")
MODEL = re.compile(r"process model: monitor \d+ -> launcher \d+ -> virtqemud \d+; monitor \d+ -> VMM \d+")
VMM_PID = re.compile(r"VMM pid (\d+): Max locked memory")
KEPT = re.compile(r"launcher log: (\S+)/launcher\.log, kept\)")


def vmi(**domain) -> dict:
    return new_vmi("vmi-probe", with_namespace(None), with_hypervisor(), with_devices(autoattachPodInterface=False),
                   with_container_disk("registry:5000/fedora:devel"), with_memory("128Mi"), with_domain(resources={}),
                   with_devices(**domain.pop("devices", {})), with_domain(**domain))


# feature -> (VMI, whether AdjustResources acts on it). Dedicated CPUs without isolateEmulatorThread:
# the probe's HandleHousekeeping skips that one ("needs the pod's cgroup manager").
FEATURES = {
    "dedicatedCpuPlacement": (vmi(cpu={"cores": 1, "dedicatedCpuPlacement": True}), False),
    "numa.guestMappingPassthrough": (vmi(cpu={"cores": 1, "dedicatedCpuPlacement": True,
                                              "numa": {"guestMappingPassthrough": {}}},
                                         memory={"guest": "64Mi", "hugepages": {"pageSize": "2Mi"}}), False),
    "realtime": (vmi(cpu={"cores": 1, "dedicatedCpuPlacement": True, "realtime": {"mask": "0"}}), True),
    "memLock": (vmi(memory={"guest": "128Mi", "reservedOverhead": {"memLock": "Required"}}), True),
    "gpus": (vmi(devices={"gpus": [{"name": "gpu1", "deviceName": RESOURCE}]}), True),
    "hostDevices": (vmi(devices={"hostDevices": [{"name": "hostdev1", "deviceName": RESOURCE}]}), True),
    "sriov": (vmi(devices={"interfaces": [{"name": "sriov-net", "sriov": {}}]}), True),
}
VFIO = ("gpus", "hostDevices", "sriov")  # a PCI device of the pod (its PCI_RESOURCE_* / network-info)
QEMU_TIMEOUT_NO_BOOT = "10s"  # the Sync fails within a second of the launcher's start, even on a loaded machine


def run_runtime(feature: str, tmp_path: Path, *, real: bool) -> tuple[str, str]:
    """(the probe's output, the launcher's log) of the runtime story for `feature`."""
    require_shared(PROBE_RUN)
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed (Debian package util-linux)")
    body = json.loads(json.dumps(FEATURES[feature][0]))
    launcher = f"{Path(sys.executable).parent / 'ch-launcher'} --kubevirt-runtime-processes"
    if real and feature in VFIO:
        # vm.boot fails (no VFIO here), so the launcher ends only at probe-run.sh's --qemu-timeout
        # (60 s): a later --qemu-timeout (the last one counts) makes that QEMU_TIMEOUT_NO_BOOT
        wrapper = tmp_path / "ch-launcher"
        wrapper.write_text(f'#!/bin/sh\nexec {launcher} "$@" --qemu-timeout {QEMU_TIMEOUT_NO_BOOT}\n')
        wrapper.chmod(0o755)
        launcher = str(wrapper)
    env = {**os.environ, "KEEP": "1",
           "LAUNCHER": f"unshare --pid --fork --kill-child --mount-proc {launcher}",
           "CH_BINARY": str(real_binary()) if real else str(FAKE_CH)}
    if real:
        firmware = tmp_path / "fw"
        firmware.mkdir()
        (firmware / "hypervisor-fw").write_bytes(guest_payload().read_bytes())
        env["FIRMWARE_DIR"] = str(firmware)
    if feature in VFIO:
        tree = host_tree(tmp_path / "host")
        env.update(CH_HOST_ROOT=tree, FAKE_CH_HOST_ROOT=tree, PCI_RESOURCE_NVIDIA_COM_GP102GL_TESLA_P40=BDF)
    if feature == "sriov":
        body["spec"]["networks"] = [{"name": "sriov-net", "multus": {"networkName": "sriov/sriov-network"}}]
        info = tmp_path / "network-info"
        info.write_text(json.dumps({"interfaces": [{"network": "sriov-net", "deviceInfo": {
            "type": "pci", "version": "1.1.0", "pci": {"pci-address": BDF}}}]}))
        env["CH_NETWORK_INFO"] = str(info)
    (tmp_path / "vmi.json").write_text(json.dumps(body))
    with surplus_hugepages(64 if "numa" in feature else 0):  # both VMMs take the pages at boot
        done = subprocess.run([str(PROBE_RUN), "runtime", str(tmp_path / "vmi.json")], cwd="/", env=env,
                              capture_output=True, text=True, timeout=300, check=False)
    output = done.stdout + done.stderr
    kept = KEPT.search(output)
    log = ""
    if kept:
        log_path = Path(kept.group(1)) / "launcher.log"
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        shutil.rmtree(kept.group(1), ignore_errors=True)
    return output, log


def discrepancies(output: str) -> list[str]:
    tail = output.split("discrepancies flagged by chprobe ====", 1)
    return [line[3:] for line in tail[1].splitlines() if line.startswith(" - ")] if len(tail) == 2 else ["no summary"]


def check(feature: str, output: str, log: str, *, boots: bool) -> None:
    report = f"{output[-6000:]}\n--- launcher log ---\n{log[-3000:]}"
    found = discrepancies(output)
    assert MODEL.search(log), report  # the launcher found its tree as virt-handler needs it (pids of its namespace)
    if not boots:
        assert len(found) == 1, report
        assert "Cannot create a VFIO device: failed to open /dev/vfio/vfio container" in found[0], report
        return
    assert "HandleHousekeeping (not yet Running) OK" in output, report
    vmm = VMM_PID.search(output)
    assert vmm, report
    if FEATURES[feature][1] and not UNLIMITED:
        flagged = dict(EPERM.findall("\n".join(found)))
        assert len(found) == 2 and set(flagged) == {"Running", "not yet Running"}, report
        assert flagged["Running"] == vmm.group(1) != flagged["not yet Running"], report
    else:
        assert found == [], report


@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_virt_handlers_runtime_finds_the_launchers_processes_on_the_simulated_vmm(feature, tmp_path):
    output, log = run_runtime(feature, tmp_path, real=False)
    check(feature, output, log, boots=True)


@pytest.mark.real_vmm
@pytest.mark.parametrize("feature", sorted(FEATURES))
@pytest.mark.timeout(600)  # the NUMA feature's hugepage lock may be held by the cluster's dedicated node for minutes
def test_virt_handlers_runtime_finds_the_launchers_processes_on_the_real_vmm(feature, tmp_path):
    reason = real_vmm_reason()
    if reason:
        pytest.skip(reason)
    output, log = run_runtime(feature, tmp_path, real=True)
    check(feature, output, log, boots=feature not in VFIO)
