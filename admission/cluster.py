"""What the webhooks know about the cluster's KubeVirt, and the version gate built on it. Pure.

`KubeVirtStatus` is read from the KubeVirt CR (`kube.py` reads it, `app.py` caches it):
`status.observedKubeVirtVersion`, the network binding plugins' declared memory overheads
(`spec.configuration.network.binding[<name>].computeResourceOverhead.requests.memory`), the
resource names of the permitted host devices (`spec.configuration.permittedHostDevices`), which
tell the translator which host devices are USB, and the default eviction strategy
(`spec.configuration.evictionStrategy`), which applies to VMIs without their own.

Version gate (`ecosystem.md` §7.2, handler-launcher skew): Cloud Hypervisor objects are refused
when the observed version is outside `kubevirt.supportedVersions`, or cannot be read; objects
without the selection never reach the gate. Where it runs: in the pod mutator for every launcher
pod (the authoritative point: that is where ch-launcher meets this cluster's virt-handler), and
in the validating webhook on CREATE only, so that `kubectl apply` of a new CH object fails early
with a clear message while updates of existing objects (including KubeVirt's own) are never
blocked by it.

`conditions()`: what about the cluster concerns every Cloud Hypervisor VMI at once (the CR cannot
be read, its version is outside the range, its workload updater would evict or migrate them
because virt-controller's launcher image cannot be read from it).
The server reports these to operators, not to the authors of VMIs.

`kubevirt_launcher_image()` is virt-controller's launcher image as virt-operator computes it
(`pkg/virt-operator/resource/generate/components/deployments.go`: `NewControllerDeployment`,
`--launcher-image`): the deployment config's `virtLauncherImage` when set, otherwise
`<registry>/<imagePrefix>virt-launcher:<kubeVirtVersion>` (`AddVersionSeparatorPrefix`), read
from the KubeVirt CR's `status.targetDeploymentConfig` (what virt-operator is deploying; the
workload updater only acts once it equals the observed one), else `observedDeploymentConfig`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from admission.selection import get, object_at
from admission.versions import VersionRange
from ch_launcher.convert import PermittedHostDevices
from ch_launcher.kubevirt.quantity import quantity_bytes

DEPLOYMENT_CONFIGS = ("targetDeploymentConfig", "observedDeploymentConfig")


@dataclass(frozen=True)
class LauncherImage:
    """virt-controller's launcher image (`image`), or why it is not known (`error`)."""

    image: str | None
    source: str = ""  # the KubeVirt CR's status field it came from
    error: str = ""


def kubevirt_launcher_image(cr: Any) -> LauncherImage:
    """virt-controller's `--launcher-image`, from a KubeVirt CR. Never raises."""
    status = get(cr, "status")
    if not isinstance(status, dict):
        return LauncherImage(None, error="the KubeVirt resource has no status")
    problems = []
    for key in DEPLOYMENT_CONFIGS:
        text = status.get(key)
        if not isinstance(text, str) or not text:
            continue
        try:
            config = json.loads(text)
        except ValueError as e:
            problems.append(f"status.{key} is not JSON ({e})")
            continue
        if not isinstance(config, dict):
            problems.append(f"status.{key} is not a JSON object")
            continue
        image = config.get("virtLauncherImage")
        if isinstance(image, str) and image:
            return LauncherImage(image, f"status.{key}")
        fields = [config.get(k, "") for k in ("registry", "imagePrefix", "kubeVirtVersion")]
        if not all(isinstance(f, str) for f in fields) or (not fields[0] and not fields[2]):
            problems.append(f"status.{key} names no registry and version")
            continue
        registry, prefix, version = fields
        return LauncherImage(f"{registry}/{prefix}virt-launcher{_version_suffix(version)}", f"status.{key}")
    return LauncherImage(None, error="; ".join(problems) or
                         "the KubeVirt resource has no status.targetDeploymentConfig or observedDeploymentConfig")


