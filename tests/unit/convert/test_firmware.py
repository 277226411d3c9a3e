"""Firmware and boot: BIOS, EFI, Secure Boot, direct kernel boot, SMBIOS, features."""

from __future__ import annotations

from typing import Any

import pytest

from ch_launcher.convert import LauncherEnv, LauncherOptions, SMBios
from ch_launcher.convert.plan import RequireFile
from tests.unit.convert.vmibuild import FIRMWARE_UUID, api, fields, launcher_env, problem, run, vmi

FW = "/opt/fw"
KERNEL_BOOT = {"container": {"image": "quay.io/k/kernel:1", "kernelPath": "/boot/vmlinuz-virt",
                             "initrdPath": "/boot/initramfs-virt"}, "kernelArgs": "console=ttyS0"}


def env(**kw: Any) -> LauncherEnv:
    return launcher_env(firmware_dir=FW, container_disk_dir="/cd", **kw)


def required(verdict: Any) -> list[tuple[str, str]]:
    assert verdict.plan is not None, verdict.problems
    return [(s.field, s.path) for s in verdict.plan.steps if isinstance(s, RequireFile)]


def test_a_vmi_without_firmware_boots_rust_hypervisor_firmware_which_must_exist() -> None:
    verdict = run(vmi(), env())
    assert api(verdict)["payload"] == {"firmware": f"{FW}/hypervisor-fw"}
    assert required(verdict) == [("spec.domain.firmware.bootloader", f"{FW}/hypervisor-fw")]


def test_efi_without_secure_boot_boots_cloudhv_fd() -> None:
    verdict = run(vmi({"firmware": {"bootloader": {"efi": {"secureBoot": False}}}}), env())
    assert api(verdict)["payload"] == {"firmware": f"{FW}/CLOUDHV.fd"}
    assert required(verdict) == [("spec.domain.firmware.bootloader.efi", f"{FW}/CLOUDHV.fd")]


def test_efi_without_a_secure_boot_setting_means_secure_boot_and_is_refused() -> None:
    p = problem(run(vmi({"firmware": {"bootloader": {"efi": {}}}})), "spec.domain.firmware.bootloader.efi.secureBoot")
    assert "secureBoot: false" in p.message


def test_persistent_efi_variables_are_refused() -> None:
    problem(run(vmi({"firmware": {"bootloader": {"efi": {"secureBoot": False, "persistent": True}}}})),
            "spec.domain.firmware.bootloader.efi.persistent")


def test_bios_and_efi_together_are_invalid() -> None:
    p = problem(run(vmi({"firmware": {"bootloader": {"bios": {}, "efi": {"secureBoot": False}}}})),
                "spec.domain.firmware.bootloader")
    assert p.reason == "FieldValueInvalid"


def test_kernel_boot_boots_the_kernel_boot_containers_files_directly() -> None:
    verdict = run(vmi({"firmware": {"kernelBoot": KERNEL_BOOT}}), env())
    assert api(verdict)["payload"] == {"kernel": "/cd/kernel-boot/vmlinuz-virt", "cmdline": "console=ttyS0",
                                       "initramfs": "/cd/kernel-boot/initramfs-virt"}
    assert required(verdict) == [
        ("spec.domain.firmware.kernelBoot.container.kernelPath", "/cd/kernel-boot/vmlinuz-virt"),
        ("spec.domain.firmware.kernelBoot.container.initrdPath", "/cd/kernel-boot/initramfs-virt"),
    ]


def test_kernel_boot_ignores_a_bootloader_with_a_warning() -> None:
    verdict = run(vmi({"firmware": {"kernelBoot": KERNEL_BOOT, "bootloader": {"bios": {}}}}), env())
    assert "firmware" not in api(verdict)["payload"]
    assert fields(verdict.warnings) == ["spec.domain.firmware.bootloader"]


def test_kernel_args_without_a_kernel_are_invalid() -> None:
    problem(run(vmi({"firmware": {"kernelBoot": {"kernelArgs": "quiet"}}})),
            "spec.domain.firmware.kernelBoot.kernelArgs")


def test_an_initrd_without_a_kernel_is_refused() -> None:
    body = vmi({"firmware": {"kernelBoot": {"container": {"image": "k", "initrdPath": "/boot/initrd"}}}})
    assert problem(run(body), "spec.domain.firmware.kernelBoot.container.kernelPath").reason == "FieldValueRequired"


