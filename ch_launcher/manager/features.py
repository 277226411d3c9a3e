"""The modules the domain manager imports on first use, not at start: one place that names them.

Why: launcher memory. Every launcher pod pays for what its process imports, and most of this is
needed only by some VMs or only after the first Sync (bench/footprint.py attributes the
launcher's PSS to its imports): the REST client, the VMM process, the translator, file
preparation, the guest's DHCP server, the guest agent's client (`manager.agent`, with
`ch_launcher.qga` and `ch.vsock`) and the stats come with the first Sync (and `settings.preload`
imports them in a thread once the command socket is ready, so the first Sync does not wait for
them); TPM (`manager.tpm`), the runtime process tree and memlock (`manager.procmodel`) and host
tuning for dedicated and realtime CPUs (`manager.tuning`) only for a VMI that asks for them;
changes to a running VM (`manager.resize`, `manager.devices` with hotplug and PVC expansion) only
once a VMI changes; live migration (`manager.migration_source`, `manager.migration_target`, and
through them the relay) only in a launcher that migrates.

Each name below is a module, imported the first time it is read (PEP 562 module `__getattr__`)
and then an ordinary attribute: `features.tpm.Swtpm` imports `ch_launcher.manager.tpm` when a VM
with a TPM is prepared, never before. The `TYPE_CHECKING` imports name the same modules for
readers, type checkers and import-linter, so the import graph shows these dependencies of the
manager although nothing imports them at start. Importing this module itself loads nothing.

This is the manager's one way to defer an import: a module the launcher loads at start reads a
deferred module here (never with an import inside a function); a module that is itself imported on
first use (the ones named here) imports at its top like any module. A module added here must also
be added to `_MODULES`; a name that is not there raises AttributeError as for any module.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ctypes

    from ch_launcher import convert, dhcp, prepare, stats
    from ch_launcher.ch import api, process
    from ch_launcher.manager import agent, devices, migration_source, migration_target, procmodel, resize, tpm, tuning

__all__ = ["agent", "api", "convert", "ctypes", "devices", "dhcp", "migration_source", "migration_target", "prepare",
           "process", "procmodel", "resize", "stats", "tpm", "tuning"]

_MODULES = {
    "api": "ch_launcher.ch.api",                 # the VMM's REST client and its errors
    "process": "ch_launcher.ch.process",         # starting the VMM
    "convert": "ch_launcher.convert",            # VMI -> Plan (the VMI model, the configurators)
    "prepare": "ch_launcher.prepare",            # disks, ISOs and files before the VMM opens them
    "stats": "ch_launcher.stats",                # GetDomainStats
    "tpm": "ch_launcher.manager.tpm",            # swtpm, for a VMI with a TPM
    "procmodel": "ch_launcher.manager.procmodel",  # where virt-handler looks for the VMM; memlock
    "tuning": "ch_launcher.manager.tuning",      # housekeeping and realtime vCPU pinning
    "dhcp": "ch_launcher.dhcp",                  # the guest's DHCP server (bridge, masquerade)
    "agent": "ch_launcher.manager.agent",        # the guest agent over vsock, once a VM is prepared
    "resize": "ch_launcher.manager.resize",      # vCPU and memory hotplug
    "devices": "ch_launcher.manager.devices",    # volume and interface hotplug, PVC expansion
    "migration_source": "ch_launcher.manager.migration_source",  # an outgoing live migration
    "migration_target": "ch_launcher.manager.migration_target",  # an incoming live migration
    "ctypes": "ctypes",                          # release_memory's madvise, once after a boot
}


def __getattr__(name: str) -> Any:
    try:
        module_name = _MODULES[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    module = importlib.import_module(module_name)
    globals()[name] = module  # later reads are plain attribute lookups
    return module
