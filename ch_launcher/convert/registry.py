"""The ordered list of configurators `translate()` runs. Each module owns one concern.

Order matters where one concern reads what an earlier one decided: the vCPU count before disk
and NIC queues; devices that need shared memory before memory is finalised; policy last.
"""

from __future__ import annotations

from collections.abc import Callable

from ch_launcher.convert.agent import configure_guest_agent
from ch_launcher.convert.compute import configure_compute
from ch_launcher.convert.console import configure_console
from ch_launcher.convert.context import Translation
from ch_launcher.convert.devices import configure_devices
from ch_launcher.convert.firmware import configure_firmware
from ch_launcher.convert.memory import configure_memory
from ch_launcher.convert.migration import configure_migration
from ch_launcher.convert.network import configure_network
from ch_launcher.convert.policy import configure_pci_budget, configure_policy
from ch_launcher.convert.runtime import configure_runtime
from ch_launcher.convert.storage import configure_storage
from ch_launcher.convert.tpm import configure_tpm

CONFIGURATORS: list[Callable[[Translation], None]] = [
    configure_compute,
    configure_firmware,
    configure_storage,
    configure_console,
    configure_network,
    configure_devices,
    configure_guest_agent,  # after devices: the vsock autoattachVSOCK asked for carries the agent too
    configure_tpm,  # after firmware: the state directory is named by the firmware UUID
    configure_memory,
    configure_migration,  # reads the devices and volumes decided above; policy reads its verdict
    configure_runtime,  # what virt-handler's runtime will do: reads memory and devices
    configure_policy,
    configure_pci_budget,  # counts what every configurator above added
]
