"""The Linux guest's root shell, typed into through `virtctl console` (tests/linux_guest prints
the prompt `<hostname>:<dir># ` on the serial port, KubeVirt's console).

`GuestShell.run(command)` types the command followed by a `printf` of its exit status and an end
marker on a line of their own, and returns what the command printed: the text between the echo
of what was typed and that line. The marker's text is assembled by printf, so the echo of the
typed line never matches it. Each run waits for its own marker only, so lines the guest prints
meanwhile (hotplug, the kernel's) do not get in the way; the kernel's messages (on a loaded
machine, RCU stall warnings) are left out of the output."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from tests.apiserver.cluster import ClusterError
from tests.cluster.node import Console

_serial = itertools.count(1)
_KERNEL_LINE = re.compile(r"^\[ *\d+\.\d+\] .*\n", re.MULTILINE)  # printk's, as the console shows them


@dataclass(frozen=True)
class Result:
    rc: int
    out: str  # what the command printed, "\r\n" turned into "\n", without the kernel's messages


class GuestShell:
    """The shell behind `console`, whose prompt is `prompt`. Made once the guest is up: it types a
    return and waits for a fresh prompt, and every `run` waits for the next one before it ends,
    so nothing is typed while the shell is not reading its line (the tty would echo it, and the
    shell's line editor echo it once more)."""

    def __init__(self, console: Console, prompt: str, *, timeout: float = 60) -> None:
        self.console, self.prompt = console, prompt
        prompts = console.text.count(prompt)
        console.type(b"\r")
        console.wait_for(prompt, count=prompts + 1, timeout=timeout)
        # the serial tty has no size, so the shell's line editor wraps at 80 columns, breaking
        # the echo of a longer command line; a wide terminal keeps it on one line
        self.run("stty cols 1024", timeout=timeout)

    def run(self, command: str, *, timeout: float = 120, check: bool = True) -> Result:
        """`command` in the guest's shell; ClusterError (with everything the console printed)
        when it does not end within `timeout` s, or ends non-zero and `check` is set."""
        n = next(_serial)
        start = len(self.console.text)
        prompts = self.console.text.count(self.prompt)
        self.console.type(f"{command}; printf '\\nrc=%d KCH-%s-%d\\n' $? END {n}\r".encode())
        marker = f" KCH-END-{n}\r"  # the end of its line: the exit status before it is complete
        text = self.console.wait_for(marker, timeout=timeout)[start:]
        found = re.search(rf"\r?\nrc=(\d+){re.escape(marker)}", text)
        # the end of the last echo of the typed line: right after a boot the tty may echo it
        # before the shell's line editor takes the line and echoes it again behind a prompt
        echoed = text.rfind(f" END {n}\r\n", 0, found.start() if found else len(text))
        if found is None or not 0 <= echoed < found.start():
            raise ClusterError(f"the guest's echo or end marker of {command!r} is malformed:\n{text}")
        out = _KERNEL_LINE.sub("", text[echoed + len(f" END {n}\r\n"):found.start()].replace("\r\n", "\n"))
        result = Result(int(found.group(1)), out)
        self.console.wait_for(self.prompt, count=prompts + 1, timeout=timeout)
        if check and result.rc != 0:
            raise ClusterError(f"{command!r} exited {result.rc} in the guest:\n{out}")
        return result
