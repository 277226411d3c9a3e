"""VmConfig models against Cloud Hypervisor's OpenAPI spec (the real VMM ignores unknown fields,
so a misspelt field must fail here), and the simulated VMM's reading of that spec."""

from __future__ import annotations

import dataclasses
import sys
import typing
from typing import Any

import pytest
import yaml

from ch_launcher.ch import vmconfig as vc
from ch_launcher.jsonmodel import DecodeError, Record, decode
from tests.conftest import OPENAPI_SPEC, REPO, require_shared

sys.path.insert(0, str(REPO / "tests" / "fakes"))
import fakech_checks
import fakech_yaml

# model -> the spec's schema name
SCHEMA_OF: dict[type[Record], str] = {
    vc.PayloadConfig: "PayloadConfig", vc.CpuTopology: "CpuTopology", vc.CpuAffinity: "CpuAffinity",
    vc.CpusConfig: "CpusConfig", vc.MemoryZoneConfig: "MemoryZoneConfig", vc.MemoryConfig: "MemoryConfig",
    vc.TokenBucket: "TokenBucket", vc.RateLimiterConfig: "RateLimiterConfig", vc.DiskConfig: "DiskConfig",
    vc.NetConfig: "NetConfig", vc.FsConfig: "FsConfig", vc.VsockConfig: "VsockConfig", vc.RngConfig: "RngConfig",
    vc.BalloonConfig: "BalloonConfig", vc.ConsoleConfig: "ConsoleConfig", vc.SerialConfig: "SerialConfig",
    vc.DeviceConfig: "DeviceConfig", vc.PlatformConfig: "PlatformConfig", vc.NumaDistance: "NumaDistance",
    vc.NumaConfig: "NumaConfig", vc.TpmConfig: "TpmConfig", vc.VmConfig: "VmConfig",
}  # fmt: skip


@pytest.fixture(scope="module")
def schemas() -> dict[str, Any]:
    require_shared(OPENAPI_SPEC)
    return yaml.safe_load(OPENAPI_SPEC.read_text())["components"]["schemas"]


@pytest.mark.parametrize("model", list(SCHEMA_OF), ids=[m.__name__ for m in SCHEMA_OF])
def test_every_model_field_exists_in_the_spec(model: type[Record], schemas: dict[str, Any]) -> None:
    props = schemas[SCHEMA_OF[model]]["properties"]
    for field in dataclasses.fields(model):
        assert field.name in props, f"{model.__name__}.{field.name} is not in the spec's {SCHEMA_OF[model]}"


def test_every_outbound_model_is_checked() -> None:
    outbound = {
        obj for obj in vars(vc).values()
        if isinstance(obj, type) and issubclass(obj, vc._Out) and obj is not vc._Out
    }  # fmt: skip
    assert outbound == set(SCHEMA_OF)


def full_config() -> vc.VmConfig:
    return vc.VmConfig(
        payload=vc.PayloadConfig(firmware="/usr/share/cloud-hypervisor/CLOUDHV.fd"),
        cpus=vc.CpusConfig(
            boot_vcpus=2, max_vcpus=4,
            topology=vc.CpuTopology(threads_per_core=1, cores_per_die=2, dies_per_package=1, packages=2),
            affinity=[vc.CpuAffinity(vcpu=0, host_cpus=[2])],
        ),
        memory=vc.MemoryConfig(size=1 << 30, shared=True, hugepages=True, hugepage_size=2 << 20,
                               zones=None),
        disks=[vc.DiskConfig(id="rootdisk", path="/d.qcow2", image_type="Qcow2", readonly=False, num_queues=2,
                             serial="root", rate_limiter_config=vc.RateLimiterConfig(
                                 bandwidth=vc.TokenBucket(size=1000, refill_time=100)))],
        net=[vc.NetConfig(id="default", tap="tap0", mac="02:00:00:00:00:01", mtu=1500, num_queues=2),
             vc.NetConfig(id="vu", vhost_user=True, vhost_socket="/vu.sock", vhost_mode="Client")],
        fs=[vc.FsConfig(tag="share", socket="/fs.sock", id="share")],
        vsock=vc.VsockConfig(cid=3, socket="/vsock.sock"),
        rng=vc.RngConfig(),
        balloon=vc.BalloonConfig(size=1 << 20, free_page_reporting=True),
        serial=vc.SerialConfig(mode="Socket", socket="/serial.sock"),
        console=vc.ConsoleConfig(mode="Off"),
        devices=[vc.DeviceConfig(path="/sys/bus/pci/devices/0000:01:00.0/", id="gpu")],
        platform=vc.PlatformConfig(num_pci_segments=1, system_serial_number="abc", system_uuid="u"),
        numa=[vc.NumaConfig(guest_numa_id=0, cpus=[0, 1], distances=[vc.NumaDistance(destination=0, distance=10)])],
        tpm=vc.TpmConfig(socket="/tpm.sock"),
        watchdog=True,
        pvpanic=True,
    )


