"""`spec.volumes` and `spec.networks` of the inbound VMI model.

Part of `ch_launcher.kubevirt.vmi` (which re-exports every name); its conventions apply."""

from __future__ import annotations

from dataclasses import field
from typing import Any, ClassVar

from ch_launcher.kubevirt.vmi_base import Empty, Quantity, _Model

# --- spec.volumes and spec.networks ----------------------------------------------------------


class ContainerDiskSource(_Model):
    image: str = ""
    path: str = ""
    imagePullPolicy: str = ""
    imagePullSecret: str = ""


class PVCSource(_Model):
    claimName: str
    readOnly: bool = False
    hotpluggable: bool = False


class DataVolumeSource(_Model):
    name: str
    hotpluggable: bool = False


class EphemeralSource(_Model):
    persistentVolumeClaim: PVCSource


class LocalObjectReference(_Model):
    name: str = ""


class CloudInitSource(_Model):
    """Shared shape of `cloudInitNoCloud` and `cloudInitConfigDrive`."""

    userData: str | None = None
    userDataBase64: str | None = None
    secretRef: LocalObjectReference | None = None
    networkData: str | None = None
    networkDataBase64: str | None = None
    networkDataSecretRef: LocalObjectReference | None = None


class EmptyDiskSource(_Model):
    capacity: Quantity


class HostDiskSource(_Model):
    path: str
    type: str  # "Disk" | "DiskOrCreate"
    capacity: Quantity | None = None
    shared: bool | None = None


class ConfigMapSource(_Model):
    name: str = ""
    optional: bool | None = None
    volumeLabel: str = ""


class SecretSource(_Model):
    secretName: str = ""
    optional: bool | None = None
    volumeLabel: str = ""


class ServiceAccountSource(_Model):
    serviceAccountName: str = ""


class DownwardAPISource(_Model):
    fields: list[dict[str, Any]] = field(default_factory=list)
    volumeLabel: str = ""


class Volume(_Model):
    name: str
    containerDisk: ContainerDiskSource | None = None
    ephemeral: EphemeralSource | None = None
    cloudInitNoCloud: CloudInitSource | None = None
    cloudInitConfigDrive: CloudInitSource | None = None
    persistentVolumeClaim: PVCSource | None = None
    dataVolume: DataVolumeSource | None = None
    emptyDisk: EmptyDiskSource | None = None
    hostDisk: HostDiskSource | None = None
    configMap: ConfigMapSource | None = None
    secret: SecretSource | None = None
    serviceAccount: ServiceAccountSource | None = None
    downwardAPI: DownwardAPISource | None = None
    downwardMetrics: Empty | None = None
    memoryDump: dict[str, Any] | None = None
    sysprep: dict[str, Any] | None = None

    SOURCES: ClassVar[tuple[str, ...]] = (
        "containerDisk", "ephemeral", "cloudInitNoCloud", "cloudInitConfigDrive",
        "persistentVolumeClaim", "dataVolume", "emptyDisk", "hostDisk", "configMap", "secret",
        "serviceAccount", "downwardAPI", "downwardMetrics", "memoryDump", "sysprep",
    )

    @property
    def source_kinds(self) -> list[str]:
        """The JSON names of the volume sources that are set (KubeVirt requires exactly one)."""
        return [kind for kind in self.SOURCES if getattr(self, kind) is not None]

    @property
    def source_kind(self) -> str:
        """The JSON name of the first volume source that is set, or `""` when none is."""
        kinds = self.source_kinds
        return kinds[0] if kinds else ""


class PodNetwork(_Model):
    vmNetworkCIDR: str = ""
    vmIPv6NetworkCIDR: str = ""


class MultusNetwork(_Model):
    networkName: str
    default: bool = False


class Network(_Model):
    name: str
    pod: PodNetwork | None = None
    multus: MultusNetwork | None = None
