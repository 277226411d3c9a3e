"""Builders for compute, memory, firmware, storage and console tests: small VMIs, KubeVirt JSON names."""

from __future__ import annotations

import copy
from typing import Any

from ch_launcher.convert import LauncherEnv, LauncherOptions, PodFacts, Verdict, check
from ch_launcher.convert.context import Translation
from ch_launcher.kubevirt.vmi import parse_vmi
from tests.builders import new_vmi, with_devices, with_domain, with_memory, with_spec, with_uid

UID = "0b6e5e36-7e0c-4c1a-9d4e-000000000003"
FIRMWARE_UUID = "5d307ca9-b3ef-428c-8861-06e72d69f223"


def vmi(domain: dict[str, Any] | None = None, volumes: list[dict[str, Any]] | None = None,
        disks: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    """A VMI with 1Gi of memory, no NICs, and the given domain fields (`devices` merges into the
    devices), disks, volumes and spec fields."""
    domain = dict(domain or {})
    return new_vmi(
        "testvmi", with_uid(UID), with_memory("1Gi"),
        with_devices(autoattachPodInterface=False, autoattachGraphicsDevice=False),
        with_devices(**domain.pop("devices", {})), with_domain(**domain),
        *([with_devices(disks=disks)] if disks is not None else []),
        with_spec(volumes=volumes or [], **spec),
    )


def container_disk(name: str = "rootdisk") -> dict[str, Any]:
    return {"name": name, "containerDisk": {"image": "quay.io/containerdisks/fedora:latest"}}


def virtio(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "disk": {"bus": "virtio"}, **extra}


def pvc_status(name: str, capacity: str | None = "10Gi", request: str | None = None,
               mode: str = "Filesystem") -> dict[str, Any]:
    info: dict[str, Any] = {"volumeMode": mode, "capacity": {}, "requests": {}}
    if capacity:
        info["capacity"]["storage"] = capacity
    if request:
        info["requests"]["storage"] = request
    return {"name": name, "persistentVolumeClaimInfo": info}


def with_status(body: dict[str, Any], *volume_status: dict[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(body)
    body["status"] = {"volumeStatus": list(volume_status)}
    return body


def launcher_env(pod: PodFacts | None = None, **dirs: str) -> LauncherEnv:
    """The launcher's view: a pod (with a cpuset) unless given."""
    return LauncherEnv(pod=pod if pod is not None else PodFacts(cpuset=(2, 3, 4, 5)), **dirs)


def run(body: dict[str, Any], env: LauncherEnv | None = None, options: LauncherOptions | None = None) -> Verdict:
    """The whole translator, as the launcher runs it (the pod is present unless env says otherwise)."""
    return check(body, env or launcher_env(), options)


def translation(body: dict[str, Any], env: LauncherEnv | None = None,
                options: LauncherOptions | None = None) -> Translation:
    """A fresh Translation, for calling one configurator alone."""
    return Translation(parse_vmi(body), env or launcher_env(), options or LauncherOptions())


def fields(items: list[Any]) -> list[str]:
    return [p.field for p in items]


def problem(verdict: Verdict, field: str) -> Any:
    """The one problem reported at `field` (fails the test if there is none or several)."""
    found = [p for p in verdict.problems if p.field == field]
    assert len(found) == 1, f"expected one problem at {field}, got {verdict.problems}"
    return found[0]


def api(verdict: Verdict) -> dict[str, Any]:
    """The VmConfig as sent to the VMM; fails the test when the VMI was refused."""
    assert verdict.plan is not None, verdict.problems
    return verdict.plan.config.to_api()
