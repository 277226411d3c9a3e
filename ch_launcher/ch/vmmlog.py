"""What cloud-hypervisor's log tells about how its VM ended: an orderly stop, or a failure.

Cloud Hypervisor v53 stops a VM the same way for a guest poweroff and for an internal failure:
a vCPU whose `KVM_RUN` fails (a KVM internal/emulation error), a vCPU, virtio-device or API
thread that panics, or a thread that cannot apply its seccomp/Landlock rules writes the VMM's
`exit_evt`, and the VMM thread then runs `vmm_shutdown` exactly as for the guest's ACPI S5:
events `vm:shutdown`, `vm:deleted`, `vmm:shutdown`, exit code 0 ("Cloud Hypervisor exited
successfully"), and this even with `--no-shutdown`, which only governs the guest's own exit
(cloud-hypervisor vmm/src/cpu.rs `VCPU generated error`, vmm/src/lib.rs `EpollDispatch::Exit`
vs `EpollDispatch::GuestExit`, virtio-devices/src/thread_helper.rs, vmm/src/api/http/mod.rs
@v53). The one difference is the ERROR line the failing thread logs just before; CH writes its
log unbuffered (cloud-hypervisor/src/logger.rs@v53), so that line is in the file before the
event stream says `vm:shutdown`, and ERROR lines are written at every verbosity.

So a failure is recognised by a positive sign only, one of FAILURE_MARKERS: a VMM whose log says
nothing of the kind (an empty log, another build's wording, a simulation that writes none) is
taken at its word that the VM stopped in order.
"""

from __future__ import annotations

import os

# Texts of the error! lines that precede a write of exit_evt on a failure (v53 sources above).
# Not "Guest likely triple-faulted" (an ERROR too, but CH resets the VM and carries on).
FAILURE_MARKERS = (
    "VCPU generated error",          # vmm/src/cpu.rs: vcpu.run() returned an error
    "thread panicked",               # "vCPU thread panicked", "<device> thread panicked", "http-server thread panicked"
    "Error applying seccomp filter",
    "Error applying landlock",
    "Error applying Landlock",
)
TAIL_BYTES = 256 << 10  # a failure is among the last lines: CH exits right after it
_RECORD_START = "cloud-hypervisor:"  # DEFAULT_FORMAT's first token (the launcher sets no --log-format)


def failure_in(text: str) -> str | None:
    """The first failure `text` (a CH log) reports, as one line; None when it reports none.

    The line is the record's message (after its ` -- ` location prefix) with its "Caused by:"
    chain folded in; a backtrace (RUST_BACKTRACE) is left out."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not any(marker in line for marker in FAILURE_MARKERS):
            continue
        message = line.split(" -- ", 1)[1] if " -- " in line else line.strip()
        parts = [message.strip()]
        for more in lines[i + 1:]:
            if more.startswith(_RECORD_START) or more.strip().startswith("Stack backtrace:"):
                break
            if more.strip() and more.strip() != "Caused by:":
                parts.append(more.strip())
        folded = ": ".join(parts)
        if folded.count("(") > folded.count(")"):
            folded += ")" * (folded.count("(") - folded.count(")"))
        return folded
    return None


def failure_in_file(path: str) -> str | None:
    """`failure_in` of the last TAIL_BYTES of the log at `path`; None if it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - TAIL_BYTES))
            data = f.read()
    except OSError:
        return None
    return failure_in(data.decode("utf-8", errors="replace"))
