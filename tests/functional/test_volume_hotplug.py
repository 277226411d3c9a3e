"""Volume hotplug stories: `virtctl addvolume` and `virtctl removevolume` as virt-handler plays them
against a real launcher, on the simulated VMM and (`@BOTH_VMMS`) on the real cloud-hypervisor in
the pod sandbox, whose tiny guest acknowledges the hot-unplug (ACPI eject) as a Linux guest does.

Each story plays KubeVirt's steps (kubevirt @d923fdb815cd): virt-api adds the volume and its disk
to the VMI spec (`hotpluggable: true`), virt-controller reports a hotplug volume status, the
attachment pod gets it onto the node and virt-handler mounts it into the launcher pod's
hotplug directory (phase `MountedToPod`) and calls Sync; once the Domain shows the disk with a
target, virt-handler marks it Ready. Removal: the volume leaves the spec, Sync detaches it, and
the disk leaves the Domain once the guest has ejected it (then virt-handler unmounts it).
"""

from __future__ import annotations

import os
import stat

import pytest

from tests.functional.harness import Harness, make_vmi
from tests.functional.pod_fixtures import vmm_info
from tests.functional.story_fixtures import BOTH_VMMS


def add_volume(vmi: dict, name: str, *, phase: str, bus: str = "scsi") -> dict:
    """virt-api's addvolume (virtctl's defaults: bus scsi, serial = the name) plus the volume
    status virt-controller and virt-handler keep."""
    vmi["spec"]["domain"]["devices"]["disks"].append({"name": name, "disk": {"bus": bus}, "serial": name})
    vmi["spec"]["volumes"].append({"name": name, "persistentVolumeClaim": {"claimName": f"{name}-pvc",
                                                                           "hotpluggable": True}})
    set_phase(vmi, name, phase)
    return vmi


def set_phase(vmi: dict, name: str, phase: str) -> None:
    statuses = vmi["status"].setdefault("volumeStatus", [])
    for status in statuses:
        if status["name"] == name:
            status["phase"] = phase
            return
    statuses.append({"name": name, "phase": phase, "hotplugVolume": {"attachPodName": f"hp-volume-{name}"},
                     "persistentVolumeClaimInfo": {"volumeMode": "Filesystem", "capacity": {"storage": "1Gi"}}})


def remove_volume(vmi: dict, name: str) -> dict:
    vmi["spec"]["domain"]["devices"]["disks"] = [d for d in vmi["spec"]["domain"]["devices"]["disks"]
                                                 if d["name"] != name]
    vmi["spec"]["volumes"] = [v for v in vmi["spec"]["volumes"] if v["name"] != name]
    return vmi


def mount_into_pod(vh: Harness, name: str) -> str:
    """What virt-handler's hotplug mounter leaves in the pod: `<hotplug-disk-dir>/<vol>.img`,
    the pod's (virt-handler sets the owner to the launcher's user, 107)."""
    path = vh.layout.hotplug_disk_dir / f"{name}.img"
    with open(path, "wb") as f:
        f.truncate(16 << 20)
    if vh.pod is not None:
        vh.pod.own(path)
    return str(path)


def disks_of(domain: dict | None) -> dict[str, dict]:
    disks = (domain or {}).get("Spec", {}).get("Devices", {}).get("Disks") or []
    return {d["Alias"]["Name"]: d for d in disks}


