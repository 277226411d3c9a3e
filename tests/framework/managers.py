"""In-process domain managers on the simulated VMM: what the manager's own tests drive directly,
without gRPC (`tests/unit/test_manager*.py`)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ch_launcher.manager import DomainManager, ManagerSettings
from tests.framework.launcher import FAKE_CH, LauncherLayout, container_disk_images, fake_firmware


class RecordingSink:
    """virt-handler's Notify side for an in-process manager: every Domain event (its JSON decoded,
    with its type) and every Kubernetes event, in the order they were sent."""

    def __init__(self) -> None:
        self.domains: list[tuple[dict[str, Any], str]] = []
        self.k8s: list[dict[str, str]] = []

    def send_domain(self, domain_json: str, event_type: str = "MODIFIED") -> None:
        self.domains.append((json.loads(domain_json), event_type))

    def send_k8s_event(self, **event: str) -> None:
        self.k8s.append(event)

    async def flush(self, timeout: float) -> bool:
        return True


@contextlib.contextmanager
def short_layout() -> Iterator[LauncherLayout]:
    """A launcher layout under a short new directory of /tmp (unix socket paths are limited to
    107 bytes, which pytest's tmp_path can exceed), removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="kcm", dir="/tmp"))
    try:
        yield LauncherLayout(root).create()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def manager_for(layout: LauncherLayout, vmi: Mapping[str, Any], *, vmm_env: Mapping[str, str] | None = None,
                **settings: Any) -> tuple[DomainManager, RecordingSink]:
    """A manager whose paths are `layout`'s, running the simulated VMM (with `vmm_env` added to this
    process's environment), for `vmi` (its containerDisk images and firmware made); `settings`
    override ManagerSettings fields."""
    fake_firmware(layout)
    container_disk_images(vmi, layout, size=1 << 20)
    config = ManagerSettings(private_dir=str(layout.private_dir), share_dir=str(layout.share_dir),
                             ephemeral_disk_dir=str(layout.ephemeral_disk_dir),
                             container_disk_dir=str(layout.container_disk_dir),
                             hotplug_disk_dir=str(layout.hotplug_disk_dir), firmware_dir=str(layout.firmware_dir),
                             ch_binary=str(FAKE_CH), vmm_env={**os.environ, **(vmm_env or {})}, **settings)
    sink = RecordingSink()
    return DomainManager(config, sink), sink


def manager_pair(layouts: tuple[LauncherLayout, LauncherLayout], vmi: Mapping[str, Any], *,
                 source_env: Mapping[str, str] | None = None
                 ) -> tuple[DomainManager, DomainManager, RecordingSink, RecordingSink]:
    """A migration's source and target managers for `vmi`: the target's share directory is the
    source's (virt-handler's proxies join the two pods' sockets in a cluster). The target's VMM
    binds the received VM's vsock socket under its own layout (FAKE_CH_VSOCK_ROOT), as the
    target pod's VMM binds it in its own filesystem."""
    source, source_sink = manager_for(layouts[0], vmi, vmm_env=source_env)
    target, target_sink = manager_for(layouts[1], vmi, vmm_env={"FAKE_CH_VSOCK_ROOT": str(layouts[1].root)})
    shared = dataclasses.replace(target.settings, share_dir=source.settings.share_dir)
    return source, DomainManager(shared, target_sink), source_sink, target_sink
