"""What the webhooks know about the cluster's KubeVirt, and the version gate built on it. Pure.

`KubeVirtStatus` is read from the KubeVirt CR (`kube.py` does the reading and caching):
`status.observedKubeVirtVersion` and the network binding plugins' declared memory overheads
(`spec.configuration.network.binding[<name>].computeResourceOverhead.requests.memory`).

Version gate (`ecosystem.md` §7.2, handler-launcher skew): Cloud Hypervisor objects are refused
when the observed version is outside `kubevirt.supportedVersions`, or cannot be read; objects
without the selection never reach the gate. Where it runs: in the pod mutator for every launcher
pod (the authoritative point: that is where ch-launcher meets this cluster's virt-handler), and
in the validating webhook on CREATE only, so that `kubectl apply` of a new CH object fails early
with a clear message while updates of existing objects (including KubeVirt's own) are never
blocked by it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from admission.selection import get
from admission.versions import VersionRange
from ch_launcher.kubevirt.quantity import quantity_bytes


@dataclass(frozen=True)
class KubeVirtStatus:
    """The cluster's KubeVirt as last read. `error` says why `version` is unknown."""

    version: str | None = None
    bindings: Mapping[str, int] = field(default_factory=dict)
    error: str | None = None
    ratio: str | None = None  # spec.configuration.additionalGuestMemoryOverheadRatio (KubeVirt's own)
    update_methods: tuple[str, ...] = ()  # spec.workloadUpdateStrategy.workloadUpdateMethods

    @classmethod
    def from_cr(cls, cr: Any) -> KubeVirtStatus:
        """Build from a KubeVirt CR (a decoded object). Never raises: oddities become `error`."""
        if not isinstance(cr, dict):
            return cls(error="the KubeVirt resource is not an object")
        status = cr.get("status") if isinstance(cr.get("status"), dict) else {}
        version = status.get("observedKubeVirtVersion")
        bindings: dict[str, int] = {}
        spec_bindings = get(cr, "spec", "configuration", "network", "binding")
        if isinstance(spec_bindings, dict):
            for name, plugin in spec_bindings.items():
                memory = get(plugin, "computeResourceOverhead", "requests", "memory")
                if memory is not None:
                    try:
                        bindings[str(name)] = quantity_bytes(memory)
                    except ValueError:
                        pass  # KubeVirt validates these; an unparsable one adds nothing, as in KubeVirt
        ratio = get(cr, "spec", "configuration", "additionalGuestMemoryOverheadRatio")
        ratio = ratio if isinstance(ratio, str) and ratio else None
        methods = get(cr, "spec", "workloadUpdateStrategy", "workloadUpdateMethods")
        methods = tuple(m for m in methods if isinstance(m, str)) if isinstance(methods, list) else ()
        if not isinstance(version, str) or not version:
            return cls(bindings=bindings, ratio=ratio, update_methods=methods,
                       error="the KubeVirt resource has no status.observedKubeVirtVersion yet")
        return cls(version=version, bindings=bindings, ratio=ratio, update_methods=methods)


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


def workload_update_warning(status: KubeVirtStatus | None) -> str | None:
    """A warning when the cluster's workload updater will act on Cloud Hypervisor VMIs.

    virt-controller labels every VMI whose launcher image is not its own
    `kubevirt.io/outdatedLauncherImage`, so a CH VMI is always "outdated"; with `Evict` the
    workload updater evicts it in batches (a restart loop for `runStrategy: Always`), with
    `LiveMigrate` it keeps migrating it (kubevirt pkg/virt-controller/watch/
    workload-updater/workload-updater.go@d923fdb815cd; docs/operations.md §7).
    """
    if status is None:
        return None
    if "Evict" in status.update_methods:
        return ("KubeVirt's workloadUpdateMethods include Evict: Cloud Hypervisor VMIs always look outdated "
                "and get evicted (docs/operations.md §7)")
    if "LiveMigrate" in status.update_methods:
        return ("KubeVirt's workloadUpdateMethods include LiveMigrate: Cloud Hypervisor VMIs always look outdated "
                "and get migrated again and again (docs/operations.md §7)")
    return None