@BOTH_VMMS
def test_addvolume_attaches_the_disk_once_virt_handler_has_mounted_it_and_removevolume_detaches_it(new_harness):
    vh = new_harness(env={"FAKE_CH_EJECT_DELAY": "0.3"})

    async def story():
        await vh.boot()
        # virt-api added the volume; the attachment pod is not on the node yet
        vmi = add_volume(vh.vmi_copy(), "data", phase="Bound")
        await vh.client.sync(vmi)
        assert "data" not in disks_of(await vh.client.get_domain()) and not vh.requests("vm.add-disk")

        # virt-handler mounted it into the pod: the next Sync attaches it
        path = mount_into_pod(vh, "data")
        set_phase(vmi, "data", "MountedToPod")
        since = len(vh.recorder.events)
        await vh.client.sync(vmi)
        event = await vh.recorder.wait_for(lambda e: "data" in disks_of(e.domain), since=since)
        disk = disks_of(event.domain)["data"]
        assert disk["Target"] == {**disk["Target"], "Device": "vdd", "Bus": "virtio"}  # after vda..vdc
        assert disk["Source"]["File"] == path and disk["Serial"] == "data"
        assert len(vh.requests("vm.add-disk")) == 1
        if vh.simulated:
            assert [r["body"] for r in vh.requests("vm.add-disk")] == [
                {"id": "data", "path": path, "image_type": "Raw", "serial": "data"}]
        assert event.domain["Status"]["Status"] == "Running"

        # virt-handler marks it Ready and keeps syncing: nothing is attached twice
        set_phase(vmi, "data", "Ready")
        vmi["status"]["volumeStatus"][-1]["target"] = "vdd"
        await vh.client.sync(vmi)
        await vh.client.sync(vmi)
        assert len(vh.requests("vm.add-disk")) == 1
        stats = await vh.client.get_domain_stats()
        assert "vdd" in [b.get("Name") for b in stats.get("Block") or []]  # its counters too

        # removevolume: the disk is detached, and leaves the Domain once the guest ejects it
        remove_volume(vmi, "data")
        since = len(vh.recorder.events)
        await vh.client.sync(vmi)
        assert len(vh.requests("vm.remove-device")) == 1
        if vh.simulated:
            assert [r["body"] for r in vh.requests("vm.remove-device")] == [{"id": "data"}]
            assert "data" in disks_of(await vh.client.get_domain())  # the guest has not ejected it yet
        await vh.client.sync(vmi)  # virt-handler's next loop: no second removal
        gone = await vh.recorder.wait_for(lambda e: "data" not in disks_of(e.domain), since=since, timeout=10)
        assert set(disks_of(gone.domain)) == {"containerdisk", "scratch", "cloudinitdisk"}
        assert len(vh.requests("vm.remove-device")) == 1

        # and it can be added again
        add_volume(vmi, "data", phase="MountedToPod")
        await vh.client.sync(vmi)
        again = await vh.recorder.wait_for(lambda e: "data" in disks_of(e.domain), since=since)
        assert disks_of(again.domain)["data"]["Target"]["Device"] == "vdd"

    vh.run(story())


@BOTH_VMMS
def test_a_disk_the_guest_ejects_before_the_detach_call_returns_can_be_added_again(new_harness):
    # The real VMM writes vm:device-removed from the vCPU thread the guest ejects on, often
    # before its API thread answers vm.remove-device (FAKE_CH_EJECT_DELAY=0 always does so).
    vh = new_harness(env={"FAKE_CH_EJECT_DELAY": "0"})

    async def story():
        await vh.boot()
        vmi = add_volume(vh.vmi_copy(), "data", phase="MountedToPod")
        mount_into_pod(vh, "data")
        for n in range(2):
            since = len(vh.recorder.events)
            await vh.client.sync(vmi)
            await vh.recorder.wait_for(lambda e: "data" in disks_of(e.domain), since=since)
            assert len(vh.requests("vm.add-disk")) == n + 1
            remove_volume(vmi, "data")
            since = len(vh.recorder.events)
            await vh.client.sync(vmi)
            await vh.recorder.wait_for(lambda e: "data" not in disks_of(e.domain), since=since)
            add_volume(vmi, "data", phase="MountedToPod")
        assert len(vh.requests("vm.remove-device")) == 2

    vh.run(story())


@BOTH_VMMS
def test_a_detached_disk_the_guest_never_ejects_stays_in_the_domain(new_harness):
    vh = new_harness(ignores_ejects=True)

    async def story():
        await vh.boot()
        vmi = add_volume(vh.vmi_copy(), "data", phase="MountedToPod")
        mount_into_pod(vh, "data")
        await vh.client.sync(vmi)
        assert "data" in disks_of(await vh.client.get_domain())
        remove_volume(vmi, "data")
        for _ in range(3):
            await vh.client.sync(vmi)
        assert len(vh.requests("vm.remove-device")) == 1
        await vh.wait_for_ignored_eject()  # the guest was asked, and did not eject it
        await vh.client.sync(vmi)
        assert "data" in disks_of(await vh.client.get_domain())  # virt-handler keeps it mounted
        assert len(vh.requests("vm.remove-device")) == 1

    vh.run(story())


