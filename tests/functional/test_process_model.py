"""The launcher pod's processes as virt-handler's KVM runtime finds them (docs/process-model.md).

Stories on the simulated VMM, with virt-handler's lookups as `kubevirt_runtime` renders them
(kubevirt-probe's `runtime` scenario runs KubeVirt's own code: test_runtime_probe.py):

- the socket owner is the launcher, its parent the monitor (the command's own process), its
  child `virtqemud`, and the VMM a `qemu-system*` child of the monitor;
- virt-handler raises virtqemud's memlock limit before the first Sync; the VMM that boots the
  VM has it (as uid 107 without capabilities, as in a pod); without the raise, a VMI that locks
  memory fails its Sync with the reason and nothing of the VM is created;
- the monitor reports the VMM's exit to the launcher, and stops a VMM the launcher left behind.
"""

from __future__ import annotations

import os
import signal

import pytest

from tests.builders import with_memory, with_memory_request
from tests.framework import FAKE_CH, CommandError
from tests.functional import kubevirt_runtime as vh
from tests.functional.harness import Harness, make_vmi
from tests.functional.host_support import GUEST, HARD, SOFT, START_SOFT, UNLIMITED, soft_memlock, wait_for
from tests.functional.pod_fixtures import real_vmm
from tests.functional.pod_probes import api

POD_UID = 107


def memlock_vmi() -> dict:
    return make_vmi(with_memory(str(GUEST), reservedOverhead={"memLock": "Required"}), with_memory_request(str(GUEST)))


def _vmm(h: Harness) -> int | None:
    """The VMM under the launcher's parent, once it runs its own program: the simulated VMM is a
    script (`#!/usr/bin/env python3`), whose process is `env` for a moment under the alias's name."""
    _pid, ppid = vh.socket_owner(str(h.layout.cmd_socket))
    try:
        pid = vh.find_qemu(ppid)
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            program = f.read().split(b"\0")[0]
    except (LookupError, OSError):
        return None
    return None if os.path.basename(program) == b"env" else pid


