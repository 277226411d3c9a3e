"""Files that must be there before boot, and sockets another container serves."""

from __future__ import annotations

import os
import stat
import time

from ch_launcher.convert.plan import RequireFile, WaitForSocket
from ch_launcher.prepare.errors import PreparationError


def require_file(step: RequireFile) -> None:
    """Check that `step.path` exists (following symlinks) and is a regular file, or a block
    device when `step.block_device`. Raises PreparationError naming what is missing and where."""
    try:
        st = os.stat(step.path)
    except FileNotFoundError:
        note = f" ({step.missing_note})" if step.missing_note else ""
        raise PreparationError(step.field, f"{step.field}: {step.what} is missing: {step.path} does not "
                               f"exist{note}") from None
    except OSError as e:
        raise PreparationError(step.field, f"{step.field}: {step.what} at {step.path} cannot be read: "
                               f"{e.strerror or e}") from None
    if step.block_device:
        if not stat.S_ISBLK(st.st_mode):
            raise PreparationError(step.field, f"{step.field}: {step.what} at {step.path} is not a block device")
    elif not stat.S_ISREG(st.st_mode) and not stat.S_ISBLK(st.st_mode):
        raise PreparationError(step.field, f"{step.field}: {step.what} at {step.path} is not a file")


def wait_for_socket(step: WaitForSocket, deadline: float) -> None:
    """Wait until `step.path` is a unix socket, at most `step.timeout_seconds` and never past
    `deadline` (a `time.monotonic()` value). It only looks at the path: connecting would count
    as a client to back-ends such as vhost-user that serve exactly one.

    Raises PreparationError when the time runs out, saying whether the path is absent or is
    something other than a socket."""
    end = min(time.monotonic() + max(step.timeout_seconds, 0.0), deadline)
    delay = 0.005
    while True:
        try:
            mode = os.stat(step.path).st_mode
            if stat.S_ISSOCK(mode):
                return
            state = "exists but is not a socket"
        except FileNotFoundError:
            state = "does not exist"
        except OSError as e:
            state = f"cannot be checked ({e.strerror or e})"
        remaining = end - time.monotonic()
        if remaining <= 0:
            waited = max(step.timeout_seconds, 0.0)
            raise PreparationError(step.field, f"{step.field}: {step.what} did not appear: {step.path} {state} "
                                   f"after waiting up to {waited:g} s")
        time.sleep(min(delay, remaining))
        delay = min(delay * 2, 0.1)