def test_a_mounted_volume_whose_file_does_not_open_yet_is_attached_at_a_later_sync(new_harness):
    vh = new_harness()

    async def story():
        await vh.boot()
        vmi = add_volume(vh.vmi_copy(), "late", phase="MountedToPod")
        await vh.client.sync(vmi)  # the phase says mounted, the file is not there yet
        assert not vh.requests("vm.add-disk")
        mount_into_pod(vh, "late")
        since = len(vh.recorder.events)
        await vh.client.sync(vmi)
        await vh.recorder.wait_for(lambda e: "late" in disks_of(e.domain), since=since)

    vh.run(story())


def test_a_disk_that_is_not_a_hotplugged_volume_still_cannot_be_added_to_a_running_vm(new_harness):
    vh = new_harness()

    async def story():
        await vh.boot()
        vmi = vh.vmi_copy()
        vmi["spec"]["domain"]["devices"]["disks"].append({"name": "cold", "disk": {"bus": "virtio"}})
        vmi["spec"]["volumes"].append({"name": "cold", "emptyDisk": {"capacity": "64Mi"}})
        reply = await vh.client.sync(vmi, check=False)
        assert not reply.success
        assert "spec.domain.devices.disks" in reply.message and "cold" in reply.message
        assert not vh.requests("vm.add-disk")
        await vh.client.sync(vh.vmi)  # the unchanged VMI still syncs

    vh.run(story())


@BOTH_VMMS
def test_a_hotplugged_volume_mounted_before_start_boots_with_the_vm(new_harness):
    # A VM restarted with a hotplugged volume persisted in its spec: virt-handler mounts it
    # before the launcher's first Sync.
    vh = new_harness()
    vmi = add_volume(vh.vmi, "kept", phase="MountedToPod", bus="virtio")
    path = mount_into_pod(vh, "kept")

    async def story():
        await vh.boot()
        disk = disks_of(await vh.client.get_domain())["kept"]
        assert disk["Source"]["File"] == path
        if vh.simulated:
            assert any(d["id"] == "kept" for d in vh.requests("vm.create")[0]["body"]["disks"])
        remove_volume(vmi, "kept")
        since = len(vh.recorder.events)
        await vh.client.sync(vmi)
        await vh.recorder.wait_for(lambda e: "kept" not in disks_of(e.domain), since=since)

    vh.run(story())
    assert os.path.exists(path)  # the launcher never deletes a volume's file


@pytest.mark.root
def test_a_hotplugged_block_volume_is_attached_from_its_device_node_and_detached(pod, launch):
    # A block PVC: virt-handler makes the device node <hotplug-disk-dir>/<vol> in the pod
    # (pkg/storage/volumepath HotplugBlockDevice@d923fdb815cd), owned by the launcher's user.
    vh = launch(make_vmi())
    backing = pod.root / "blk-claim.img"
    with open(backing, "wb") as f:
        f.truncate(8 << 20)
    loop = pod.block_device("blkdata", backing)
    node = vh.layout.hotplug_disk_dir / "blkdata"
    os.mknod(node, stat.S_IFBLK | 0o660, os.stat(loop).st_rdev)
    pod.own(node)
    vmi = add_volume(vh.vmi_copy(), "blkdata", phase="MountedToPod")
    vmi["status"]["volumeStatus"][-1]["persistentVolumeClaimInfo"]["volumeMode"] = "Block"

    since = len(vh.recorder.events)
    vh.run(vh.client.sync(vmi))
    event = vh.run(vh.recorder.wait_for(lambda e: "blkdata" in disks_of(e.domain), since=since))
    disk = disks_of(event.domain)["blkdata"]
    assert disk["Source"]["Dev"] == str(node) and disk["Target"]["Device"] == "vdd"
    added = [d for d in vmm_info(vh)["config"]["disks"] if d["id"] == "blkdata"]
    assert [d["path"] for d in added] == [str(node)]

    remove_volume(vmi, "blkdata")
    since = len(vh.recorder.events)
    vh.run(vh.client.sync(vmi))
    vh.run(vh.recorder.wait_for(lambda e: "blkdata" not in disks_of(e.domain), since=since, timeout=10))
    assert all(d["id"] != "blkdata" for d in vmm_info(vh)["config"]["disks"])