@pytest.fixture
def harness():
    """`harness(pod=None, kind="simulated", **kw)`: a Harness on the simulated VMM, or in the pod
    sandbox `pod` (uid 107 with only NET_BIND_SERVICE, tests/functional/pod_sandbox.py) on the
    VMM `kind` ("simulated" or "real")."""
    made: list[Harness] = []

    def make(*, pod=None, kind: str = "simulated", **kw) -> Harness:
        kw.setdefault("runtime_processes", True)  # these stories are about that process tree
        if pod is not None:
            kw.update(pod=pod, real=real_vmm(pod) if kind == "real" else None)
        h = Harness(**kw)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def test_virt_handler_finds_the_launcher_its_virtqemud_and_the_vmm_where_it_looks(harness, pod, vmm_kind):
    h = harness(pod=pod, kind=vmm_kind)

    async def story():
        await h.start()
        owner, parent = vh.socket_owner(str(h.layout.cmd_socket))
        assert parent == h.launcher.pid  # the monitor: the container's command
        assert vh.stat(owner)[0] == "ch-launcher"
        virtqemud = vh.find_virtqemud(owner)
        assert virtqemud is not None, "no virtqemud child of the socket owner"
        vmm = await wait_for(lambda: _vmm(h), what="the VMM under the launcher's parent")
        assert vh.stat(vmm) == ("qemu-system-clo", parent)
        with open(f"/proc/{vmm}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        if h.ch_binary == str(FAKE_CH):
            # a script: the kernel hands its interpreter the path executed, the alias's
            assert argv[1].endswith(b"/qemu-system-cloud-hypervisor")
        else:  # the real binary: ps shows its own path, /proc/<pid>/exe is the binary
            assert argv[0] == os.path.realpath(h.ch_binary).encode()
            assert os.readlink(f"/proc/{vmm}/exe") == os.path.realpath(h.ch_binary)
        await h.client.sync(h.vmi)
        await h.recorder.wait_for_status("Running", timeout=15)
        assert vh.find_qemu(parent) == vmm and vh.find_virtqemud(owner) == virtqemud
        # The three Python processes say what they are.
        with open(f"/proc/{owner}/cmdline", "rb") as f:
            assert f.read().startswith(b"ch-launcher: the launcher of default/testvmi")
        with open(f"/proc/{virtqemud}/cmdline", "rb") as f:
            assert f.read().startswith(b"virtqemud: the VMM spawner of ch-launcher")

    h.run(story())


def test_the_vmm_locks_guest_memory_with_the_limit_virt_handler_gave_virtqemud_before_the_sync(
        harness, pod, vmm_kind):
    h = harness(vmi=memlock_vmi(), pod=pod, kind=vmm_kind)

    async def story():
        with soft_memlock(None if UNLIMITED else START_SOFT):
            await h.start()
        owner, parent = vh.socket_owner(str(h.layout.cmd_socket))
        warm = await wait_for(lambda: _vmm(h), what="the VMM")
        assert int(vh.memlock(warm)[0]) < GUEST
        # virt-handler's AdjustResources before Running, on the launcher's virtqemud child
        vh.adjust_resources(vh.find_virtqemud(owner))
        await h.client.sync(h.vmi)
        await h.recorder.wait_for_status("Running", timeout=15)
        vmm = vh.find_qemu(parent)
        assert vmm != warm  # the VMM started before the raise was replaced by one that inherits it
        assert vh.memlock(vmm) == (("unlimited", "unlimited") if UNLIMITED else (str(HARD), str(HARD)))
        assert "started before virt-handler raised the memlock limit" in h.log_text()

    h.run(story())


def test_without_the_raise_a_vmi_that_locks_memory_fails_its_sync_and_nothing_is_created(harness, pod, vmm_kind):
    h = harness(vmi=memlock_vmi(), pod=pod, kind=vmm_kind)

    async def story():
        with soft_memlock(None if UNLIMITED else START_SOFT):
            await h.start()
        await wait_for(lambda: _vmm(h), what="the VMM")
        with pytest.raises(CommandError) as e:
            await h.client.sync(h.vmi)
        message = str(e.value)
        assert f"may lock {SOFT if UNLIMITED else START_SOFT} bytes" in message
        assert f"needs {GUEST} bytes of guest memory locked at boot" in message
        assert "virtqemud child before the first Sync" in message
        assert (await h.client.get_domain()) is None
        if h.ch_binary != str(FAKE_CH):
            status, _ = api(h.layout.private_dir / "ch" / "api.sock", "GET", "vm.info")
            assert status != 200  # the real VMM holds no VM
        else:
            assert h.requests("vm.create") == []  # no VM, not even a config

    h.run(story())


def test_a_vmi_virt_handler_reaches_into_fails_its_sync_on_a_launcher_without_the_tree_and_nothing_is_created(
        harness):
    vmi = make_vmi()
    vmi["spec"]["domain"]["cpu"] = {"cores": 1, "dedicatedCpuPlacement": True}
    h = harness(vmi=vmi, runtime_processes=False)  # e.g. a pod mutated by an older webhook

    async def story():
        await h.start()
        with pytest.raises(CommandError) as e:
            await h.client.sync(h.vmi)
        assert ("virt-handler would not find this VMI's VMM and would fail its reconcile: the launcher runs "
                "without its VMM spawner") in str(e.value)
        assert h.requests("vm.create") == []
        assert (await h.client.get_domain()) is None

    h.run(story())


def test_when_the_launcher_dies_the_monitor_stops_the_vmm_and_exits_with_its_status(harness):
    h = harness()

    async def story():
        await h.boot()
        owner, _ = vh.socket_owner(str(h.layout.cmd_socket))
        vmm = vh.find_qemu(h.launcher.pid)
        os.kill(owner, signal.SIGKILL)
        code = await h.launcher.wait_exit(30)
        assert code == 128 + signal.SIGKILL
        assert not os.path.exists(f"/proc/{vmm}")

    h.run(story())


@pytest.mark.parametrize("crash", ["SIGKILL", "emulation-failure"])
def test_a_vmm_that_crashes_under_the_monitor_is_shutoff_crashed_as_an_own_child_is(harness, pod, vmm_kind, crash):
    """The VMM is the monitor's child here, its exit status the monitor's report; its log is the
    one the spawner emptied for it: a kill and a vCPU failure (which CH ends like a poweroff)
    are told apart from a clean shutdown as when the VMM is the launcher's own child."""
    h = harness(pod=pod, kind=vmm_kind)

    async def story():
        await h.boot()
        owner, monitor = vh.socket_owner(str(h.layout.cmd_socket))
        vmm = vh.find_qemu(monitor)
        if crash == "SIGKILL":
            os.kill(vmm, signal.SIGKILL)
        else:
            await h.guest_does(crash)
        await h.recorder.wait_for_status("Shutoff", "Crashed", timeout=15)
        assert all(e.reason != "Shutdown" for e in h.recorder.events)
        warning = await h.recorder.wait_for_k8s_event("VMMCrashed")
        assert warning["type"] == "Warning"
        if crash != "SIGKILL":
            assert "Unexpected exit reason on vcpu run: InternalError" in warning["message"]
        assert (await h.client.call("Ping")).success
        assert vh.socket_owner(str(h.layout.cmd_socket))[0] == owner  # the launcher served on
        await h.client.vmi_command("DeleteVirtualMachine", h.vmi)
        await h.recorder.wait_for_deleted()  # (after which the launcher exits, taking its socket)

    h.run(story())
