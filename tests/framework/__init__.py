"""The test framework: what the suites, the benchmarks and `make demo` drive the launcher with.

`launcher` runs ch-launcher as a real child process with every path under one short root
(`LauncherLayout`, `LauncherProcess`) and makes what virt-handler would have mounted
(`container_disk_images`, `fake_firmware`); `virt_handler` plays virt-handler's two sides
(`NotifyRecorder`, `CmdClient`); `managers` builds in-process domain managers on the simulated VMM
(`manager_for`, `manager_pair`, `RecordingSink`). Test modules import helpers from here (or from
a `*_support.py` beside them), never from another test module; nothing here imports `demo`,
which is one of this framework's users.
"""

from tests.framework.launcher import (
           FAKE_CH,
           REPO,
           LauncherLayout,
           LauncherProcess,
           container_disk_images,
           fake_firmware,
)
from tests.framework.virt_handler import DEADLINES, CmdClient, CommandError, DomainEvent, NotifyRecorder

__all__ = ["DEADLINES", "FAKE_CH", "REPO", "CmdClient", "CommandError", "DomainEvent", "LauncherLayout",
           "LauncherProcess", "NotifyRecorder", "container_disk_images", "fake_firmware"]
