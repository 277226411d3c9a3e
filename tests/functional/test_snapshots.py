"""VirtualMachineSnapshot and VirtualMachineRestore on a Cloud Hypervisor VM, in a launcher pod
on the simulated and on the real VMM.

KubeVirt snapshots volumes (CSI VolumeSnapshots); the launcher's part is the guest agent's
filesystem freeze. The snapshot controller freezes only a VMI whose AgentConnected condition is
set (kubevirt pkg/storage/snapshot/source.go@d923fdb815cd `Freeze`), and virt-handler sets it
only from a connected `org.qemu.guest_agent.0` channel in the Domain (pkg/virt-handler/vm.go).
A guest that runs no agent on vsock (this one) keeps the channel disconnected, so an online
snapshot proceeds unfrozen with the indications `Online` and `NoGuestAgent`, exactly as for a
QEMU VM without an agent; a Freeze that arrives anyway (virt-api's freeze subresource) gets the
Go launcher's answer for an agent that is not connected (with an agent: test_guest_agent.py).
A restore is storage-side too: the restored claims
(`restore-<restore uid>-<volume>`) are mounted where the VMI's volumes always go, and the VM
boots from them.
"""

from __future__ import annotations

import json
import os

import pytest

from ch_launcher._proto import kubevirt_cmd_v1_pb2 as cmd_pb2
from tests.builders import with_pvc, with_status
from tests.functional.harness import Harness, make_vmi
from tests.functional.pod_fixtures import vmm_info

pytestmark = [pytest.mark.root, pytest.mark.timeout(90)]

MiB = 1 << 20
NOT_CONNECTED = ("LibvirtError(Code=86, Domain=10, Message='Guest agent is not responding: QEMU guest agent is not "
                 "connected')")
NOT_RUNNING = "LibvirtError(Code=55, Domain=10, Message='Requested operation is not valid: domain is not running')"


def freeze(vh: Harness, rpc: str = "FreezeVirtualMachine") -> cmd_pb2.Response:
    """virt-handler's Freeze (with the snapshot's failure deadline as unfreeze timeout) or Unfreeze."""
    vmi = cmd_pb2.VMI(vmiJson=json.dumps(vh.vmi).encode())
    request = (cmd_pb2.FreezeRequest(vmi=vmi, unfreezeTimeoutSeconds=300) if rpc == "FreezeVirtualMachine"
               else cmd_pb2.VMIRequest(vmi=vmi))
    return vh.run(vh.client.call(rpc, request))


def test_an_online_snapshot_finds_no_guest_agent_and_freeze_answers_as_virt_launcher_without_one(pod, launch):
    vh = launch(make_vmi())
    domain = vh.run(vh.client.get_domain())
    channels = domain["Spec"]["Devices"].get("Channels") or []
    # what virt-handler's isGuestAgentConnected reads: not connected, so no AgentConnected condition
    assert [c["Target"]["State"] for c in channels if c["Target"]["Name"] == "org.qemu.guest_agent.0"] == [
        "disconnected"]

    for rpc in ("FreezeVirtualMachine", "UnfreezeVirtualMachine"):
        reply = freeze(vh, rpc)
        assert (reply.success, reply.message) == (False, NOT_CONNECTED)
    assert vmm_info(vh)["state"] == "Running"  # the VM never noticed
    assert (vh.run(vh.client.get_domain()))["Status"]["Status"] == "Running"

    vh.run(vh.client.vmi_command("PauseVirtualMachine", vh.vmi))  # a paused VM: libvirt's other answer
    assert (freeze(vh).success, freeze(vh).message) == (False, NOT_RUNNING)
    assert vmm_info(vh)["state"] == "Paused"


def test_freeze_of_a_vmi_that_does_not_decode_is_refused_like_any_command(pod, launch):
    vh = launch(make_vmi())
    reply = vh.run(vh.client.call("FreezeVirtualMachine", cmd_pb2.FreezeRequest(vmi=cmd_pb2.VMI(vmiJson=b"{"))))
    assert (reply.success, reply.message) == (False, "No valid vmi object present in command server request")


def restored_vmi(restore_uid: str) -> dict:
    """The VM's VMI after a VirtualMachineRestore: a new VMI (new uid), the same firmware UUID,
    its data volume now the restored claim (pkg/storage/snapshot/restore.go@d923fdb815cd)."""
    return make_vmi(with_pvc("data", f"restore-{restore_uid}-data"),
                    with_status(volumeStatus=[{"name": "data", "persistentVolumeClaimInfo": {
                        "volumeMode": "Filesystem", "capacity": {"storage": "16Mi"},
                        "requests": {"storage": "16Mi"}}}]))


def test_an_offline_restore_boots_from_the_restored_volume(pod, launch, vmm_kind):
    restored = b"restored from snapshot kch-1\n"

    def mount_restored_claim(h: Harness) -> None:  # kubelet mounts the restored PVC; its disk.img is the snapshot's
        claim = h.layout.private_dir / "vmi-disks" / "data"
        claim.mkdir(parents=True)
        with open(claim / "disk.img", "wb") as f:
            f.write(restored)
            f.truncate(16 * MiB)
        pod.own(h.layout.private_dir / "vmi-disks")

    vh = launch(restored_vmi("2d1c4a30-0c57-4b7e-9a61-1f1d2a3b4c5d"), before_boot=mount_restored_claim)

    image = vh.layout.private_dir / "vmi-disks" / "data" / "disk.img"
    info = vmm_info(vh)
    assert info["state"] == "Running"
    assert [(d["id"], d["path"]) for d in info["config"]["disks"] if d["id"] == "data"] == [("data", str(image))]
    assert image.read_bytes()[:len(restored)] == restored  # the launcher kept the restored image as it was
    assert image.stat().st_size == 16 * MiB
    if vmm_kind == "real":  # the VMM holds that very file open
        vmm = vh.vmm_pid()
        opened = {os.stat(f"/proc/{vmm}/fd/{fd}").st_ino for fd in os.listdir(f"/proc/{vmm}/fd")
                  if os.path.realpath(f"/proc/{vmm}/fd/{fd}") == str(image)}
        assert opened == {image.stat().st_ino}