def test_a_full_config_validates_against_the_spec(schemas: dict[str, Any]) -> None:
    from openapi_schema_validator import OAS30Validator

    body = full_config().to_api()
    spec = {"components": {"schemas": schemas}, **schemas["VmConfig"]}
    OAS30Validator(spec).validate(body)
    errors, unknown = fakech_checks.check_schema(body, "VmConfig", fakech_checks.load_spec(str(OPENAPI_SPEC)) or {})
    assert errors == [] and unknown == []


def test_serialised_config_has_no_nulls() -> None:
    def walk(v: Any) -> None:
        assert v is not None
        if isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(full_config().to_api())
    assert vc.VmConfig().to_api() == {}


def test_a_misspelt_field_is_refused() -> None:
    with pytest.raises(TypeError, match="boot_vcpu"):
        vc.CpusConfig(boot_vcpus=1, max_vcpus=1, boot_vcpu=2)  # type: ignore[call-arg]
    with pytest.raises(DecodeError, match="boot_vcpu: Extra inputs are not permitted"):
        decode(vc.CpusConfig, {"boot_vcpus": 1, "max_vcpus": 1, "boot_vcpu": 2})


def test_inbound_models_ignore_new_fields() -> None:
    info = decode(vc.VmInfo, {"state": "Running", "config": {}, "brand_new": 1})
    assert info.state == "Running"
    assert decode(vc.VmmPingResponse, {"version": "54.0.0", "new": True}).version == "54.0.0"


def test_an_optional_field_that_is_null_or_unreadable_takes_its_default() -> None:
    # Older VMMs write null for unset options; an independent VMM may shape one differently.
    info = decode(vc.VmInfo, {"state": "Paused", "config": None, "memory_actual_size": "a lot",
                                     "device_tree": ["_disk0"]})
    assert (info.state, info.config, info.memory_actual_size, info.device_tree) == ("Paused", {}, None, None)
    assert decode(vc.VmInfo, {"state": "Running"}).config == {}  # config left out
    pong = decode(vc.VmmPingResponse, {"version": "53.0.0", "build_version": None, "pid": "n/a",
                                              "features": None})
    assert (pong.version, pong.build_version, pong.pid, pong.features) == ("53.0.0", "", None, [])


def test_a_required_field_missing_or_wrong_still_makes_the_answer_unreadable() -> None:
    with pytest.raises(DecodeError, match="state"):
        decode(vc.VmInfo, {"config": {}})
    with pytest.raises(DecodeError, match="state"):
        decode(vc.VmInfo, {"state": None})
    with pytest.raises(DecodeError, match="bdf"):
        decode(vc.PciDeviceInfo, {"id": "_disk2"})


@pytest.mark.parametrize("answer,version", [
    ({"version": "53.0.0", "build_version": "v53.0.0"}, "53.0.0"),   # the real v53.0
    ({"build_version": "v53.0.0"}, "v53.0.0"),                        # no version: the build's
    ({"version": "", "build_version": "v53.0-7-gabcdef0"}, "v53.0-7-gabcdef0"),
    ({"version": "cloud-hypervisor", "build_version": "cloud-hypervisor v53.0.0-dirty"},
     "cloud-hypervisor v53.0.0-dirty"),
    ({"version": "54.0.0", "build_version": "v53.0.0"}, "54.0.0"),   # version is the word when it names one
    ({}, ""),
])
def test_the_ping_names_its_version_or_else_its_builds(answer: dict[str, Any], version: str) -> None:
    assert decode(vc.VmmPingResponse, answer).version == version


def _without_descriptions(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _without_descriptions(x) for k, x in v.items() if k != "description"}
    if isinstance(v, list):
        return [_without_descriptions(x) for x in v]
    return v


def test_the_simulated_vmm_reads_the_spec_without_pyyaml_the_same(schemas: dict[str, Any]) -> None:
    # Descriptions differ only in folded-block whitespace; everything the checks use is equal.
    text = OPENAPI_SPEC.read_text()
    assert _without_descriptions(fakech_yaml.parse_yaml(text)) == _without_descriptions(yaml.safe_load(text))


def test_the_simulated_vmm_spots_unknown_fields_and_wrong_types(schemas: dict[str, Any]) -> None:
    loaded = fakech_checks.load_spec(str(OPENAPI_SPEC))
    assert loaded is not None
    body = {"cpus": {"boot_vcpus": "2", "max_vcpus": 2, "boot_vcpu": 1}, "disks": [{"path": "/x", "imagetype": "Raw"}],
            "console": {"mode": "Serial"}, "generic_vhost_user": []}  # fmt: skip
    errors, unknown = fakech_checks.check_schema(body, "VmConfig", loaded)
    assert unknown == ["cpus.boot_vcpu", "disks[0].imagetype"]
    assert any("cpus.boot_vcpus" in e for e in errors)
    assert any("unknown variant `Serial`" in e for e in errors)


def test_literal_types_match_the_spec_enums(schemas: dict[str, Any]) -> None:
    for literal, schema in ((vc.ImageType, "ImageType"), (vc.ConsoleMode, "ConsoleMode")):
        assert set(typing.get_args(literal)) == set(schemas[schema]["enum"])
