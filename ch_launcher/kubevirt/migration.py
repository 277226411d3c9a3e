"""KubeVirt's migration vocabulary, pure: the proxies' socket names, the migration's UID, the
Domain's `Spec.Metadata.KubeVirt.Migration`, and `cmdclient.MigrationOptions`.

Sources (`kubevirt/kubevirt @d923fdb815cd`): `pkg/virt-handler/migration-proxy/migration-proxy.go`
(ports, `SourceUnixFile`, `ConstructProxyKey`), `pkg/virt-handler/migration-target.go`
(`migrationProxyKey`), `pkg/virt-launcher/virtwrap/live-migration-source.go` (`MigrationUID`,
`initializeMigrationMetadata`, `setMigrationResult`), `pkg/virt-launcher/virtwrap/api/schema.go`
(`MigrationMetadata`: no json tags, so Go field names), `pkg/virt-handler/cmd-client/client.go`
(`MigrationOptions`, likewise), `pkg/virt-launcher/virtwrap/manager.go` (`getVMIMigrationDataSize`).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from ch_launcher.kubevirt.domain_view import rfc3339
from ch_launcher.kubevirt.quantity import parse_quantity

if TYPE_CHECKING:
    from ch_launcher.kubevirt.vmi import VirtualMachineInstance

DIRECT_MIGRATION_PORT = 49152  # LibvirtDirectMigrationPort: the memory stream
BLOCK_MIGRATION_PORT = 49153   # LibvirtBlockMigrationPort: block migration (not used: no storage migration)
PROXY_DIR = "migrationproxy"

# v1.MigrationAbortStatus and v1.MigrationMode strings
ABORT_IN_PROGRESS = "Aborting"
ABORT_SUCCEEDED = "Succeeded"
ABORT_FAILED = "Failed"
MODE_PRE_COPY = "PreCopy"
ABORTED_REASON = "Live migration has been aborted"  # setMigrationResult's text


def proxy_key(uid: str, port: int = 0) -> str:
    """`ConstructProxyKey`: the uid, with `-<port>` unless the port is 0."""
    return f"{uid}-{port}" if port else uid


def proxy_socket(share_dir: str, uid: str, port: int = DIRECT_MIGRATION_PORT) -> str:
    """`SourceUnixFile(<share-dir>, key)`: `<share-dir>/migrationproxy/<key>-source.sock`, the
    path of virt-handler's source proxy in the source pod and the socket its target proxy dials
    in the target pod."""
    return os.path.join(share_dir, PROXY_DIR, f"{proxy_key(uid, port)}-source.sock")


def migration_uid(vmi: VirtualMachineInstance) -> str:
    """`MigrationUID`: `status.migrationState.sourceState.migrationUID` when `sourceState` is set
    (a decentralized migration; Go takes it even when empty), else `status.migrationState.migrationUid`;
    "" without a migration state."""
    state = vmi.status.migrationState
    if state is None:
        return ""
    if state.sourceState is not None:
        return state.sourceState.migrationUID
    return state.migrationUid


def target_proxy_uid(vmi: VirtualMachineInstance) -> str:
    """`migrationProxyKey` on the target: the source VMI's uid for a decentralized migration
    over unix transport, else the VMI's own."""
    state = vmi.status.migrationState
    if (vmi.status.migrationTransport == "Unix" and state is not None and state.sourceState is not None
            and state.sourceState.virtualMachineInstanceUID):
        return state.sourceState.virtualMachineInstanceUID
    return vmi.metadata.uid


def data_size_gb(vmi: VirtualMachineInstance) -> int:
    """`getVMIMigrationDataSize` for a migration without storage: the guest memory (`memory.guest`,
    else the memory request) in units of 10^9 bytes, rounded up (`ScaledValue(resource.Giga)`)."""
    domain = vmi.spec.domain
    value = None
    if domain.memory is not None and domain.memory.guest is not None:
        value = domain.memory.guest
    elif domain.resources is not None and domain.resources.requests is not None:
        value = domain.resources.requests.get("memory")
    if value is None:
        return 0
    try:
        n = parse_quantity(value)
    except ValueError:
        return 0
    return max(0, math.ceil(n / Decimal(10**9)))


