"""Names of the pod's processes as `ps` and virt-handler see them.

Two names exist per process: `comm` (15 characters, `/proc/<pid>/stat`, what virt-handler's
process search reads through go-ps `Executable()`) and the command line (`/proc/<pid>/cmdline`,
what `ps -o args` shows). The monitor, the launcher and the spawner are one Python program
forked three times, so without this they would all show the monitor's command line.

`set_comm` writes `/proc/self/comm`. `set_cmdline` rewrites the process's original argument
area in place, as setproctitle does on Linux: the kernel serves `/proc/<pid>/cmdline` from the
memory between `arg_start` and `arg_end` (fields 48 and 49 of `/proc/self/stat`, proc(5)), which
CPython no longer reads after start-up (it keeps decoded copies); it writes there through
`/proc/self/mem` (no `ctypes`: the monitor, a `python -I -S`, imports only built-in modules).
The new text is truncated to the original area's size and NUL-padded. Both are best effort:
False when not possible.
"""

from __future__ import annotations


def set_comm(name: str) -> bool:
    """Name this process (its main thread's `comm`, truncated to 15 bytes)."""
    try:
        with open("/proc/self/comm", "w") as f:
            f.write(name[:15])
        return True
    except OSError:
        return False


def set_cmdline(text: str) -> bool:
    """Make `/proc/self/cmdline` read `text` (one argument), as far as the original fits it."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        # fields[0] is field 3 (state): field n is fields[n - 3]
        start, end = int(fields[48 - 3]), int(fields[49 - 3])
        size = end - start
        if start <= 0 or size <= 1:
            return False
        data = text.encode()[: size - 1]
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            mem.seek(start)
            mem.write(data + b"\0" * (size - len(data)))
        return True
    except (OSError, ValueError, IndexError):
        return False
