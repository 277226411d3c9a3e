"""Builders for network and device tests: small VMIs and pods, KubeVirt JSON names."""

from __future__ import annotations

import json
from typing import Any

from ch_launcher.ch.vmconfig import CpusConfig
from ch_launcher.convert.context import LauncherEnv, LauncherOptions, PodFacts, Translation
from ch_launcher.kubevirt.vmi import parse_vmi
from tests.builders import new_vmi, with_devices, with_interfaces, with_memory, with_networks, with_spec, with_uid

UID = "6a1e2b3c-0000-4000-8000-000000000001"


def vmi(interfaces: list[dict[str, Any]] | None = None, networks: list[dict[str, Any]] | None = None,
        devices: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    """A VMI dict with the given interfaces/networks (default: masquerade on the pod network)."""
    if interfaces is None:
        interfaces = [{"name": "default", "masquerade": {}}]
    if networks is None:
        networks = [{"name": "default", "pod": {}}]
    return new_vmi("testvmi", with_uid(UID), with_interfaces(interfaces), with_devices(**(devices or {})),
                   with_memory("1Gi"), with_networks(networks), with_spec(**spec))


def multus(name: str, network_name: str = "", default: bool = False) -> dict[str, Any]:
    return {"name": name, "multus": {"networkName": network_name or f"ns/{name}", "default": default}}


def pod(links: dict[str, tuple[int, str]] | None = None, environ: dict[str, str] | None = None,
        network_info: Any = None) -> PodFacts:
    """Pod facts: links as name -> (mtu, mac); network_info as an object (JSON-encoded) or text."""
    links = links or {}
    if network_info is not None and not isinstance(network_info, str):
        network_info = json.dumps(network_info)
    return PodFacts(environ=environ or {}, link_mtu={k: v[0] for k, v in links.items()},
                    link_mac={k: v[1] for k, v in links.items()}, network_info=network_info)


def translation(body: dict[str, Any], pod_facts: PodFacts | None = None, vcpus: int | None = None,
                attachments: dict[str, str] | None = None, **env: Any) -> Translation:
    """A Translation of `body` before any configurator ran (vcpus: as compute would set them)."""
    t = Translation(parse_vmi(body), LauncherEnv(pod=pod_facts, **env),
                    LauncherOptions(interface_domain_attachment=attachments or {}))
    if vcpus is not None:
        t.config.cpus = CpusConfig(boot_vcpus=vcpus, max_vcpus=vcpus)
    return t


def fields(items: list[Any]) -> list[str]:
    return [p.field for p in items]
