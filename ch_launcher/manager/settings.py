"""What the manager is told (`ManagerSettings`), what it reports failures with
(`CommandFailed`), where its events go (`EventSink`), and the imports it defers (`preload`)."""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ch_launcher.kubevirt import paths

if TYPE_CHECKING:
    from ch_launcher.ch.process import VmmSpawning

# What the first Sync needs and readiness does not (the VMI model, the configurators):
# about 0.3 s of imports, so `preload()` runs them in a thread once the command socket is ready.
HEAVY_MODULES = ("ch_launcher.kubevirt.vmi", "ch_launcher.ch.api", "ch_launcher.ch.process", "ch_launcher.convert",
                 "ch_launcher.prepare", "ch_launcher.dhcp", "ch_launcher.stats")


def preload() -> None:
    for name in HEAVY_MODULES:
        importlib.import_module(name)


class CommandFailed(Exception):
    """A command could not do what it was asked; `str(self)` is the in-band message."""


class EventSink(Protocol):
    """Where Domain and K8s events go (the Notify client, `ch_launcher.notify.Notifier`). The
    `send_*` methods queue the event and return at once, in the order they are called; delivery,
    its order and its retries are the sink's own."""

    def send_domain(self, domain_json: str, event_type: str = "MODIFIED") -> None: ...

    def send_k8s_event(self, *, type: str, reason: str, message: str,  # noqa: A002 (Event.type)
                       namespace: str, name: str, uid: str) -> None: ...

    async def flush(self, timeout: float) -> bool:
        """Wait until everything sent so far is delivered (or `timeout`); True if so."""


@dataclass(frozen=True)
class ManagerSettings(paths.LauncherPaths):
    """Where things live (the launcher's directories, from its flags) and how long to wait."""

    ch_binary: str = paths.CH_BINARY
    kvm_device: str = paths.KVM_DEVICE    # the warm-up leaves the VMM to the first Sync while it is not ours
    name: str = ""                        # --name / --namespace / --uid: the VMI until a Sync says more
    namespace: str = ""
    uid: str = ""
    vmm_dir: str = ""                     # VMM API socket, event FIFO, log; default <private-dir>/ch
    vmm_start_timeout: float = 10.0
    boot_timeout: float = 60.0            # PUT vm.boot (a large VM with prefault can take long)
    prepare_timeout: float = 120.0
    stop_timeout: float = 3.0             # each stage of vmm.shutdown -> SIGTERM -> SIGKILL
    api_timeout: float = 5.0              # any other REST call (vm.pause, vm.info, ...)
    vmm_env: Mapping[str, str] | None = None  # None: the launcher's own environment
    spawning: VmmSpawning | None = None   # the pod's process model (docs/process-model.md); None: VMM is our child

    @property
    def vmm_paths(self) -> tuple[str, str, str]:
        d = self.vmm_dir or os.path.join(self.private_dir, "ch")
        return os.path.join(d, "api.sock"), os.path.join(d, "events"), os.path.join(d, "ch.log")
