"""Disk images: qcow2 overlays and sparse raw images.

Both are idempotent the way KubeVirt's are: an existing overlay is kept (virt-launcher's
`CreateBackedImageForVolume` returns when the file exists), and an existing raw image is never
touched (a PVC's `disk.img` holds the user's data). A launcher restart therefore keeps what the
guest wrote.
"""

from __future__ import annotations

import errno
import logging
import os

from ch_launcher.convert import expansion
from ch_launcher.convert.plan import CreateOverlay, CreateSparseImage, ExpandImage
from ch_launcher.prepare.errors import PreparationError
from ch_launcher.prepare.qcow2 import ImageError, inspect_image, write_overlay

log = logging.getLogger(__name__)
MiB = 1 << 20


def create_overlay(step: CreateOverlay) -> None:
    """Make the qcow2 overlay `step.path` over `step.backing`, unless it already exists.

    Raises PreparationError when the backing image is missing, unreadable, not raw/qcow2, or a
    qcow2 with a backing file of its own (KubeVirt refuses those: it would reach outside the
    container image), or when the overlay cannot be written."""
    if os.path.lexists(step.path):
        log.info("keeping existing overlay %s for %s", step.path, step.field)
        return
    if not os.path.exists(step.backing):
        raise PreparationError(step.field, f"{step.field}: the disk image {step.backing} is missing, so no "
                               f"overlay can be made at {step.path}")
    try:
        info = inspect_image(step.backing, step.backing_format)
        if info.backing_file:
            raise ImageError(f"{step.backing} is a qcow2 image with a backing file ({info.backing_file}), "
                             "which is not allowed")
        os.makedirs(os.path.dirname(step.path), exist_ok=True)
        write_overlay(step.path, step.backing, info.format, info.virtual_size)
    except ImageError as e:
        raise PreparationError(step.field, f"{step.field}: {e}") from None
    except OSError as e:
        raise PreparationError(step.field, f"{step.field}: cannot make the overlay {step.path} over "
                               f"{step.backing}: {e.strerror or e}") from None
    log.info("created overlay %s over %s (%s, %d bytes) for %s", step.path, step.backing, info.format,
             info.virtual_size, step.field)


def _usable_size(step: CreateSparseImage, directory: str) -> int:
    """KubeVirt's rule (hostdisk.handleRequestedSizeAndCreateSparseRaw): the requested size, or
    the free space if that is smaller but within the toleration; else an error."""
    if not step.tolerate_less_space_percent and not step.reserve_bytes:
        return step.size
    st = os.statvfs(directory)
    available = st.f_bavail * st.f_frsize - step.reserve_bytes
    if step.size <= available:
        return step.size
    tolerated = step.size * (100 - step.tolerate_less_space_percent) // 100
    if tolerated > available:
        raise PreparationError(step.field, f"{step.field}: unable to create {step.path}, not enough space: "
                               f"{step.size} bytes are asked for but {max(available, 0)} are free, also after "
                               f"taking {step.tolerate_less_space_percent} % toleration into account")
    size = available - available % MiB
    log.warning("%s: volume smaller than asked (%d < %d bytes); within %d %% toleration, using %d",
                step.field, available, step.size, step.tolerate_less_space_percent, size)
    return size


def create_sparse_image(step: CreateSparseImage) -> None:
    """Make the sparse raw image `step.path` of `step.size` bytes, unless it exists (then it is
    left alone, unless `step.overwrite`).

    Raises PreparationError when the directory is missing and may not be made (an unmounted
    volume), when the volume is too small, or on I/O errors."""
    if os.path.lexists(step.path) and not step.overwrite:
        log.info("keeping existing image %s for %s", step.path, step.field)
        return
    directory = os.path.dirname(step.path) or "."
    try:
        if step.create_parent:
            os.makedirs(directory, exist_ok=True)
        elif not os.path.isdir(directory):
            raise PreparationError(step.field, f"{step.field}: the volume directory {directory} does not exist "
                                   f"(is the volume mounted?), so {step.path} cannot be created")
        size = _usable_size(step, directory)
        if size <= 0:
            raise PreparationError(step.field, f"{step.field}: the size for {step.path} is too low ({size} bytes)")
        flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if step.overwrite else os.O_EXCL)
        fd = os.open(step.path, flags, 0o660)
        try:
            os.ftruncate(fd, size)  # a hole, not zeros: the image takes no space until written
        finally:
            os.close(fd)
    except PreparationError:
        raise
    except OSError as e:
        if e.errno == errno.EEXIST:
            return  # made meanwhile by someone else: theirs is kept, as above
        raise PreparationError(step.field, f"{step.field}: cannot create {step.path}: {e.strerror or e}") from None
    log.info("created sparse image %s (%d bytes) for %s", step.path, size, step.field)


def possible_size(sizing: expansion.DiskSizing) -> int | None:
    """The size the disk of `sizing` may have now (`expansion`): a block device's own size; a
    filesystem volume's image the claim's size or what the volume can hold, less the overhead
    (None when that cannot be said). Raises OSError when the file or device cannot be read."""
    if sizing.block:
        fd = os.open(sizing.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return os.lseek(fd, 0, os.SEEK_END)  # the device's size (BLKGETSIZE64)
        finally:
            os.close(fd)
    st = os.stat(sizing.path)
    try:
        fs = os.statvfs(os.path.dirname(sizing.path) or ".")
        # allocated bytes + free space, as upstream's getUsableDiskSize (statfs f_bsize)
        usable = st.st_blocks * 512 + fs.f_bavail * fs.f_bsize
    except OSError as e:
        log.warning("cannot read the free space beside %s (%s); using the claim's size", sizing.path, e.strerror)
        usable = sizing.capacity or 0
    return expansion.guest_size(sizing, usable)


def expand_image(step: ExpandImage) -> None:
    """Grow a filesystem PVC's raw image to the size its claim allows, if that is more than it
    has (`expandDiskImagesOffline`). Like upstream, a failure is logged and the VM starts with
    the image as it is: it is never an error of the preparation."""
    sizing = step.sizing
    try:
        size = possible_size(sizing)
        current = os.stat(sizing.path).st_size
        if size is None or size <= current:
            return
        os.truncate(sizing.path, size)  # sparse: the new space takes none until written
    except OSError as e:
        log.error("%s: failed to expand disk image %s at boot: %s", step.field, sizing.path, e.strerror or e)
        return
    log.info("pre-start expansion of image %s from %d to %d bytes for %s", sizing.path, current, size, step.field)