@dataclass(frozen=True)
class MigrationMetadata:
    """`Spec.Metadata.KubeVirt.Migration` of the Domain; a snapshot, replaced on every change."""

    uid: str
    start: str | None = None       # RFC 3339
    end: str | None = None
    failed: bool = False
    failure_reason: str = ""
    abort_status: str = ""
    mode: str = MODE_PRE_COPY

    def to_dict(self) -> dict[str, Any]:
        """As Go's encoding/json writes `api.MigrationMetadata` (every field, nil times as null)."""
        return {
            "UID": self.uid,
            "StartTimestamp": rfc3339(self.start) if self.start else None,
            "EndTimestamp": rfc3339(self.end) if self.end else None,
            "Failed": self.failed,
            "FailureReason": self.failure_reason,
            "AbortStatus": self.abort_status,
            "Mode": self.mode,
        }

    @property
    def ended(self) -> bool:
        return self.end is not None

    def already_executed(self) -> str:
        """`initializeMigrationMetadata`'s answer to a second call for this ended migration ("One
        shot"); the end time as Go's `%v` prints a `metav1.Time` (`time.Time.String`, here to the
        second: the metadata keeps whole seconds)."""
        end = datetime.fromisoformat(rfc3339(self.end)) if self.end else None
        when = end.strftime("%Y-%m-%d %H:%M:%S +0000 UTC") if end else "<nil>"
        return (f"migration job {self.uid} already executed, finished at {when}, failed: "
                f"{str(self.failed).lower()}, abortStatus: {self.abort_status}")

    def finished(self, when: str, *, failed: bool, reason: str = "") -> MigrationMetadata:
        """`setMigrationResult`: once only (an ended migration is returned unchanged); a failed
        migration whose abort succeeded reads "Live migration has been aborted"."""
        if self.end is not None:
            return self
        if failed and self.abort_status == ABORT_SUCCEEDED:
            reason = ABORTED_REASON
        return replace(self, end=when, failed=failed, failure_reason=reason if failed else "")


class InvalidOptions(ValueError):
    """`MigrationRequest.options` is absent or is not a MigrationOptions object."""