@pytest.mark.parametrize("kernel", ["/boot/", "/boot/..", "."])
def test_a_kernel_path_that_names_a_directory_is_invalid(kernel: str) -> None:
    body = vmi({"firmware": {"kernelBoot": {"container": {"image": "k", "kernelPath": kernel}}}})
    assert problem(run(body), "spec.domain.firmware.kernelBoot.container.kernelPath").reason == "FieldValueInvalid"


def test_firmware_uuid_serial_and_smbios_values_reach_the_platform() -> None:
    options = LauncherOptions(smbios=SMBios(manufacturer="KubeVirt", product="None", family="KubeVirt", version="1"))
    body = vmi({"firmware": {"uuid": FIRMWARE_UUID, "serial": "abc-123"}})
    assert api(run(body, options=options))["platform"] == {
        "system_serial_number": "abc-123", "system_uuid": FIRMWARE_UUID, "system_manufacturer": "KubeVirt",
        "system_product_name": "None", "system_version": "1", "system_family": "KubeVirt"}


def test_a_firmware_uuid_that_is_not_a_uuid_is_invalid() -> None:
    assert problem(run(vmi({"firmware": {"uuid": "not-a-uuid"}})), "spec.domain.firmware.uuid").reason == \
        "FieldValueInvalid"


def test_acpi_tables_from_secrets_are_refused() -> None:
    body = vmi({"firmware": {"acpi": {"slicNameRef": "slic"}}},
               volumes=[{"name": "slic", "secret": {"secretName": "s"}}])
    verdict = run(body)
    assert fields(verdict.problems) == ["spec.domain.firmware.acpi"]  # the table's volume gets no disk


@pytest.mark.parametrize("features, field", [
    ({"smm": {}}, "spec.domain.features.smm"),
    ({"smm": {"enabled": True}}, "spec.domain.features.smm"),
    ({"acpi": {"enabled": False}}, "spec.domain.features.acpi"),
    ({"apic": {"enabled": False}}, "spec.domain.features.apic"),
    ({"kvm": {"hidden": True}}, "spec.domain.features.kvm.hidden"),
])
def test_features_cloud_hypervisor_cannot_honour_are_refused(features: dict[str, Any], field: str) -> None:
    assert fields(run(vmi({"features": features})).problems) == [field]


def test_features_it_always_has_are_accepted_silently() -> None:
    verdict = run(vmi({"features": {"acpi": {}, "apic": {}, "smm": {"enabled": False}, "pvspinlock": {}}}))
    assert verdict.allowed and not verdict.warnings


def test_turning_off_paravirtual_spinlocks_is_a_warning() -> None:
    verdict = run(vmi({"features": {"pvspinlock": {"enabled": False}}}))
    assert fields(verdict.warnings) == ["spec.domain.features.pvspinlock"]


def test_hyperv_enlightenments_turn_on_kvm_hyperv_and_warn_about_the_ones_it_lacks() -> None:
    hyperv = {"relaxed": {}, "vapic": {}, "spinlocks": {"spinlocks": 8191}, "vendorid": {"vendorid": "x"},
              "evmcs": {"enabled": False}, "reset": {}}
    verdict = run(vmi({"features": {"hyperv": hyperv}}))
    assert api(verdict)["cpus"]["kvm_hyperv"] is True
    assert fields(verdict.warnings) == ["spec.domain.features.hyperv.vendorid", "spec.domain.features.hyperv.reset"]


def test_a_null_hyperv_enlightenment_is_absent_and_a_non_object_one_invalid() -> None:
    off = run(vmi({"features": {"hyperv": {"relaxed": None}}}))
    assert off.allowed and "kvm_hyperv" not in api(off)["cpus"]
    assert problem(run(vmi({"features": {"hyperv": {"relaxed": True}}})),
                   "spec.domain.features.hyperv.relaxed").reason == "FieldValueInvalid"


def test_hyperv_passthrough_turns_on_kvm_hyperv_with_a_warning() -> None:
    verdict = run(vmi({"features": {"hypervPassthrough": {}}}))
    assert api(verdict)["cpus"]["kvm_hyperv"] is True
    assert fields(verdict.warnings) == ["spec.domain.features.hypervPassthrough"]
