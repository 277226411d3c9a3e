"""Translations per second: a typical VMI and a large one (16 disks, 8 NICs), against decoding alone.

In one run on this machine, for each VMI (a JSON-decoded dict, as the webhook and the launcher
hold it):
  - baseline: `parse_vmi` alone (decoding into the inbound model, `ch_launcher.jsonmodel`);
  - `check()` as the admission webhook runs it (no pod);
  - `translate()` as the launcher runs it (a pod with a cpuset, its links and MTUs).
Each is timed for about `--seconds` of this process's CPU time in five rounds (CPU time, not the
clock: the machine is shared); the median round is printed as operations per second of CPU with
the ratio to the baseline (how many decodes one translation costs).

Typical: 2 vCPUs, 2Gi, containerDisk + cloud-init NoCloud, one masquerade NIC, rng.
Large: 8 vCPUs with hotplug, 16Gi with virtio-mem, 16 disks (containerDisks, PVCs, emptyDisks,
a hostDisk, config volumes, cloud-init), 8 NICs (pod masquerade + 7 Multus bridges).
Usage: python bench/convert.py [--seconds S]
"""

from __future__ import annotations

import argparse
import copy
import functools
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ch_launcher.convert import LauncherEnv, PodFacts, check, translate  # noqa: E402
from ch_launcher.kubevirt.vmi import parse_vmi  # noqa: E402

UID = "7d7f5d70-3c8e-4a4e-9e53-2a43a8e0c001"


def typical() -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "fedora", "namespace": "tenant", "uid": UID,
                     "annotations": {"kubevirt-ch.io/hypervisor": "cloud-hypervisor"}},
        "spec": {
            "domain": {
                "cpu": {"cores": 2, "model": "host-model"},
                "memory": {"guest": "2Gi"},
                "firmware": {"uuid": "5d307ca9-b3ef-428c-8861-06e72d69f223"},
                "machine": {"type": "q35"},
                "devices": {"disks": [{"name": "containerdisk", "disk": {"bus": "virtio"}},
                                      {"name": "cloudinitdisk", "disk": {"bus": "virtio"}}],
                            "interfaces": [{"name": "default", "masquerade": {}}], "rng": {},
                            "autoattachGraphicsDevice": False},
            },
            "networks": [{"name": "default", "pod": {}}],
            "volumes": [{"name": "containerdisk", "containerDisk": {"image": "quay.io/containerdisks/fedora:41"}},
                        {"name": "cloudinitdisk", "cloudInitNoCloud": {"userData": "#cloud-config\npassword: x\n"}}],
        },
    }


def large() -> dict[str, Any]:
    body = typical()
    domain = body["spec"]["domain"]
    domain["cpu"] = {"sockets": 2, "cores": 4, "threads": 1, "maxSockets": 4, "model": "host-passthrough"}
    domain["memory"] = {"guest": "16Gi", "maxGuest": "32Gi"}
    disks, volumes, status = [], [], []
    for i in range(16):
        name = f"disk{i}"
        kind = i % 6
        if kind == 0:
            volumes.append({"name": name, "containerDisk": {"image": f"quay.io/img{i}:1"}})
        elif kind == 1:
            volumes.append({"name": name, "persistentVolumeClaim": {"claimName": f"pvc{i}"}})
            status.append({"name": name, "persistentVolumeClaimInfo": {
                "volumeMode": "Block" if i % 4 == 1 else "Filesystem", "capacity": {"storage": "100Gi"},
                "requests": {"storage": "80Gi"}}})
        elif kind == 2:
            volumes.append({"name": name, "emptyDisk": {"capacity": "10Gi"}})
        elif kind == 3:
            volumes.append({"name": name, "configMap": {"name": f"cm{i}"}})
        elif kind == 4:
            volumes.append({"name": name, "hostDisk": {"path": f"/data/{name}.img", "type": "DiskOrCreate",
                                                      "capacity": "5Gi"}})
        else:
            volumes.append({"name": name, "secret": {"secretName": f"s{i}"}})
        disks.append({"name": name, "disk": {"bus": "virtio"}, "cache": "none", "serial": f"SN{i:04d}",
                      **({"bootOrder": 1} if i == 0 else {})})
    disks[-1] = {"name": "cloudinitdisk", "disk": {"bus": "virtio"}}
    volumes[-1] = {"name": "cloudinitdisk", "cloudInitNoCloud": {"userData": "#cloud-config\n" + "x: y\n" * 200}}
    domain["devices"]["disks"] = disks
    domain["devices"]["blockMultiQueue"] = True
    interfaces = [{"name": "default", "masquerade": {}}]
    networks: list[dict[str, Any]] = [{"name": "default", "pod": {}}]
    for i in range(1, 8):
        interfaces.append({"name": f"net{i}", "bridge": {}})
        networks.append({"name": f"net{i}", "multus": {"networkName": f"tenant/br{i}"}})
    domain["devices"]["interfaces"] = interfaces
    body["spec"]["networks"] = networks
    body["spec"]["volumes"] = volumes
    body["status"] = {"volumeStatus": status}
    return body


def pod_env() -> LauncherEnv:
    links = {"eth0": 1500, "tap0": 1500, **{f"net{i}": 9000 for i in range(1, 8)},
             **{f"tap{i}": 9000 for i in range(1, 8)}}
    return LauncherEnv(pod=PodFacts(cpuset=tuple(range(16)), link_mtu=links,
                                    link_mac={"eth0": "0a:58:0a:80:00:07"}))


def rate(fn: Callable[[], object], seconds: float) -> float:
    """Median operations per second of CPU time over five rounds of about seconds/5 each."""
    rounds = []
    for _ in range(5):
        n, start = 0, time.process_time()
        deadline = start + seconds / 5
        while True:
            for _ in range(20):
                fn()
            n += 20
            now = time.process_time()
            if now >= deadline:
                break
        rounds.append(n / (now - start))
    return statistics.median(rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="time per measurement (default 5)")
    args = parser.parse_args()
    admission, launcher = LauncherEnv(), pod_env()
    print(f"bench/convert.py: {args.seconds:g} s of CPU per figure, median of 5 rounds (load {os.getloadavg()[0]:.1f})")
    for label, make in (("typical", typical), ("large (16 disks, 8 NICs)", large)):
        body = make()
        for env, name in ((admission, "check"), (launcher, "translate")):
            verdict = check(copy.deepcopy(body), env)
            if verdict.problems:  # a benchmark of refusals would measure the wrong thing
                raise SystemExit(f"{label} VMI is refused ({name}): {verdict.problems}")
        base = rate(functools.partial(parse_vmi, body), args.seconds)
        adm = rate(functools.partial(check, body, admission), args.seconds)
        run = rate(functools.partial(translate, body, launcher), args.seconds)
        print(f"{label}:")
        print(f"  parse_vmi (baseline)       {base:10.0f}/s")
        print(f"  check()    (admission)     {adm:10.0f}/s   {base / adm:5.1f}x the decode time")
        print(f"  translate() (launcher)     {run:10.0f}/s   {base / run:5.1f}x the decode time")


if __name__ == "__main__":
    main()
