"""PVC expansion of a running VM: which disks a Sync resizes, and to what size.

Imported on first use (a Sync whose volume statuses changed), never by a launcher that does not
need it.

virt-launcher's `expandDisksOnline` (kubevirt pkg/virt-launcher/virtwrap/disk_expansion.go
@d923fdb815cd) resizes a PVC-backed disk when the size it tracks for it changes: for a
filesystem volume the size the claim allows (`convert.expansion.guest_size`), for a block
volume the claim's size (libvirt then reads the device's own). Here the trigger is the same
facts changing in the VMI's volume status (the claim's request and capacity, CDI's overhead),
and the new size goes to Cloud Hypervisor's `vm.resize-disk`, which grows a raw image file
itself and checks that a block device already has the size asked
(`block/src/formats/raw/mod.rs@v53.0`); the guest's virtio-blk driver sees the new capacity at
once (a config-change interrupt). A disk is never shrunk.

Failure behaviour: `resizes` raises nothing; a size that cannot be read is logged and the disk
skipped (as upstream, the Sync goes on), and tried again when the facts change next.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from ch_launcher.prepare.images import possible_size

if TYPE_CHECKING:
    from ch_launcher.convert import Plan

log = logging.getLogger(__name__)


def resizes(live: Plan, wanted: Plan) -> dict[str, int | None]:
    """For every disk of the running VM (`live`) whose claim's facts differ in `wanted`: its new
    size in bytes, or None when it stays as it is (the claim allows no more, or the size cannot
    be said). Disks whose size cannot be read are left out, to be tried at a later Sync."""
    attached = {d.alias for d in live.disks}
    out: dict[str, int | None] = {}
    for name, sizing in sorted(wanted.disk_sizing.items()):
        before = live.disk_sizing.get(name)
        if before is None or before == sizing or name not in attached:
            continue
        try:
            size = possible_size(sizing)
            current = None if sizing.block else os.stat(sizing.path).st_size
        except OSError as e:
            log.error("cannot read the size of disk %s (%s): %s", name, sizing.path, e.strerror or e)
            continue
        if size is None:
            log.info("skipping resize of disk %s: unable to determine guest size", name)
        elif current is not None and size <= current:
            log.info("disk %s stays at %d bytes (its claim allows %d)", name, current, size)
            size = None
        out[name] = size
    return out