def permitted_host_devices(cr: Any) -> PermittedHostDevices:
    """The `resourceName`s of a KubeVirt CR's `spec.configuration.permittedHostDevices` lists
    (`pciHostDevices`, `mediatedDevices`, `usb`: kubevirt `staging/src/kubevirt.io/api/core/v1/types.go`
    @d923fdb815cd). Never raises: an entry without a string `resourceName` (the CRD requires
    one) is skipped."""
    permitted = get(cr, "spec", "configuration", "permittedHostDevices")

    def names(key: str) -> frozenset[str]:
        entries = get(permitted, key)
        return frozenset(e["resourceName"] for e in entries if isinstance(e, dict) and isinstance(
            e.get("resourceName"), str) and e["resourceName"]) if isinstance(entries, list) else frozenset()

    return PermittedHostDevices(pci=names("pciHostDevices"), mediated=names("mediatedDevices"), usb=names("usb"))


def _version_suffix(version: str) -> str:
    """`AddVersionSeparatorPrefix`: a tag gets `:`; a template (`{{if ...`) is left as it is."""
    return version if version.startswith("{{if") else f":{version}"


@dataclass(frozen=True)
class KubeVirtStatus:
    """The cluster's KubeVirt as last read. `error` says why `version` is unknown."""

    version: str | None = None
    bindings: Mapping[str, int] = field(default_factory=dict)
    error: str | None = None
    ratio: str | None = None  # spec.configuration.additionalGuestMemoryOverheadRatio (KubeVirt's own)
    update_methods: tuple[str, ...] = ()  # spec.workloadUpdateStrategy.workloadUpdateMethods
    # virt-controller's launcher image (status.targetDeploymentConfig / observedDeploymentConfig)
    launcher_image: LauncherImage = field(default_factory=lambda: LauncherImage(None, error="not read"))
    # spec.configuration.permittedHostDevices (which host-device resources are USB)
    host_devices: PermittedHostDevices = field(default_factory=PermittedHostDevices)
    # spec.configuration.evictionStrategy ("" when unset: KubeVirt's default is None)
    eviction_strategy: str = ""

    @classmethod
    def from_cr(cls, cr: Any) -> KubeVirtStatus:
        """Build from a KubeVirt CR (a decoded object). Never raises: oddities become `error`."""
        if not isinstance(cr, dict):
            return cls(error="the KubeVirt resource is not an object")
        status = object_at(cr, "status")
        version = status.get("observedKubeVirtVersion")
        bindings: dict[str, int] = {}
        spec_bindings = get(cr, "spec", "configuration", "network", "binding")
        if isinstance(spec_bindings, dict):
            for name, plugin in spec_bindings.items():
                memory = get(plugin, "computeResourceOverhead", "requests", "memory")
                if memory is not None:
                    # KubeVirt validates these; an unparsable one adds nothing, as in KubeVirt
                    with contextlib.suppress(ValueError):
                        bindings[str(name)] = quantity_bytes(memory)
        ratio = get(cr, "spec", "configuration", "additionalGuestMemoryOverheadRatio")
        ratio = ratio if isinstance(ratio, str) and ratio else None
        methods = get(cr, "spec", "workloadUpdateStrategy", "workloadUpdateMethods")
        methods = tuple(m for m in methods if isinstance(m, str)) if isinstance(methods, list) else ()
        launcher = kubevirt_launcher_image(cr)
        devices = permitted_host_devices(cr)
        strategy = get(cr, "spec", "configuration", "evictionStrategy")
        strategy = strategy if isinstance(strategy, str) else ""
        if not isinstance(version, str) or not version:
            return cls(bindings=bindings, ratio=ratio, update_methods=methods, launcher_image=launcher,
                       host_devices=devices, eviction_strategy=strategy,
                       error="the KubeVirt resource has no status.observedKubeVirtVersion yet")
        return cls(version=version, bindings=bindings, ratio=ratio, update_methods=methods, launcher_image=launcher,
                   host_devices=devices, eviction_strategy=strategy)


