"""Two launcher pods and virt-handler's migration side, for the migration stories.

Each launcher runs in its own pod sandbox (`PodSandbox`: uid 107, its own network and mount
namespaces, NET_BIND_SERVICE only), its files in a directory of its own, shown in its mount
namespace at the same path as the other's (`PodSandbox.bind`): the VM configuration the target
VMM receives names the source pod's paths, which in a cluster are the same in every pod.

`MigrationPair` plays virt-handler on both nodes (`kubevirt pkg/virt-handler/migration-target.go`,
`migration-source.go@d923fdb815cd`): SyncMigrationTarget, the target proxies and the ports they
publish, the source proxies, MigrateVirtualMachine with `MigrationOptions`, and afterwards
FinalizeVirtualMachineMigration, SignalTargetPodCleanup, CancelVirtualMachineMigration, the
source's DeleteVirtualMachine, through `ProxyManager` (migration_proxy.py). On the source node
it decides as virt-handler's migration-source controller does (`migration_controllers.py`): it
keeps the VMI as the API server stores it (`stored`), reads each Domain the source launcher
sends with virt-handler's matching rules, calls Migrate (again) and Cancel when those rules say
so, and moves the VirtualMachineInstanceMigration (`vmim`) on as virt-controller does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ch_launcher._proto import kubevirt_cmd_v1_pb2 as cmd_pb2
from tests.builders import (
    Option,
    new_vmi,
    with_cloud_init,
    with_cpu,
    with_devices,
    with_firmware_uuid,
    with_grace_period,
    with_hypervisor,
    with_memory,
    with_memory_request,
    with_phase,
    with_uid,
)
from tests.framework import LauncherLayout, LauncherProcess
from tests.functional.harness import Harness, RealVmm
from tests.functional.migration_controllers import MigrationObject, Reply, SourceController, is_migration_done
from tests.functional.migration_proxy import ProxyManager
from tests.functional.pod_sandbox import POD_UID, PodSandbox

DIRECT_PORT = 49152
SOURCE_NODE = "node-a"
TARGET_NODE = "node-b"
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


def migratable_vmi(*options: Option, name: str = "migvmi", memory: str = "64Mi") -> dict[str, Any]:
    """A VMI Cloud Hypervisor can migrate: no writable local disk (a cloud-init ISO only), no
    NIC; booting the firmware (the tiny guest on the real VMM). Then `options`."""
    return new_vmi(
        name, with_uid(str(uuid.uuid4())), with_hypervisor(), with_grace_period(30),
        with_cpu(cores=1), with_memory(memory), with_memory_request(memory),
        with_firmware_uuid("1f0e6e4b-6a1e-4f77-9b0f-2b1b7d1f3a11"),
        with_devices(autoattachPodInterface=False, autoattachGraphicsDevice=False), with_cloud_init(),
        with_phase("Scheduled"), *options,
    )


def migrating(vmi: dict[str, Any], migration_uid: str) -> dict[str, Any]:
    """The VMI as virt-handler hands it to both launchers during the migration."""
    out = json.loads(json.dumps(vmi))
    status = out["status"]
    status["phase"] = "Running"
    status["nodeName"] = SOURCE_NODE
    status["migrationTransport"] = "Unix"
    status["migrationState"] = {"migrationUid": migration_uid, "sourceNode": SOURCE_NODE, "targetNode": TARGET_NODE,
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
            from tests.framework import CmdClient

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
        self.stored: dict[str, Any] | None = None  # the VMI in the API server, once the migration began
        self.vmim = MigrationObject(self.migration_uid)
        self.handler: SourceController | None = None
        self.options: dict[str, Any] = {}
        self._seen_events = 0   # what the source controller's last sync had seen
        self._seen_updates = 0
        self._kicked = False    # the VMI changed under virt-handler (virt-controller's abort request)
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
        """The VMI as virt-handler hands it to the launchers now."""
        if self.stored is not None:
            return json.loads(json.dumps(self.stored))
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
        ports = self.proxies.get_target_listener_ports(self.uid)
        stored = self.migrating_vmi()
        stored["status"]["migrationState"].update(targetNodeAddress="127.0.0.1",
                                                  targetDirectMigrationNodePorts=dict(ports))
        self.stored = stored
        return ports

    # --- virt-handler, source node ------------------------------------------------------------

    async def migrate(self, ports: dict[str, int], options: dict[str, Any] | None = None) -> Reply:
        """The source proxies (`handleSourceMigrationProxy`), then the source controller's first
        sync (the VMI now has the target's ports), which calls MigrateVirtualMachine; its answer."""
        self.proxies.start_source_listener(self.uid, "127.0.0.1", ports, self.source.layout.share_dir)
        self.options = {**DEFAULT_OPTIONS, **(options or {})}
        assert self.stored is not None, "prepare_target() first: the target publishes its ports"
        self.handler = SourceController(self.stored, SOURCE_NODE, migrate=self.call_migrate,
                                        cancel=self._call_cancel)
        self._seen_events = max(0, len(self.source.recorder.events) - 1)  # the informer has the latest Domain
        outcome = await self._sync(lagging=True)
        calls = self.handler.migrate_calls()
        assert calls, f"virt-handler did not call Migrate: {outcome}"
        return calls[-1]

    async def _sync(self, *, lagging: bool) -> str:
        """One sync of the VMI's key by the source controller, then virt-controller's look at it.
        It reads the Domain of the first event it has not seen (`lagging` False: virt-handler keeps
        up with the launcher, each event synced before the next arrives) or the latest one
        (`lagging`: events arrived while it was busy, and its informer holds only the last).
        What it saw (those events, its own writes) no longer triggers another sync."""
        handler = self.handler
        assert handler is not None and self.stored is not None
        events = self.source.recorder.events
        index = len(events) - 1 if lagging or self._seen_events >= len(events) else self._seen_events
        domain = None if index < 0 or events[index].deleted else events[index].domain
        self._seen_events = index + 1
        self._seen_updates = handler.updates
        self._kicked = False
        outcome = await handler.execute(domain)
        self.vmim.observe(self.stored)
        return outcome

    def cancel_migration(self) -> bool:
        """`virtctl migrate-cancel`: the migration object is deleted; virt-controller asks the VMI
        for the abort (only while `Running`), which re-queues the VMI in virt-handler."""
        assert self.stored is not None
        asked = self.vmim.delete(self.stored)
        self._kicked = self._kicked or asked
        return asked

    async def call_migrate(self, vmi: dict[str, Any] | None = None) -> Reply:
        """MigrateVirtualMachine with the VMI virt-handler hands over (default: as stored now)."""
        assert self.source.client is not None
        payload = json.dumps(vmi if vmi is not None else self.migrating_vmi()).encode()
        request = cmd_pb2.MigrationRequest(vmi=cmd_pb2.VMI(vmiJson=payload),
                                           options=json.dumps(self.options or DEFAULT_OPTIONS).encode())
        reply = await self.source.client.call("MigrateVirtualMachine", request)
        return Reply(reply.success, reply.message)

    async def _call_cancel(self, vmi: dict[str, Any]) -> Reply:
        assert self.source.client is not None
        reply = await self.source.client.vmi_command("CancelVirtualMachineMigration", vmi, check=False)
        return Reply(reply.success, reply.message)

    def source_domain(self) -> dict[str, Any] | None:
        """The source Domain as virt-handler's informer holds it: the last event's (None once deleted)."""
        events = self.source.recorder.events
        if not events or events[-1].deleted:
            return None
        return events[-1].domain

    async def play_source(self, until: Callable[[], bool] | None = None, timeout: float = 30.0, *,
                          lagging: bool = False) -> dict[str, Any]:
        """virt-handler's source controller and virt-controller, run whenever virt-handler's queue
        would sync the VMI (a Domain event from the source launcher, the watch event of its own
        VMI write or of virt-controller's abort request, a rate-limited retry after a failed sync)
        until `until()` (default: virt-handler is done with the migration, `isMigrationDone`).
        `lagging`: see `_sync`. Returns the VMI's `status.migrationState`; AssertionError naming
        what virt-handler did when `timeout` passes."""
        handler = self.handler
        assert handler is not None, "migrate() first"
        done = until or (lambda: is_migration_done(handler.state))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        recorder = self.source.recorder
        failures = 0
        retry_at: float | None = None
        outcome = ""
        while True:
            if done():
                return dict(handler.state or {})
            now = loop.time()
            triggered = (len(recorder.events) > self._seen_events or handler.updates > self._seen_updates
                         or self._kicked or (retry_at is not None and now >= retry_at))
            if triggered:
                outcome = await self._sync(lagging=lagging)
                # client-go's per-item backoff after a failure (5 ms, doubling), forgotten after a success
                failures = failures + 1 if outcome.startswith("error") else 0
                retry_at = loop.time() + 0.005 * 2 ** (failures - 1) if failures else None
                continue
            remaining = deadline - now
            if remaining <= 0:
                raise AssertionError(
                    f"virt-handler never finished the migration within {timeout} s (last sync: {outcome}); "
                    f"its calls: {[(rpc, r.success, r.message) for rpc, r in handler.calls]}; its events: "
                    f"{[(e.reason, e.message) for e in handler.events]}; migrationState: {handler.state}; "
                    f"Domain events: {[str(e) for e in recorder.events]}")
            wait = remaining if retry_at is None else max(0.0, min(remaining, retry_at - now))
            with contextlib.suppress(TimeoutError):
                await recorder.wait_for(lambda e: True, timeout=wait, since=self._seen_events)

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
