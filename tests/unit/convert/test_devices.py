"""Devices other than disks and NICs: rng, vsock, virtiofs, VFIO host devices/GPUs, peripherals."""

from __future__ import annotations

import pytest

from ch_launcher.convert.context import PermittedHostDevices
from ch_launcher.convert.devices import configure_devices
from ch_launcher.convert.plan import WaitForSocket
from tests.unit.convert.netbuild import UID, fields, pod, translation, vmi

D = "spec.domain.devices"


def run(devices, pod_facts=None, status=None, volumes=None, **env):
    body = vmi([], [], devices={"autoattachGraphicsDevice": False, **devices})
    if status:
        body["status"] = status
    if volumes:
        body["spec"]["volumes"] = volumes
    t = translation(body, pod_facts, **env)
    configure_devices(t)
    return t


def test_rng_becomes_virtio_rng_from_urandom():
    t = run({"rng": {}})
    assert t.config.rng.to_api() == {"src": "/dev/urandom"}
    assert run({}).config.rng is None


def test_vsock_uses_the_cid_virt_controller_assigned_and_a_socket_in_the_vmi_dir(tmp_path):
    t = run({"autoattachVSOCK": True}, status={"VSOCKCID": 123}, private_dir=str(tmp_path))
    assert t.problems == []
    assert t.config.vsock.to_api() == {"cid": 123, "socket": f"{tmp_path}/{UID}/vsock"}
    assert fields(t.warnings) == [f"{D}.autoattachVSOCK"]  # hybrid vsock: no AF_VSOCK on the node


def test_vsock_without_a_cid_yet_adds_no_device():
    t = run({"autoattachVSOCK": True})
    assert t.problems == [] and t.config.vsock is None


@pytest.mark.parametrize("cid", [0, 1, 2, 2**32 - 1])
def test_a_reserved_vsock_cid_is_refused(cid):
    t = run({"autoattachVSOCK": True}, status={"VSOCKCID": cid})
    assert fields(t.problems) == ["status.VSOCKCID"]


def test_virtiofs_uses_the_sidecar_socket_with_shared_memory_and_a_bounded_wait():
    t = run({"filesystems": [{"name": "shared", "virtiofs": {}}]},
            volumes=[{"name": "shared", "persistentVolumeClaim": {"claimName": "pvc1"}}],
            share_dir="/var/run/kubevirt")
    assert t.problems == []
    assert t.config.fs[0].to_api() == {"tag": "shared", "socket": "/var/run/kubevirt/virtiofs-containers/shared.sock",
                                       "num_queues": 1, "queue_size": 1024, "id": "shared"}
    assert t.shared_memory_reasons == [f"{D}.filesystems[0]: virtiofs filesystem 'shared'"]
    assert isinstance(t.steps[0], WaitForSocket)
    assert t.steps[0].path == "/var/run/kubevirt/virtiofs-containers/shared.sock"


def test_a_filesystem_without_virtiofs_or_volume_is_refused():
    t = run({"filesystems": [{"name": "a"}, {"name": "b", "virtiofs": {}}]})
    assert fields(t.problems) == [f"{D}.filesystems[0]", f"{D}.filesystems[1].name"]


@pytest.mark.parametrize("name", ["../x", "f" * 37])
def test_a_filesystem_name_that_cannot_be_a_socket_file_or_mount_tag_is_refused(name):
    t = run({"filesystems": [{"name": name, "virtiofs": {}}]},
            volumes=[{"name": name, "persistentVolumeClaim": {"claimName": "c"}}])
    assert fields(t.problems) == [f"{D}.filesystems[0].name"]
    assert t.config.fs is None and t.steps == []


GPU = {"gpus": [{"name": "gpu1", "deviceName": "nvidia.com/GP102GL_Tesla_P40"}]}


def test_gpus_and_host_devices_at_admission_wait_for_the_device_plugin():
    t = run({**GPU, "hostDevices": [{"name": "nic", "deviceName": "intel.com/qat"}]})
    assert t.problems == [] and t.config.devices is None


