"""The plan of a VM: `Planner` turns the VMI into a plan (`convert.translate` with the pod's facts)
and makes the plan's files (`prepare`), in a worker thread of its own. The boot plans through it;
the reconfiguration of a running VM translates through it too.

Raises CommandFailed with the in-band message, naming the field (translation) or the file
(preparation) that failed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ch_launcher.manager import features
from ch_launcher.manager.pod import read_pod_facts
from ch_launcher.manager.settings import CommandFailed

if TYPE_CHECKING:
    from ch_launcher.convert import LauncherOptions, Plan
    from ch_launcher.kubevirt.vmi import VirtualMachineInstance
    from ch_launcher.manager.settings import ManagerSettings

T = TypeVar("T")


class Planner:
    """VMI -> Plan, and the plan's files. `options` are the launcher options the VM was planned
    with (None until then); a later translation of the same VM without options uses them."""

    def __init__(self, settings: ManagerSettings) -> None:
        self.settings = settings
        self.options: LauncherOptions | None = None
        self._work = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="prepare")

    async def plan(self, vmi: VirtualMachineInstance, options: LauncherOptions | None) -> Plan:
        """The plan of a VM to boot (or to receive) with `options` (None: the defaults)."""
        self.options = options or features.convert.LauncherOptions()
        return await self.translate(vmi, self.options)

    async def translate(self, vmi: VirtualMachineInstance, options: LauncherOptions | None = None) -> Plan:
        """Raises CommandFailed naming every field Cloud Hypervisor cannot run."""
        options = options or self.options or features.convert.LauncherOptions()
        env = features.convert.LauncherEnv(**self.settings.directories(), pod=read_pod_facts())
        try:
            return await self._in_worker(features.convert.translate, vmi, env, options)
        except features.convert.UnsupportedFeatures as e:
            causes = "; ".join(p.text for p in e.problems)
            raise CommandFailed(f"the VMI cannot run on Cloud Hypervisor: {causes}") from None

    async def prepare_files(self, plan: Plan) -> None:
        """The plan's preparation steps (disks, ISOs, ...), before the VMM opens them."""
        prepare = features.prepare
        try:
            await self._in_worker(functools.partial(prepare.execute, plan, timeout=self.settings.prepare_timeout))
        except prepare.PreparationError as e:
            why = features.convert.naming_field(e.field, e.message)
            raise CommandFailed(f"preparing the VM failed: {why}") from None

    async def _in_worker(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._work, functools.partial(fn, *args))

    def close(self) -> None:
        self._work.shutdown(wait=False, cancel_futures=True)
