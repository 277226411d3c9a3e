"""Storage: every volume kind at KubeVirt's on-pod path, disk options, boot order, what is refused."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from ch_launcher.convert import LauncherEnv
from ch_launcher.convert.expansion import DiskSizing
from ch_launcher.convert.plan import (
    BuildCloudInitIso,
    BuildIso,
    CreateOverlay,
    CreateSparseImage,
    ExpandImage,
    RequireFile,
    Step,
)
from tests.unit.convert.vmibuild import (
    FIRMWARE_UUID,
    UID,
    api,
    container_disk,
    fields,
    launcher_env,
    problem,
    pvc_status,
    run,
    virtio,
    vmi,
    with_status,
)

GiB = 2**30
MiB = 2**20
DIRS = {"private_dir": "/p", "share_dir": "/var/run/kubevirt", "ephemeral_disk_dir": "/e", "container_disk_dir": "/c",
            "firmware_dir": "/fw"}


def env(**kw: Any) -> LauncherEnv:
    return launcher_env(**{**DIRS, **kw})


def disks(verdict: Any) -> list[dict[str, Any]]:
    return api(verdict)["disks"]


def steps(verdict: Any, kind: type) -> list[Any]:
    assert verdict.plan is not None, verdict.problems
    return [s for s in verdict.plan.steps if isinstance(s, kind)]


def one(body: dict[str, Any], **kw: Any) -> tuple[dict[str, Any], list[Step], Any]:
    """(the disk, the storage steps, the verdict) of a VMI with one disk."""
    verdict = run(body, env(**kw))
    config = disks(verdict)
    assert len(config) == 1
    assert verdict.plan is not None
    return config[0], [s for s in verdict.plan.steps if not s.field.startswith("spec.domain.firmware")], verdict


def test_a_container_disk_is_a_qcow2_overlay_over_the_image_at_its_volume_index() -> None:
    body = vmi(disks=[virtio("rootdisk")], volumes=[{"name": "other", "emptyDisk": {"capacity": "1Gi"}},
                                                     container_disk("rootdisk")])
    verdict = run(body, env())
    rootdisk = next(d for d in disks(verdict) if d["id"] == "rootdisk")
    assert rootdisk == {"id": "rootdisk", "path": "/e/disk-data/rootdisk/disk.qcow2", "image_type": "Qcow2",
                        "backing_files": True}
    assert steps(verdict, CreateOverlay) == [CreateOverlay(
        field="spec.volumes[1].containerDisk", path="/e/disk-data/rootdisk/disk.qcow2", backing="/c/disk_1.img",
        backing_format="")]


def test_a_filesystem_pvc_is_its_disk_img_created_sparse_at_kubevirts_size() -> None:
    body = with_status(vmi(disks=[virtio("data")],
                           volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "c"}}]),
                       pvc_status("data", capacity="10Gi", request="5000Mi"))
    disk, made, _ = one(body)
    assert disk == {"id": "data", "path": "/p/vmi-disks/data/disk.img", "image_type": "Raw"}
    assert made == [CreateSparseImage(field="spec.volumes[0].persistentVolumeClaim", path="/p/vmi-disks/data/disk.img",
                                      size=5000 * MiB, create_parent=False, tolerate_less_space_percent=10,
                                      reserve_bytes=131072),
                    # and grown before boot if the claim grew while the VM was stopped (test_expansion.py)
                    ExpandImage(field="spec.volumes[0]", sizing=DiskSizing(
                        disk="data", path="/p/vmi-disks/data/disk.img", block=False, capacity=5000 * MiB,
                        filesystem_overhead=None))]


@pytest.mark.parametrize("capacity, requested, size", [
    ("10Gi", "20Gi", 10 * GiB),          # the capacity when the request is larger
    ("10Gi", None, 10 * GiB),
    (None, "3Gi", 3 * GiB),
    ("1000001Ki", None, 976 * MiB),      # rounded down to 1 MiB
])
def test_a_pvc_image_is_the_smaller_of_request_and_capacity_rounded_down_to_a_mebibyte(
        capacity: str | None, requested: str | None, size: int) -> None:
    body = with_status(vmi(disks=[virtio("d")], volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]),
                       pvc_status("d", capacity=capacity, request=requested))
    _, made, _ = one(body)
    assert made[0].size == size


def test_a_pvc_without_its_size_in_status_must_already_have_its_image() -> None:
    _, made, _ = one(vmi(disks=[virtio("d")], volumes=[{"name": "d", "dataVolume": {"name": "dv"}}]))
    assert made == [RequireFile(field="spec.volumes[0].dataVolume", path="/p/vmi-disks/d/disk.img",
                                what="disk image of volume d")]


def test_a_block_pvc_is_its_device_in_dev() -> None:
    body = with_status(vmi(disks=[virtio("d")], volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]),
                       pvc_status("d", mode="Block"))
    disk, made, verdict = one(body)
    assert disk["path"] == "/dev/d" and disk["image_type"] == "Raw"
    assert made == [RequireFile(field="spec.volumes[0].persistentVolumeClaim", path="/dev/d",
                                what="block device of volume d", block_device=True)]
    assert verdict.plan.disks[0].source_dev == "/dev/d" and verdict.plan.disks[0].source_file == ""


def test_a_read_only_claim_gives_a_read_only_disk() -> None:
    disk, _, _ = one(vmi(disks=[virtio("d")], volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "c",
                                                                                                 "readOnly": True}}]))
    assert disk["readonly"] is True


HOTPLUG_SOURCES = [{"persistentVolumeClaim": {"claimName": "c", "hotpluggable": True}},
                   {"dataVolume": {"name": "dv", "hotpluggable": True}}]


def hotplug_status(name: str, phase: str = "MountedToPod", mode: str = "Filesystem") -> dict[str, Any]:
    return {**pvc_status(name, mode=mode), "phase": phase, "hotplugVolume": {"attachPodName": f"hp-{name}"}}


@pytest.mark.parametrize("source", HOTPLUG_SOURCES)
@pytest.mark.parametrize("mode, path", [("Filesystem", "/hp/d.img"), ("Block", "/hp/d")])
def test_a_mounted_hotplugged_volume_is_a_disk_at_virt_handlers_hotplug_path(source: dict[str, Any], mode: str,
                                                                            path: str) -> None:
    body = with_status(vmi(disks=[virtio("d")], volumes=[{"name": "d", **source}]), hotplug_status("d", mode=mode))
    disk, made, verdict = one(body, hotplug_disk_dir="/hp/")
    assert disk == {"id": "d", "path": path, "image_type": "Raw"}
    assert made == []  # virt-handler mounts it; nothing for the launcher to create
    assert verdict.plan.hotplug_disks == {"d"}
    domain = verdict.plan.disks[0]
    assert (domain.source_dev, domain.source_file) == ((path, "") if mode == "Block" else ("", path))


@pytest.mark.parametrize("status", [None, "Bound", "Pending", "AttachedToNode"])
def test_a_hotplugged_volume_not_yet_mounted_into_the_pod_is_not_attached(status: str | None) -> None:
    body = vmi(disks=[virtio("d"), virtio("boot")],
               volumes=[{"name": "d", **HOTPLUG_SOURCES[0]}, container_disk("boot")])
    if status is not None:
        body = with_status(body, hotplug_status("d", phase=status))
    verdict = run(body, env())
    assert verdict.allowed, verdict.problems
    assert [d["id"] for d in disks(verdict)] == ["boot"] and verdict.plan.hotplug_disks == set()


def test_virtctl_addvolumes_defaults_scsi_and_a_long_serial_are_degraded_on_a_hotplugged_disk() -> None:
    name = "a-volume-name-longer-than-twenty"
    body = with_status(vmi(disks=[{"name": name, "disk": {"bus": "scsi"}, "serial": name}],
                           volumes=[{"name": name, **HOTPLUG_SOURCES[0]}]), hotplug_status(name))
    disk, _, verdict = one(body)
    assert disk["serial"] == name[:20]
    assert fields(verdict.warnings) == ["spec.domain.devices.disks[0].disk.bus", "spec.domain.devices.disks[0].serial"]
    # a disk present at boot keeps the strict rules
    cold = vmi(disks=[{"name": "d", "disk": {"bus": "scsi"}, "serial": name}], volumes=[container_disk("d")])
    assert fields(run(cold, env()).problems) == ["spec.domain.devices.disks[0].disk.bus"]


def test_a_hotplugged_lun_is_still_refused_naming_the_field() -> None:
    body = with_status(vmi(disks=[{"name": "d", "lun": {"bus": "scsi"}}],
                           volumes=[{"name": "d", **HOTPLUG_SOURCES[0]}]),
                       hotplug_status("d"))
    assert "spec.domain.devices.disks[0].lun" in fields(run(body, env()).problems)


@pytest.mark.parametrize("mode, backing", [("Filesystem", "/p/vmi-disks/d/disk.img"), ("Block", "/dev/d")])
def test_an_ephemeral_volume_is_an_overlay_over_the_claim(mode: str, backing: str) -> None:
    body = with_status(vmi(disks=[virtio("d")], volumes=[{"name": "d", "ephemeral": {"persistentVolumeClaim": {
        "claimName": "c"}}}]), pvc_status("d", mode=mode))
    disk, made, _ = one(body)
    assert disk["path"] == "/e/disk-data/d/disk.qcow2" and disk["image_type"] == "Qcow2"
    assert made == [CreateOverlay(field="spec.volumes[0].ephemeral", path="/e/disk-data/d/disk.qcow2",
                                  backing=backing, backing_format="raw")]


def test_a_host_disk_of_type_disk_must_exist_where_virt_controller_mounts_it() -> None:
    disk, made, _ = one(vmi(disks=[virtio("h")], volumes=[{"name": "h", "hostDisk": {"path": "/var/data/my.img",
                                                                                     "type": "Disk"}}]))
    assert disk["path"] == "/p/vmi-disks/h/my.img"
    assert made == [RequireFile(field="spec.volumes[0].hostDisk.path", path="/p/vmi-disks/h/my.img",
                                what="host disk /var/data/my.img of volume h")]


def test_a_host_disk_of_type_disk_or_create_is_created_sparse_at_its_capacity() -> None:
    _, made, _ = one(vmi(disks=[virtio("h")], volumes=[{"name": "h", "hostDisk": {
        "path": "/var/data/disk.img", "type": "DiskOrCreate", "capacity": "1Gi"}}]))
    assert made == [CreateSparseImage(field="spec.volumes[0].hostDisk", path="/p/vmi-disks/h/disk.img", size=GiB,
                                      create_parent=False, tolerate_less_space_percent=10, reserve_bytes=131072)]


def test_a_host_disk_to_create_needs_a_capacity() -> None:
    body = vmi(disks=[virtio("h")], volumes=[{"name": "h", "hostDisk": {"path": "/d.img", "type": "DiskOrCreate"}}])
    assert problem(run(body), "spec.volumes[0].hostDisk.capacity").reason == "FieldValueRequired"


@pytest.mark.parametrize("path", ["/", "/data/..", "/data/."])
def test_a_host_disk_path_that_names_no_file_is_invalid(path: str) -> None:
    body = vmi(disks=[virtio("h")], volumes=[{"name": "h", "hostDisk": {"path": path, "type": "Disk"}}])
    assert problem(run(body), "spec.volumes[0].hostDisk.path").reason == "FieldValueInvalid"


def test_an_empty_disk_is_a_sparse_raw_image_in_the_ephemeral_disk_dir() -> None:
    disk, made, _ = one(vmi(disks=[virtio("scratch")], volumes=[{"name": "scratch", "emptyDisk": {"capacity": "2G"}}]))
    assert disk == {"id": "scratch", "path": "/e/empty-disks/scratch.img", "image_type": "Raw"}
    assert made == [CreateSparseImage(field="spec.volumes[0].emptyDisk", path="/e/empty-disks/scratch.img",
                                      size=2 * 10**9 - 2 * 10**9 % MiB)]


def test_an_empty_disk_under_a_mebibyte_is_invalid() -> None:
    body = vmi(disks=[virtio("s")], volumes=[{"name": "s", "emptyDisk": {"capacity": "1000Ki"}}])
    assert "at least 1MiB" in problem(run(body), "spec.volumes[0].emptyDisk.capacity").message


def test_cloud_init_no_cloud_is_a_read_only_cidata_iso_with_kubevirts_metadata() -> None:
    body = vmi({"firmware": {"uuid": FIRMWARE_UUID}}, disks=[virtio("ci")], volumes=[
        {"name": "ci", "cloudInitNoCloud": {"userData": "#cloud-config\n", "networkDataBase64":
                                            base64.b64encode(b"version: 2\n").decode()}}])
    disk, made, _ = one(body)
    iso = "/e/cloud-init-data/default/testvmi/noCloud.iso"
    assert disk == {"id": "ci", "path": iso, "readonly": True, "image_type": "Raw"}
    assert made == [BuildCloudInitIso(field="spec.volumes[0].cloudInitNoCloud", path=iso, data_source="noCloud",
                                      meta_data=(("instance-id", FIRMWARE_UUID), ("local-hostname", "testvmi")),
                                      user_data=b"#cloud-config\n", network_data=b"version: 2\n")]


def test_cloud_init_metadata_falls_back_to_the_vmi_uid_and_uses_hostname_and_instancetype() -> None:
    body = vmi(disks=[virtio("ci")], volumes=[{"name": "ci", "cloudInitNoCloud": {"userData": "x"}}],
               hostname="myhost")
    body["metadata"]["annotations"] = {"kubevirt.io/instancetype-name": "u1.small"}
    _, made, _ = one(body)
    assert made[0].meta_data == (("instance-type", "u1.small"), ("instance-id", UID), ("local-hostname", "myhost"))


def test_cloud_init_from_a_secret_reads_kubevirts_secret_mount() -> None:
    body = vmi(disks=[virtio("ci")], volumes=[{"name": "ci", "cloudInitNoCloud": {
        "secretRef": {"name": "s"}, "networkDataSecretRef": {"name": "s"}}}])
    _, made, _ = one(body)
    assert made[0].user_data is None and made[0].user_data_sources == ("/p/secret/ci/userdata", "/p/secret/ci/userData")
    assert made[0].network_data_sources == ("/p/secret/ci/networkdata", "/p/secret/ci/networkData")


def test_cloud_init_config_drive_is_a_config_2_iso() -> None:
    body = vmi({"firmware": {"uuid": FIRMWARE_UUID}}, disks=[virtio("cd")],
               volumes=[{"name": "cd", "cloudInitConfigDrive": {"userDataBase64": base64.b64encode(b"hi").decode()}}])
    disk, made, _ = one(body)
    assert disk["path"] == "/e/cloud-init-data/default/testvmi/configdrive.iso"
    assert made[0].data_source == "configDrive" and made[0].user_data == b"hi"
    assert made[0].meta_data == (("instance_id", "testvmi.default"), ("hostname", "testvmi"), ("uuid", FIRMWARE_UUID))


def test_cloud_init_without_any_data_is_required_and_bad_base64_is_invalid() -> None:
    empty = vmi(disks=[virtio("ci")], volumes=[{"name": "ci", "cloudInitNoCloud": {}}])
    assert problem(run(empty), "spec.volumes[0].cloudInitNoCloud").reason == "FieldValueRequired"
    bad = vmi(disks=[virtio("ci")], volumes=[{"name": "ci", "cloudInitNoCloud": {"userDataBase64": "@@@"}}])
    assert problem(run(bad), "spec.volumes[0].cloudInitNoCloud.userDataBase64").reason == "FieldValueInvalid"


def test_a_second_cloud_init_volume_is_invalid() -> None:
    body = vmi(disks=[virtio("a"), virtio("b")], volumes=[{"name": "a", "cloudInitNoCloud": {"userData": "x"}},
                                                          {"name": "b", "cloudInitConfigDrive": {"userData": "y"}}])
    assert fields(run(body).problems) == ["spec.volumes[1].cloudInitConfigDrive"]


@pytest.mark.parametrize("source, iso, label, src", [
    ({"configMap": {"name": "cm"}}, "/p/config-map-disks/v.iso", "cfgdata", "/p/config-map/v"),
    ({"configMap": {"name": "cm", "volumeLabel": "MYCM"}}, "/p/config-map-disks/v.iso", "MYCM", "/p/config-map/v"),
    ({"secret": {"secretName": "s"}}, "/p/secret-disks/v.iso", "cfgdata", "/p/secret/v"),
    ({"downwardAPI": {"fields": []}}, "/p/downwardapi-disks/v.iso", "cfgdata", "/p/downwardapi/v"),
    ({"serviceAccount": {"serviceAccountName": "default"}}, "/p/service-account-disk/service-account.iso", "cfgdata",
     "/var/run/secrets/kubernetes.io/serviceaccount"),
])
def test_config_volumes_are_iso_images_of_their_mounted_directories(source: dict[str, Any], iso: str, label: str,
                                                                     src: str) -> None:
    disk, made, _ = one(vmi(disks=[virtio("v")], volumes=[{"name": "v", **source}]))
    assert disk == {"id": "v", "path": iso, "readonly": True, "image_type": "Raw"}
    assert made == [BuildIso(field=f"spec.volumes[0].{next(iter(source))}", path=iso, volume_label=label, files=(),
                             source_dir=src)]


@pytest.mark.parametrize("label", ["L" * 33, "étiquette", "a\tb"])
def test_a_config_volume_label_an_iso_cannot_hold_is_invalid(label: str) -> None:
    body = vmi(disks=[virtio("v")], volumes=[{"name": "v", "configMap": {"name": "cm", "volumeLabel": label}}])
    assert problem(run(body), "spec.volumes[0].configMap.volumeLabel").reason == "FieldValueInvalid"


@pytest.mark.parametrize("kind", ["downwardMetrics", "memoryDump", "sysprep"])
def test_volume_kinds_that_need_libvirt_or_a_cdrom_are_refused(kind: str) -> None:
    problem(run(vmi(disks=[virtio("v")], volumes=[{"name": "v", kind: {}}])), f"spec.volumes[0].{kind}")


def test_a_volume_without_a_disk_gets_a_virtio_disk_as_kubevirts_defaulting_adds_one() -> None:
    verdict = run(vmi(volumes=[container_disk("rootdisk")]), env())
    assert [d["id"] for d in disks(verdict)] == ["rootdisk"]


def test_a_volume_used_by_a_filesystem_gets_no_disk() -> None:
    body = vmi({"devices": {"filesystems": [{"name": "share", "virtiofs": {}}]}},
               volumes=[{"name": "share", "persistentVolumeClaim": {"claimName": "c"}}])
    verdict = run(body, env())
    assert verdict.allowed and verdict.plan is not None
    assert verdict.plan.config.disks is None and not verdict.plan.disks


def test_a_disk_without_its_volume_is_reported_by_name() -> None:
    p = problem(run(vmi(disks=[virtio("ghost")])), "spec.domain.devices.disks[0].name")
    assert p.message == "spec.domain.devices.disks[0].Name 'ghost' not found."


@pytest.mark.parametrize("disk, field", [
    ({"name": "d", "cdrom": {"bus": "sata"}}, "spec.domain.devices.disks[0].cdrom"),
    ({"name": "d", "lun": {}}, "spec.domain.devices.disks[0].lun"),
    ({"name": "d", "floppy": {}}, "spec.domain.devices.disks[0].floppy"),
    ({"name": "d", "disk": {"bus": "scsi"}}, "spec.domain.devices.disks[0].disk.bus"),
    ({"name": "d", "disk": {"bus": "virtio", "pciAddress": "0000:00:05.0"}},
     "spec.domain.devices.disks[0].disk.pciAddress"),
    ({"name": "d", "blockSize": {"custom": {"logical": 4096, "physical": 4096}}},
     "spec.domain.devices.disks[0].blockSize.custom"),
    ({"name": "d", "serial": "x" * 21}, "spec.domain.devices.disks[0].serial"),
    ({"name": "d", "cache": "unsafe"}, "spec.domain.devices.disks[0].cache"),
    ({"name": "d", "shareable": True, "cache": "writeback"}, "spec.domain.devices.disks[0].cache"),
    ({"name": "_d"}, "spec.domain.devices.disks[0].name"),
    ({"name": "Root"}, "spec.domain.devices.disks[0].name"),
    ({"name": "d" * 64}, "spec.domain.devices.disks[0].name"),
])
def test_disk_settings_cloud_hypervisor_cannot_honour_are_reported_at_their_path(disk: dict[str, Any],
                                                                                 field: str) -> None:
    verdict = run(vmi(disks=[disk], volumes=[container_disk(disk["name"])]))
    assert field in fields(verdict.problems)


@pytest.mark.parametrize("name", ["../../etc/x", "a/b"])
def test_a_volume_name_that_would_leave_its_directory_is_refused_at_its_path(name: str) -> None:
    # no disk listed: the disk KubeVirt's defaulting adds is reported at the volume
    verdict = run(vmi(volumes=[{"name": name, "emptyDisk": {"capacity": "1Gi"}}]))
    assert problem(verdict, "spec.volumes[0].name").reason == "FieldValueInvalid"
    assert verdict.plan is None


def test_a_volume_with_two_sources_is_invalid() -> None:
    body = vmi(disks=[virtio("v")],
               volumes=[{"name": "v", "containerDisk": {"image": "i"}, "emptyDisk": {"capacity": "1Gi"}}])
    verdict = run(body)
    assert problem(verdict, "spec.volumes[0]").reason == "FieldValueInvalid"
    assert verdict.plan is None


def test_a_sata_disk_as_kubevirt_defaults_it_runs_as_virtio_with_a_warning() -> None:
    # KubeVirt's mutating webhook sets an empty disk bus to sata on amd64 before we see the VMI.
    verdict = run(vmi(disks=[{"name": "d", "disk": {"bus": "sata"}}], volumes=[container_disk("d")]))
    assert verdict.allowed
    assert fields(verdict.warnings) == ["spec.domain.devices.disks[0].disk.bus"]
    assert "virtio-blk" in verdict.warnings[0].message
    assert verdict.plan is not None and verdict.plan.disks[0].target_dev == "vda"


def test_the_cdrom_message_says_why_and_what_to_do() -> None:
    p = problem(run(vmi(disks=[{"name": "d", "cdrom": {}}], volumes=[container_disk("d")])),
                "spec.domain.devices.disks[0].cdrom")
    assert p.message == ("spec.domain.devices.disks[0].cdrom is not supported by Cloud Hypervisor: it emulates no "
                         "CD-ROM; attach the image as a virtio disk instead")
    assert p.reason == "FieldValueNotSupported"


def test_every_disk_problem_is_reported_at_once() -> None:
    body = vmi(disks=[{"name": "a", "cdrom": {}}, {"name": "b", "disk": {"bus": "usb"}}, virtio("c", serial="s" * 30)],
               volumes=[container_disk("a"), container_disk("b"), container_disk("c")])
    assert fields(run(body).problems) == ["spec.domain.devices.disks[0].cdrom", "spec.domain.devices.disks[1].disk.bus",
                                          "spec.domain.devices.disks[2].serial"]


def test_disk_options_map_to_cloud_hypervisor_settings() -> None:
    body = vmi({"cpu": {"cores": 4}, "devices": {"blockMultiQueue": True}},
               disks=[virtio("d", serial="SN-0001", cache="none", disk={"bus": "virtio", "readonly": True})],
               volumes=[container_disk("d")])
    disk, _, _ = one(body)
    assert (disk["serial"], disk["direct"], disk["readonly"], disk["num_queues"]) == ("SN-0001", True, True, 4)


def test_a_serial_of_twenty_bytes_fits() -> None:
    disk, _, _ = one(vmi(disks=[virtio("d", serial="x" * 20)], volumes=[container_disk("d")]))
    assert disk["serial"] == "x" * 20


def test_writethrough_and_error_policies_are_warnings() -> None:
    verdict = run(vmi(disks=[virtio("d", cache="writethrough", errorPolicy="stop")], volumes=[container_disk("d")]))
    assert verdict.allowed
    assert fields(verdict.warnings) == ["spec.domain.devices.disks[0].cache",
                                        "spec.domain.devices.disks[0].errorPolicy"]


def test_a_shareable_disk_uses_direct_io_and_warns_about_locking() -> None:
    verdict = run(vmi(disks=[virtio("d", shareable=True)], volumes=[container_disk("d")]))
    assert disks(verdict)[0]["direct"] is True
    assert fields(verdict.warnings) == ["spec.domain.devices.disks[0].shareable"]


def test_boot_order_puts_the_boot_disk_first_so_the_firmware_boots_it() -> None:
    body = vmi(disks=[virtio("data"), virtio("second", bootOrder=2), virtio("root", bootOrder=1), virtio("more")],
               volumes=[container_disk(n) for n in ("data", "second", "root", "more")])
    verdict = run(body, env())
    assert [d["id"] for d in disks(verdict)] == ["root", "second", "data", "more"]
    assert verdict.plan is not None
    assert [(d.alias, d.target_dev, d.boot_order) for d in verdict.plan.disks] == [
        ("root", "vda", 1), ("second", "vdb", 2), ("data", "vdc", None), ("more", "vdd", None)]


def test_a_boot_order_used_twice_is_invalid() -> None:
    body = vmi(disks=[virtio("a", bootOrder=1), virtio("b", bootOrder=1)], volumes=[container_disk("a"),
                                                                                    container_disk("b")])
    assert "already used by spec.domain.devices.disks[0]" \
        in problem(run(body), "spec.domain.devices.disks[1].bootOrder").message


def test_ssh_keys_propagated_through_no_cloud_go_into_the_cloud_init_iso() -> None:
    cred = {"sshPublicKey": {"source": {"secret": {"secretName": "keys"}}, "propagationMethod": {"noCloud": {}}}}
    body = vmi(disks=[virtio("ci")], volumes=[{"name": "ci", "cloudInitNoCloud": {"userData": "x"}}],
               accessCredentials=[cred])
    _, made, _ = one(body)
    assert made[0].ssh_key_dirs == ("/p/secret/keys-access-cred",)


@pytest.mark.parametrize("cred, field", [
    ({"sshPublicKey": {"source": {"secret": {"secretName": "k"}}, "propagationMethod": {"configDrive": {}}}},
     "spec.accessCredentials[0].sshPublicKey.propagationMethod"),
])
def test_access_credentials_propagated_through_a_missing_cloud_init_volume_are_refused(cred: dict[str, Any],
                                                                                      field: str) -> None:
    body = vmi(disks=[virtio("ci")], volumes=[{"name": "ci", "cloudInitNoCloud": {"userData": "x"}}],
               accessCredentials=[cred])
    problem(run(body), field)


def test_a_vmi_without_disks_has_no_disk_list() -> None:
    assert "disks" not in api(run(vmi()))