def test_a_gpu_becomes_a_vfio_device_at_the_sysfs_path_of_its_pci_address():
    env = {"PCI_RESOURCE_NVIDIA_COM_GP102GL_TESLA_P40": "0000:3B:00.0,"}
    t = run(GPU, pod(environ=env))
    assert t.problems == []
    assert [d.to_api() for d in t.config.devices] == [{"path": "/sys/bus/pci/devices/0000:3b:00.0/", "id": "gpu-gpu1"}]


def test_two_host_devices_of_one_resource_get_different_addresses():
    env = {"PCI_RESOURCE_INTEL_COM_QAT": "0000:01:00.1,0000:01:00.2"}
    t = run({"hostDevices": [{"name": "a", "deviceName": "intel.com/qat"},
                             {"name": "b", "deviceName": "intel.com/qat"}]}, pod(environ=env))
    assert [d.path for d in t.config.devices] == ["/sys/bus/pci/devices/0000:01:00.1/",
                                                  "/sys/bus/pci/devices/0000:01:00.2/"]
    assert [d.id for d in t.config.devices] == ["hostdevice-a", "hostdevice-b"]


def test_a_mediated_device_uses_its_mdev_sysfs_path():
    # upstream's env var name keeps the dash of the resource name
    env = {"MDEV_PCI_RESOURCE_NVIDIA_COM_GRID_T4-1Q": "4b20d080-1b54-4048-85b3-a6a62d165c01"}
    t = run({"gpus": [{"name": "v", "deviceName": "nvidia.com/GRID_T4-1Q"}]}, pod(environ=env))
    assert t.config.devices[0].path == "/sys/bus/mdev/devices/4b20d080-1b54-4048-85b3-a6a62d165c01/"


def test_a_missing_device_plugin_variable_is_named_in_the_error():
    t = run(GPU, pod(environ={}))
    assert fields(t.problems) == [f"{D}.gpus[0].deviceName"]
    assert "PCI_RESOURCE_NVIDIA_COM_GP102GL_TESLA_P40" in t.problems[0].message


def test_a_malformed_device_plugin_variable_is_named_in_the_error():
    t = run(GPU, pod(environ={"PCI_RESOURCE_NVIDIA_COM_GP102GL_TESLA_P40": "3b:00.0"}))
    assert "PCI_RESOURCE_NVIDIA_COM_GP102GL_TESLA_P40='3b:00.0'" in t.problems[0].message


def test_more_devices_than_the_plugin_gave_is_an_error():
    env = {"PCI_RESOURCE_INTEL_COM_QAT": "0000:01:00.1"}
    t = run({"hostDevices": [{"name": "a", "deviceName": "intel.com/qat"},
                             {"name": "b", "deviceName": "intel.com/qat"}]}, pod(environ=env))
    assert fields(t.problems) == [f"{D}.hostDevices[1].deviceName"]
    assert "no more devices" in t.problems[0].message


def test_a_usb_host_device_is_refused_because_cloud_hypervisor_has_no_usb():
    t = run({"hostDevices": [{"name": "usb", "deviceName": "kubevirt.io/storage"}]},
            pod(environ={"USB_RESOURCE_KUBEVIRT_IO_STORAGE": "3:4"}))
    assert "USB" in t.problems[0].message


def test_each_vfio_device_is_checked_before_boot_for_its_field():
    from ch_launcher.convert.plan import RequireVfioDevice

    env = {"PCI_RESOURCE_NVIDIA_COM_GP102GL_TESLA_P40": "0000:65:00.0", "PCI_RESOURCE_INTEL_COM_QAT": "0000:01:00.1"}
    t = run({**GPU, "hostDevices": [{"name": "q", "deviceName": "intel.com/qat"}]}, pod(environ=env))
    checks = [s for s in t.steps if isinstance(s, RequireVfioDevice)]
    assert [(s.field, s.sysfs_path) for s in checks] == [
        (f"{D}.gpus[0]", "/sys/bus/pci/devices/0000:65:00.0/"),
        (f"{D}.hostDevices[0]", "/sys/bus/pci/devices/0000:01:00.1/")]
    assert checks[0].what == "GPU gpu1 (nvidia.com/GP102GL_Tesla_P40)"