@dataclass(frozen=True)
class MigrationOptions:
    """`cmdclient.MigrationOptions`, as virt-handler sends them (JSON, Go field names)."""

    bandwidth: int = 0                     # bytes/s; 0 = unlimited (KubeVirt's default "0Mi")
    progress_timeout: int = 150            # s
    completion_timeout_per_gib: int = 150  # s per GB of data
    max_downtime_ms: int = 0               # 0: not set
    unsafe_migration: bool = False
    allow_auto_converge: bool = False
    allow_post_copy: bool = False
    parallel_migration_threads: int | None = None
    allow_workload_disruption: bool = False
    stall_detector: bool = False
    compression: str | None = None
    downtime_tuning: bool = False
    raw: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def decode(cls, payload: bytes) -> MigrationOptions:
        """Decode as Go's json.Unmarshal would (unknown fields ignored, `null` = zero value);
        raises InvalidOptions with a message in the Go launcher's words."""
        if not payload:
            raise InvalidOptions("migration options object not present in command server request")
        try:
            data = json.loads(payload)
        except ValueError as e:
            raise InvalidOptions(f"no valid migration options object present in command server request: {e}") from None
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise InvalidOptions("no valid migration options object present in command server request: json: "
                                 f"cannot unmarshal {type(data).__name__} into Go value of type "
                                 "cmdclient.MigrationOptions")

        def number(key: str, default: int) -> int:
            value = data.get(key)
            if value is None:
                return default
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidOptions(f"no valid migration options object present in command server request: json: "
                                     f"cannot unmarshal {json.dumps(value)} into Go struct field "
                                     f"MigrationOptions.{key}")
            return value

        def flag(key: str) -> bool:
            value = data.get(key)
            if value is None:
                return False
            if not isinstance(value, bool):
                raise InvalidOptions(f"no valid migration options object present in command server request: json: "
                                     f"cannot unmarshal {json.dumps(value)} into Go struct field "
                                     f"MigrationOptions.{key} of type bool")
            return value

        bandwidth = 0
        raw_bw = data.get("Bandwidth")
        if raw_bw not in (None, ""):
            try:
                bandwidth = int(parse_quantity(raw_bw if isinstance(raw_bw, str) else str(raw_bw)))
            except ValueError as e:
                raise InvalidOptions(f"no valid migration options object present in command server request: "
                                     f"Bandwidth {raw_bw!r}: {e}") from None
        threads = data.get("ParallelMigrationThreads")
        compression = data.get("Compression")
        return cls(
            bandwidth=max(0, bandwidth),
            progress_timeout=number("ProgressTimeout", 0),
            completion_timeout_per_gib=number("CompletionTimeoutPerGiB", 0),
            max_downtime_ms=number("MaxDowntimeMs", 0),
            unsafe_migration=flag("UnsafeMigration"),
            allow_auto_converge=flag("AllowAutoConverge"),
            allow_post_copy=flag("AllowPostCopy"),
            parallel_migration_threads=threads if isinstance(threads, int) and not isinstance(threads, bool) else None,
            allow_workload_disruption=flag("AllowWorkloadDisruption"),
            stall_detector=isinstance(data.get("StallDetectorOptions"), dict),
            compression=compression if isinstance(compression, str) and compression else None,
            downtime_tuning=isinstance(data.get("DowntimeTuning"), dict),
            raw=data,
        )

    def degradations(self) -> list[str]:
        """What Cloud Hypervisor cannot honour, each said once (docs/migration.md §3.5)."""
        out: list[str] = []
        if self.parallel_migration_threads is not None and self.parallel_migration_threads > 1:
            out.append(f"ParallelMigrationThreads={self.parallel_migration_threads}: one connection (Cloud "
                       "Hypervisor opens several only over tcp: URLs; KubeVirt's proxies carry unix sockets)")
        if self.allow_auto_converge:
            out.append("AllowAutoConverge: not applied (Cloud Hypervisor does not throttle vCPUs)")
        if self.compression and self.compression.lower() != "none":
            out.append(f"Compression={self.compression}: not applied (Cloud Hypervisor sends memory uncompressed)")
        if self.allow_post_copy:
            out.append("AllowPostCopy: pre-copy only (Cloud Hypervisor's post-copy starts from the beginning and "
                       "loses the VM if the stream breaks)"
                       + ("; the guest is paused to finish instead" if self.allow_workload_disruption else ""))
        if self.stall_detector:
            out.append("StallDetectorOptions: not applied (ProgressTimeout and the completion timeout apply)")
        if self.downtime_tuning:
            out.append("DowntimeTuning: not applied (MaxDowntimeMs is the downtime goal from the start)")
        return out

    def send_migration_data(self, destination_url: str, data_gb: int) -> dict[str, Any]:
        """`SendMigrationData` for Cloud Hypervisor v53 (docs/migration.md §3.2)."""
        body: dict[str, Any] = {"destination_url": destination_url, "connections": 1}
        if self.max_downtime_ms > 0:
            body["downtime_ms"] = self.max_downtime_ms
        if self.completion_timeout_per_gib > 0:
            body["timeout_s"] = max(1, self.completion_timeout_per_gib * max(1, data_gb))
        body["timeout_strategy"] = "Ignore" if self.allow_workload_disruption else "Cancel"
        return body
