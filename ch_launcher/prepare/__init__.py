"""Executes a Plan's preparation steps (the only I/O of a translation): overlays, sparse images,
ISOs, checks for files and VFIO devices, waits for sockets. Never imported by admission.

`execute(plan)` runs the steps in order and stops at the first failure with a
`PreparationError(field, message)` naming the VMI field and the path. It is safe to run again
on the same plan (a launcher restart): existing overlays and raw images are kept, ISOs are
rebuilt from their sources.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from ch_launcher.convert.plan import (
    BuildCloudInitIso,
    BuildIso,
    CreateOverlay,
    CreateSparseImage,
    ExpandImage,
    Plan,
    RequireFile,
    RequireVfioDevice,
    Step,
    WaitForSocket,
)
from ch_launcher.prepare.errors import PreparationError
from ch_launcher.prepare.files import require_file, wait_for_socket
from ch_launcher.prepare.images import create_overlay, create_sparse_image, expand_image
from ch_launcher.prepare.iso import build_cloud_init_iso, build_iso

__all__ = ["DEFAULT_TIMEOUT", "PreparationError", "execute"]

log = logging.getLogger(__name__)
DEFAULT_TIMEOUT = 60.0


def execute(plan: Plan | Iterable[Step], *, timeout: float = DEFAULT_TIMEOUT) -> None:
    """Run every preparation step of `plan` (a Plan, or its steps) in order.

    `timeout` bounds the whole run's waiting (sockets); file work is not interrupted. Raises
    PreparationError on the first step that fails, and nothing else: I/O errors become
    PreparationErrors naming the step's VMI field. Steps already done stay done."""
    steps = plan.steps if isinstance(plan, Plan) else list(plan)
    deadline = time.monotonic() + timeout
    for step in steps:
        _run(step, deadline)


def _run(step: Step, deadline: float) -> None:
    try:
        if isinstance(step, CreateOverlay):
            create_overlay(step)
        elif isinstance(step, CreateSparseImage):
            create_sparse_image(step)
        elif isinstance(step, ExpandImage):
            expand_image(step)
        elif isinstance(step, BuildCloudInitIso):
            build_cloud_init_iso(step)
        elif isinstance(step, BuildIso):
            build_iso(step)
        elif isinstance(step, RequireFile):
            require_file(step)
        elif isinstance(step, WaitForSocket):
            wait_for_socket(step, deadline)
        elif isinstance(step, RequireVfioDevice):
            from ch_launcher.prepare.vfio import require_vfio_device  # VFIO VMIs only

            require_vfio_device(step)
        else:
            raise PreparationError(getattr(step, "field", ""), f"unknown preparation step {type(step).__name__}")
    except PreparationError as e:
        log.error("preparation failed: %s", e.message)
        raise
    except (OSError, ValueError) as e:  # defensive: each executor already names its paths
        field = getattr(step, "field", "")
        raise PreparationError(field, f"{field}: {type(step).__name__} failed: {e}") from None