def test_at_admission_a_host_device_is_warned_it_must_not_be_usb():
    t = run({"hostDevices": [{"name": "usb", "deviceName": "kubevirt.io/storage"}]})
    assert fields(t.warnings) == [f"{D}.hostDevices[0]"] and not t.problems
    assert "kubevirt.io/storage must be a PCI or mediated device" in t.warnings[0].message


USB_CR = PermittedHostDevices(pci=frozenset({"intel.com/qat"}), mediated=frozenset({"nvidia.com/GRID_T4-1Q"}),
                              usb=frozenset({"kubevirt.io/storage"}))


def test_at_admission_a_resource_the_kubevirt_cr_permits_as_usb_is_refused_at_its_device_name():
    t = run({"hostDevices": [{"name": "q", "deviceName": "intel.com/qat"},
                             {"name": "stick", "deviceName": "kubevirt.io/storage"}],
             "gpus": [{"name": "g", "deviceName": "kubevirt.io/storage"}]}, permitted_host_devices=USB_CR)
    assert fields(t.problems) == [f"{D}.gpus[0].deviceName", f"{D}.hostDevices[1].deviceName"]
    assert t.problems[1].message == (
        f"{D}.hostDevices[1].deviceName 'kubevirt.io/storage' is not supported: it is a USB device "
        "(permittedHostDevices.usb of the KubeVirt CR) and Cloud Hypervisor has no USB controller")
    assert t.problems[1].reason == "FieldValueNotSupported"
    assert t.warnings == []  # intel.com/qat is PCI: nothing to warn about


@pytest.mark.parametrize("resource", ["nvidia.com/GRID_T4-1Q", "intel.com/qat"])
def test_at_admission_a_resource_the_kubevirt_cr_permits_as_pci_or_mediated_passes_without_a_word(resource):
    t = run({"hostDevices": [{"name": "h", "deviceName": resource}]}, permitted_host_devices=USB_CR)
    assert t.problems == [] and t.warnings == []


def test_at_admission_a_resource_the_kubevirt_cr_does_not_list_or_lists_twice_is_warned_about():
    both = PermittedHostDevices(pci=frozenset({"example.org/both"}), usb=frozenset({"example.org/both"}))
    for permitted, resource in ((USB_CR, "example.org/unlisted"), (both, "example.org/both")):
        t = run({"hostDevices": [{"name": "h", "deviceName": resource}]}, permitted_host_devices=permitted)
        assert t.problems == [] and fields(t.warnings) == [f"{D}.hostDevices[0]"]
        assert f"{resource} must be a PCI or mediated device" in t.warnings[0].message


def test_in_the_pod_the_device_plugins_variable_decides_not_the_kubevirt_cr():
    env = {"PCI_RESOURCE_KUBEVIRT_IO_STORAGE": "0000:01:00.1"}
    t = run({"hostDevices": [{"name": "h", "deviceName": "kubevirt.io/storage"}]}, pod(environ=env),
            permitted_host_devices=USB_CR)
    assert t.problems == [] and [d.path for d in t.config.devices] == ["/sys/bus/pci/devices/0000:01:00.1/"]


def test_devices_from_dra_claims_are_refused():
    t = run({"gpus": [{"name": "g", "claimName": "c", "requestName": "r"}]})
    assert fields(t.problems) == [f"{D}.gpus[0].claimName"]


def test_i6300esb_watchdog_becomes_virtio_watchdog_with_a_warning():
    t = run({"watchdog": {"name": "w", "i6300esb": {"action": "poweroff"}}})
    assert t.problems == [] and t.config.watchdog is True
    assert fields(t.warnings) == [f"{D}.watchdog", f"{D}.watchdog.i6300esb.action"]


def test_diag288_watchdog_is_refused():
    t = run({"watchdog": {"name": "w", "diag288": {}}})
    assert fields(t.problems) == [f"{D}.watchdog.diag288"]


