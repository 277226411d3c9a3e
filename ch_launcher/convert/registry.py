"""The ordered list of configurators `translate()` runs. Each module owns one concern.

Order matters where one concern reads what an earlier one decided: the vCPU count before disk
and NIC queues; devices that need shared memory before memory is finalised; policy last.
"""

from __future__ import annotations

from collections.abc import Callable

from ch_launcher.convert.context import Translation
from ch_launcher.convert.devices import configure_devices
from ch_launcher.convert.network import configure_network
from ch_launcher.convert.policy import configure_policy

CONFIGURATORS: list[Callable[[Translation], None]] = [
    # compute, firmware, storage, console, network, devices, memory, policy: listed here by
    # their modules as they land.
    configure_network,
    configure_devices,
    configure_policy,
]
