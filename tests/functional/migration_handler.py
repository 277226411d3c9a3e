"""Two launcher pods and virt-handler's migration side, for the migration stories.

Each launcher runs in its own pod sandbox (`PodSandbox`: uid 107, its own network and mount
namespaces, NET_BIND_SERVICE only), its files in a directory of its own, shown in its mount
namespace at the same path as the other's (`PodSandbox.bind`): the VM configuration the target
VMM receives names the source pod's paths, which in a cluster are the same in every pod.

`MigrationPair` plays virt-handler on both nodes (`kubevirt pkg/virt-handler/migration-target.go`,
`migration-source.go@d923fdb815cd`): SyncMigrationTarget, the target proxies and the ports they
publish, the source proxies, MigrateVirtualMachine with `MigrationOptions`, and afterwards
FinalizeVirtualMachineMigration, SignalTargetPodCleanup, CancelVirtualMachineMigration, the
source's DeleteVirtualMachine, through `ProxyManager` (migration_proxy.py).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from ch_launcher._proto import kubevirt_cmd_v1_pb2 as cmd_pb2
from demo import LauncherLayout, LauncherProcess
from tests.functional.harness import Harness, RealVmm
from tests.functional.migration_proxy import ProxyManager
from tests.functional.pod_sandbox import POD_UID, PodSandbox

DIRECT_PORT = 49152
TARGET_POD = "virt-launcher-mig-target"
SOURCE_POD = "virt-launcher-mig-source"

# virt-handler's defaults (pkg/virt-config/virt-config.go), as migrateVMI sends them, with
# ParallelMigrationThreads as configureParallelMigrationThreads sets it for a VMI without a CPU limit.
DEFAULT_OPTIONS: dict[str, Any] = {
    "Bandwidth": "0", "ProgressTimeout": 150, "CompletionTimeoutPerGiB": 150, "MaxDowntimeMs": 900,
    "UnsafeMigration": False, "AllowAutoConverge": False, "AllowPostCopy": False,
    "ParallelMigrationThreads": 8, "AllowWorkloadDisruption": False, "StallDetectorOptions": None,
    "Compression": None, "DowntimeTuning": None,
}


def migratable_vmi(name: str = "migvmi", *, memory: str = "64Mi") -> dict[str, Any]:
    """A VMI Cloud Hypervisor can migrate: no writable local disk (a cloud-init ISO only), no
    NIC; booting the firmware (the tiny guest on the real VMM)."""
    return {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4()),
                     "annotations": {"kubevirt-ch.io/hypervisor": "cloud-hypervisor"}},
        "spec": {
            "terminationGracePeriodSeconds": 30,
            "domain": {
                "cpu": {"cores": 1},
                "memory": {"guest": memory},
                "resources": {"requests": {"memory": memory}},
                "firmware": {"uuid": "1f0e6e4b-6a1e-4f77-9b0f-2b1b7d1f3a11"},
                "devices": {"autoattachPodInterface": False, "autoattachGraphicsDevice": False,
                            "disks": [{"name": "cloudinitdisk", "disk": {"bus": "virtio"}}]},
            },
            "volumes": [{"name": "cloudinitdisk", "cloudInitNoCloud": {"userData": "#cloud-config\n"}}],
        },
        "status": {"phase": "Scheduled"},
    }


def migrating(vmi: dict[str, Any], migration_uid: str) -> dict[str, Any]:
    """The VMI as virt-handler hands it to both launchers during the migration."""
    out = json.loads(json.dumps(vmi))
    status = out["status"]
    status["phase"] = "Running"
    status["nodeName"] = "node-a"
    status["migrationTransport"] = "Unix"
    status["migrationState"] = {"migrationUid": migration_uid, "sourceNode": "node-a", "targetNode": "node-b",
                                "sourcePod": SOURCE_POD, "targetPod": TARGET_POD}
    return out


class PodHarness(Harness):
    """A Harness whose launcher sees its files at `inside` (a directory both pods bind theirs to)."""

    def __init__(self, *, inside: Path, pod: PodSandbox, pod_name: str, runner: Any = None, **kwargs: Any) -> None:
        super().__init__(pod=pod, **kwargs)
        self.inside = inside
        self.env["POD_NAME"] = pod_name
        pod.bind(self.root, inside)
        self.owns_runner = runner is None
        if runner is not None:  # both pods' clients and recorders live on one event loop
            self.runner.close()
            self.runner = runner

    async def start(self, *, wait_ready: bool = True) -> Harness:
        if self.with_notify:
            await self.recorder.start()
            assert self.pod is not None
            self.pod.own(self.layout.notify_socket)
        meta = self.vmi["metadata"]
        launcher = LauncherProcess(LauncherLayout(self.inside), name=meta["name"], namespace=meta["namespace"],
                                   uid=meta["uid"], ch_binary=self.ch_binary, env=self.env,
                                   grace_period_seconds=self.grace_period_seconds, qemu_timeout=self.qemu_timeout,
                                   wrap=self.pod.command if self.pod is not None else None)
        launcher.layout = self.layout  # the test reads the pod's files where the host has them
        self.launcher = launcher.start()
        if wait_ready:
            from demo import CmdClient

            await self.launcher.wait_ready(15.0)
            self.client = CmdClient(self.layout.cmd_socket)
        return self


class MigrationPair:
    """A source and a target launcher pod for one VMI, and virt-handler's migration side."""

    def __init__(self, vmi: dict[str, Any], *, real: RealVmm | None = None,
                 source_env: dict[str, str] | None = None, target_env: dict[str, str] | None = None) -> None:
        self.inside = Path(tempfile.mkdtemp(prefix="kcmig", dir="/tmp"))
        os.chmod(self.inside, 0o755)
        self.pods: list[PodSandbox] = []
        self.proxies = ProxyManager(pod_uid=POD_UID)
        self.migration_uid = str(uuid.uuid4())
        self.vmi = vmi
        try:
            self.source = self._pod_harness(SOURCE_POD, real, source_env)
            self.target = self._pod_harness(TARGET_POD, real, target_env, runner=self.source.runner)
        except BaseException:
            self.close()
            raise

    def _pod_harness(self, name: str, real: RealVmm | None, env: dict[str, str] | None,
                     runner: Any = None) -> PodHarness:
        pod = PodSandbox()
        self.pods.append(pod)
        return PodHarness(inside=self.inside, pod=pod, pod_name=name, vmi=json.loads(json.dumps(self.vmi)),
                          real=real, env=env, runner=runner)

    @property
    def uid(self) -> str:
        return self.vmi["metadata"]["uid"]

    def migrating_vmi(self) -> dict[str, Any]:
        return migrating(self.source.vmi, self.migration_uid)

    # --- virt-handler, target node ------------------------------------------------------------

    async def prepare_target(self) -> dict[str, int]:
        """SyncMigrationTarget, then the target proxies (`handleTargetMigrationProxy`); the
        ports the target publishes in `targetDirectMigrationNodePorts`."""
        await self.target.start()
        assert self.target.client is not None
        await self.target.client.vmi_command("SyncMigrationTarget", self.migrating_vmi())
        layout = self.target.layout
        sockets = [str(layout.root / "libvirt" / "virtqemud-sock"),
                   str(layout.share_dir / "migrationproxy" / f"{self.uid}-{DIRECT_PORT}-source.sock")]
        self.proxies.start_target_listener(self.uid, sockets)
        return self.proxies.get_target_listener_ports(self.uid)

    # --- virt-handler, source node ------------------------------------------------------------

    async def migrate(self, ports: dict[str, int], options: dict[str, Any] | None = None) -> Any:
        """The source proxies (`handleSourceMigrationProxy`), then MigrateVirtualMachine."""
        self.proxies.start_source_listener(self.uid, "127.0.0.1", ports, self.source.layout.share_dir)
        assert self.source.client is not None
        payload = json.dumps(self.migrating_vmi()).encode()
        request = cmd_pb2.MigrationRequest(vmi=cmd_pb2.VMI(vmiJson=payload),
                                           options=json.dumps({**DEFAULT_OPTIONS, **(options or {})}).encode())
        return await self.source.client.call("MigrateVirtualMachine", request)

    async def source_command(self, rpc: str, **kwargs: Any) -> Any:
        assert self.source.client is not None
        return await self.source.client.vmi_command(rpc, self.migrating_vmi(), **kwargs)

    async def target_command(self, rpc: str, options: cmd_pb2.VirtualMachineOptions | None = None,
                             **kwargs: Any) -> Any:
        assert self.target.client is not None
        return await self.target.client.vmi_command(rpc, self.migrating_vmi(), options, **kwargs)

    def run(self, coro: Any) -> Any:
        return self.source.run(coro)

    def print_logs(self) -> None:
        """Both pods' launcher and VMM logs (pytest shows them when a test fails)."""
        for name in ("source", "target"):
            harness = getattr(self, name, None)
            if harness is None:
                continue
            print(f"===== {name} launcher\n{harness.log_text()[-20000:]}")
            vmm_log = harness.layout.private_dir / "ch" / "ch.log"
            if vmm_log.exists():
                print(f"===== {name} VMM\n{vmm_log.read_text(errors='replace')[-8000:]}")

    def close(self) -> None:
        self.print_logs()
        for harness in (getattr(self, "target", None), getattr(self, "source", None)):  # the source's loop last
            if harness is not None:
                harness.close()
        self.proxies.close()
        for pod in self.pods:
            pod.close()
        shutil.rmtree(self.inside, ignore_errors=True)


def migration_of(event: Any) -> dict[str, Any] | None:
    """`Spec.Metadata.KubeVirt.Migration` of a recorded Domain event."""
    return ((event.domain or {}).get("Spec", {}).get("Metadata", {}).get("KubeVirt", {}) or {}).get("Migration")