def test_panic_devices_map_to_pvpanic_and_hyperv_is_refused():
    t = run({"panicDevices": [{"model": "pvpanic"}]})
    assert t.config.pvpanic is True and t.warnings == []
    isa = run({"panicDevices": [{"model": "isa"}]})
    assert isa.config.pvpanic is True and fields(isa.warnings) == [f"{D}.panicDevices[0].model"]
    hyperv = run({"panicDevices": [{"model": "hyperv"}]})
    assert fields(hyperv.problems) == [f"{D}.panicDevices[0].model"]


def test_graphics_is_a_warning_when_nil_or_true_and_silent_when_false():
    body = vmi([], [])
    t = translation(body)
    configure_devices(t)
    assert t.problems == [] and fields(t.warnings) == [f"{D}.autoattachGraphicsDevice"]
    assert run({"autoattachGraphicsDevice": False}).warnings == []


def test_display_input_and_sound_devices_are_dropped_with_warnings():
    t = run({"video": {"type": "virtio"}, "inputs": [{"name": "tablet", "type": "tablet", "bus": "usb"}],
             "autoattachInputDevice": True, "sound": {"name": "audio"}})
    assert t.problems == []
    assert fields(t.warnings) == [f"{D}.video", f"{D}.inputs", f"{D}.autoattachInputDevice", f"{D}.sound"]


@pytest.mark.parametrize("devices, field", [
    ({"clientPassthrough": {}}, f"{D}.clientPassthrough"),
    ({"downwardMetrics": {}}, f"{D}.downwardMetrics"),
    ({"useVirtioTransitional": True}, f"{D}.useVirtioTransitional"),
])
def test_devices_cloud_hypervisor_lacks_are_refused_with_their_path(devices, field):
    t = run(devices)
    assert fields(t.problems) == [field]
    assert t.problems[0].message.startswith(field)


def test_a_disabled_tpm_is_fine():
    assert run({"tpm": {"enabled": False}}).problems == []


def test_a_tpm_is_cloud_hypervisors_tpm_on_an_swtpm_socket_with_state_by_firmware_uuid():
    from ch_launcher.convert import check
    from tests.unit.convert.vmibuild import container_disk, virtio, vmi

    body = vmi(disks=[virtio("d")], volumes=[container_disk("d")])
    body["spec"]["domain"]["devices"]["tpm"] = {"persistent": True}
    body["spec"]["domain"]["firmware"] = {"uuid": "11111111-2222-3333-4444-555555555555",
                                          "bootloader": {"efi": {"secureBoot": False}}}  # Windows 11: TPM + EFI
    body["status"] = {"runtimeUser": 107}
    verdict = check(body)
    assert verdict.allowed, verdict.problems
    plan = verdict.plan
    uid = body["metadata"]["uid"]
    assert plan.config.tpm.socket == f"/var/run/kubevirt-private/{uid}/swtpm.sock"
    assert plan.tpm.state_dir == ("/var/run/kubevirt-private/libvirt/qemu/swtpm/"
                                  "11111111-2222-3333-4444-555555555555/tpm2")
    assert plan.tpm.persistent
    body["status"] = {}  # a root VMI: where KubeVirt mounts the state for root
    assert check(body).plan.tpm.state_dir.startswith("/var/lib/libvirt/swtpm/")


def test_every_device_warning_fits_in_a_kubectl_line():
    t = run({"autoattachGraphicsDevice": True, "video": {}, "inputs": [{}], "autoattachInputDevice": True,
             "sound": {}, "watchdog": {"i6300esb": {"action": "shutdown"}}, "autoattachVSOCK": True,
             "panicDevices": [{"model": "isa"}],
             "gpus": [{"name": "g", "deviceName": "x/y", "virtualGPUOptions": {"display": {"enabled": True}}}]})
    assert len(t.warnings) == 10
    assert all(len(w.message) <= 120 for w in t.warnings), [w.message for w in t.warnings]