def version_problem(status: KubeVirtStatus | None, supported: VersionRange) -> str | None:
    """Why Cloud Hypervisor cannot be used on this cluster, or None when it can.

    `status` None means the server runs without an API client (offline, tests): no gate.
    """
    if status is None:
        return None
    if status.version is None:
        return (f"cannot verify the cluster's KubeVirt version ({status.error or 'unknown'}); "
                f"Cloud Hypervisor VMIs are refused until it can be read")
    try:
        inside = supported.contains(status.version)
    except ValueError:
        return f"the cluster reports an unparsable KubeVirt version {status.version!r}"
    if inside:
        return None
    return (f"Cloud Hypervisor is not available on KubeVirt {status.version}: this kubevirt-ch "
            f"release supports KubeVirt {supported}")


# The conditions of the cluster that concern every Cloud Hypervisor VMI at once. They are told to
# operators (the server's log, the metric ch_admission_cluster_condition, Events on the server's
# Deployment: admission/app.py), never as a warning on a user's VMI, whose author can do nothing
# about them.
KUBEVIRT_UNREADABLE = "KubeVirtUnreadable"
KUBEVIRT_UNSUPPORTED = "KubeVirtVersionUnsupported"
WORKLOAD_UPDATE_EVICT = "WorkloadUpdateEvict"
WORKLOAD_UPDATE_LIVE_MIGRATE = "WorkloadUpdateLiveMigrate"
CONDITIONS = (KUBEVIRT_UNREADABLE, KUBEVIRT_UNSUPPORTED, WORKLOAD_UPDATE_EVICT, WORKLOAD_UPDATE_LIVE_MIGRATE)


@dataclass(frozen=True)
class Condition:
    """One cluster-wide condition that holds: `name` (one of CONDITIONS: a metric label and an
    Event reason) and a one-line `message` for operators."""

    name: str
    message: str


def conditions(fetched: KubeVirtStatus, effective: KubeVirtStatus, supported: VersionRange,
               where: str) -> list[Condition]:
    """The conditions that hold, in CONDITIONS order.

    `fetched` is the last read of the KubeVirt CR `where` (e.g. "kubevirt/kubevirt"), `effective`
    what the webhooks use (the last good read when the latest one failed). The workload updater
    (kubevirt pkg/virt-controller/watch/workload-updater/workload-updater.go@d923fdb815cd) treats
    every VMI whose recorded launcher image is not virt-controller's own as outdated; `/mutate-vmi`
    (launcher_status.py) records virt-controller's image for current Cloud Hypervisor VMIs, which it
    can only when that image can be read from the CR. When it cannot, every running Cloud
    Hypervisor VMI looks outdated: with `Evict` the updater evicts them in batches, again after
    each restart; with `LiveMigrate` it keeps migrating them (docs/operations.md §7).
    """
    found: list[Condition] = []
    if fetched.version is None:
        consequence = (f"the last version read, {effective.version}, stays in use" if effective.version
                       else "new Cloud Hypervisor VMIs and their launcher pods are refused until it can be read")
        found.append(Condition(KUBEVIRT_UNREADABLE, f"cannot read KubeVirt {where} ({fetched.error or 'unknown'}): "
                                                    f"{consequence}"))
    if effective.version is not None:
        problem = version_problem(effective, supported)
        if problem:
            found.append(Condition(KUBEVIRT_UNSUPPORTED, f"KubeVirt {where}: {problem}; new Cloud Hypervisor VMIs "
                                                         f"and their launcher pods are refused"))
    methods = "[" + ", ".join(effective.update_methods) + "]"
    launcher = effective.launcher_image
    if launcher.image is None:
        why = (f"KubeVirt {where} has workloadUpdateMethods {methods} and virt-controller's launcher image "
               f"cannot be read from it ({launcher.error}): running Cloud Hypervisor VMIs look outdated to its "
               f"workload updater, which")
        if "Evict" in effective.update_methods:
            found.append(Condition(WORKLOAD_UPDATE_EVICT,
                                   f"{why} evicts them, again after each restart (docs/operations.md §7)"))
        if "LiveMigrate" in effective.update_methods:
            found.append(Condition(WORKLOAD_UPDATE_LIVE_MIGRATE,
                                   f"{why} keeps live-migrating them (docs/operations.md §7)"))
    return found
