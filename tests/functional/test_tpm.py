"""TPM stories: a VMI with `devices.tpm` gets a real swtpm (Debian's) started by the launcher, the
VMM connects to it at boot, and with `persistent: true` the TPM's state, kept where KubeVirt
mounts the VM state PVC, is the same TPM after a restart of the pod. On the simulated VMM and
(`@BOTH_VMMS`) on the real cloud-hypervisor in the pod sandbox (launcher, swtpm and VMM as
uid 107), whose CRB TPM initialises the TPM at boot as the simulation does."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import pytest

from tests.builders import with_devices, with_status
from tests.functional.harness import FIRMWARE_UUID, Harness, make_vmi
from tests.functional.story_fixtures import BOTH_VMMS
from tests.polling import until

pytestmark = pytest.mark.skipif(shutil.which("swtpm") is None, reason="swtpm is not installed (Debian package "
                                "swtpm; make test installs it as root)")
UUID = FIRMWARE_UUID


def tpm_vmi(uid: str | None = None) -> dict:
    return make_vmi(with_devices(tpm={"persistent": True}),
                    with_status(runtimeUser=107),  # non-root, KubeVirt's default
                    uid=uid)


def state_dir(vh: Harness) -> Path:
    """<private-dir>/libvirt/qemu/swtpm: where virt-controller mounts the VM state PVC's `swtpm`."""
    return vh.layout.private_dir / "libvirt" / "qemu" / "swtpm"


def swtpm_children(vh: Harness) -> list[int]:
    """The pod's swtpm processes."""
    found = []
    for pid in vh.launcher.processes() if vh.launcher else []:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmdline and os.path.basename(cmdline[0]) == b"swtpm":
            found.append(pid)
    return found


def permall(vh: Harness) -> Path:
    return state_dir(vh) / UUID / "tpm2" / "tpm2-00.permall"


@BOTH_VMMS
def test_a_persistent_tpm_runs_swtpm_which_the_vmm_uses_and_its_state_survives_a_new_pod(new_harness, tmp_path):
    first = new_harness(vmi=tpm_vmi())
    uid = first.vmi["metadata"]["uid"]

    async def boot_and_stop(vh: Harness) -> bytes:
        await vh.boot()
        socket = vh.layout.private_dir / uid / "swtpm.sock"
        if vh.simulated:
            assert vh.requests("vm.create")[0]["body"]["tpm"] == {"socket": str(socket)}
        assert socket.is_socket() and len(swtpm_children(vh)) == 1
        assert permall(vh).is_file(), "the VMM initialised the TPM, so swtpm wrote its state"
        state = permall(vh).read_bytes()
        await vh.client.vmi_command("KillVirtualMachine", vh.vmi)
        await vh.client.vmi_command("DeleteVirtualMachine", vh.vmi)
        await vh.recorder.wait_for_deleted()
        return state

    state = first.run(boot_and_stop(first))
    pids = swtpm_children(first)
    assert pids == [], "swtpm is stopped with the VM"

    # A new pod for the same VM: the VM state PVC is mounted at the same place again.
    shutil.copytree(state_dir(first), tmp_path / "pvc")
    first.close()  # (on the real VMM both pods are the one sandbox, used in turn)
    second = new_harness(vmi=tpm_vmi(uid=uid))
    shutil.copytree(tmp_path / "pvc", state_dir(second), dirs_exist_ok=True)
    if second.pod is not None:
        second.pod.own(state_dir(second))
    again = second.run(boot_and_stop(second))
    # A TPM manufactured anew differs in its random seeds, in hundreds of bytes; the same TPM
    # loaded again at most in a few counters (the real VMM's TPM2_Startup: the reset count).
    changed = sum(a != b for a, b in zip(state, again, strict=False)) + abs(len(state) - len(again))
    assert changed < 32, f"{changed} bytes of the TPM state changed: the restarted TPM is a new one"


@BOTH_VMMS
def test_a_soft_reboot_keeps_swtpm_and_the_new_vmm_connects_to_it(new_harness):
    vh = new_harness(vmi=tpm_vmi())

    async def story():
        await vh.boot()
        (pid,) = swtpm_children(vh)
        (old,) = vh.launcher.children()  # the VMM
        permall(vh).unlink()  # swtpm writes it again when a VMM initialises the TPM
        since = len(vh.recorder.events)
        await vh.client.vmi_command("SoftRebootVirtualMachine", vh.vmi)
        # the guest shuts down, then a new VMM boots the VM, connects to the same swtpm and
        # initialises the TPM again
        with contextlib.suppress(TimeoutError):
            await until(lambda: permall(vh).is_file(), 20, 0.05)
        assert permall(vh).is_file(), f"no new VMM initialised the TPM\n{vh.log_text()[-2000:]}"
        assert vh.launcher.children() not in ([], [old])
        if vh.simulated:  # a real VMM's log (where its requests are counted) starts afresh
            assert len(vh.requests("vm.boot")) == 2
        assert (await vh.client.get_domain())["Status"]["Status"] == "Running"
        assert all(e.status != "Shutoff" for e in vh.recorder.events[since:])
        assert swtpm_children(vh) == [pid]

    vh.run(story())


@BOTH_VMMS
def test_without_persistent_the_tpm_state_stays_in_the_pod(new_harness):
    vmi = tpm_vmi()
    vmi["spec"]["domain"]["devices"]["tpm"] = {}
    vh = new_harness(vmi=vmi)

    async def story():
        await vh.boot()
        assert permall(vh).is_file()

    vh.run(story())


@BOTH_VMMS
def test_a_tpm_whose_swtpm_cannot_start_fails_the_sync_naming_the_field(new_harness):
    vh = new_harness(vmi=tpm_vmi(), env={"CH_SWTPM": "/nonexistent/swtpm"})

    async def story():
        await vh.start()
        reply = await vh.client.sync(vh.vmi, check=False)
        assert not reply.success and "spec.domain.devices.tpm" in reply.message
        assert not vh.requests("vm.boot")

    vh.run(story())
