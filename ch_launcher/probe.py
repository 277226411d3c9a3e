"""`virt-probe` for ch-launcher pods: the command KubeVirt runs a VMI's `exec` and `guestAgentPing`
probes with.

virt-controller turns those probes of a VMI into exec probes of the launcher pod's `compute`
container: `virt-probe --domainName <ns>_<name> --timeoutSeconds N --command <cmd> -- <args>` or
`virt-probe --domainName <ns>_<name> --timeoutSeconds N --guestAgentPing`
(kubevirt pkg/virt-controller/services/rendercontainer.go@d923fdb815cd). Without the executable
kubelet reports the probe errored and the VMI never becomes Ready, so the ch-launcher image
ships this one. It keeps upstream's command line and outcome (kubevirt cmd/virt-probe@d923fdb815cd
and the cmd client's `Exec`/`GuestPing`): dial the launcher's command socket, call `GuestPing` or
`Exec` with a deadline of `--timeoutSeconds` + 5 s; the ping exits 0 when the launcher answered
success, else 1; exec prints the command's output and exits with its exit code (255 when the call
failed: upstream exits with -1), which the launcher runs through the guest agent.

Like `virt-freezer` it runs in the compute container beside the VM, as often as every second, so
the image starts it as `python -ISOO` importing only built-in modules and `ch_launcher.grpc_lite`.
Log lines are KubeVirt's JSON on stderr (`ch_launcher.kubevirt.logline`).
"""

from __future__ import annotations

import sys

if __package__ in (None, ""):  # run by path (`-I`: without its own directory), as the image runs it
    sys.path.insert(0, __file__.rsplit("/", 2)[0])

from ch_launcher import grpc_lite, pflag
from ch_launcher.kubevirt.logline import line

LAUNCHER_SOCKET = "/run/kubevirt/sockets/launcher-sock"  # upstream's cmdclient.SocketOnGuest()
CMD = "/kubevirt.cmd.v1.Cmd/"
SHORT_TIMEOUT = 5.0  # the cmd client adds it to the probe's timeout
FLAGS = {"socket": "str", "domainName": "str", "command": "str", "memProfile": "str", "timeoutSeconds": "int",
         "guestAgentPing": "bool", "v": "int"}


def parse(argv: list[str]) -> tuple[dict[str, object], list[str]]:
    """pflag's syntax (`ch_launcher.pflag`): the flags and the positional arguments; ValueError."""
    values: dict[str, object] = {"socket": LAUNCHER_SOCKET, "domainName": "", "command": "", "memProfile": "",
                                 "timeoutSeconds": 1, "guestAgentPing": False, "v": 2}
    return values, pflag.parse(argv, FLAGS, values)


def run(argv: list[str]) -> int:
    try:
        flags, args = parse(argv)
    except ValueError as e:
        _log("error", "Failed to parse flags", reason=str(e))
        return 2  # pflag's ExitOnError
    socket, domain = str(flags["socket"]), str(flags["domainName"])
    timeout = int(str(flags["timeoutSeconds"]))
    deadline = timeout + SHORT_TIMEOUT
    if flags["guestAgentPing"]:
        request = grpc_lite.field_bytes(1, domain) + grpc_lite.field_varint(2, timeout)
        try:
            reply = grpc_lite.fields(grpc_lite.call(socket, CMD + "GuestPing", request, deadline))
            failure = _failure(reply.get(1, b""))
        except (grpc_lite.CallFailed, ValueError) as e:
            failure = str(e)
        if failure is not None:
            _log("critical", "Failed to ping the guest", reason=failure)
            return 1
        return 0
    request = (grpc_lite.field_bytes(1, domain) + grpc_lite.field_bytes(2, str(flags["command"]))
               + b"".join(grpc_lite.field_bytes(3, a) if a else b"\x1a\x00" for a in args)
               + grpc_lite.field_varint(4, timeout))
    exit_code, out, failure = -1, "", None
    try:
        reply = grpc_lite.fields(grpc_lite.call(socket, CMD + "Exec", request, deadline))
        code = reply.get(2, 0)
        exit_code = (code - (1 << 64) if code >= 1 << 63 else code) if isinstance(code, int) else -1
        out = _text(reply.get(3))
        failure = _failure(reply.get(1, b""))
    except (grpc_lite.CallFailed, ValueError) as e:
        failure = str(e)
    if out:
        sys.stdout.write(out + "\n")
        sys.stdout.flush()
    if failure is not None:
        _log("critical", "Failed executing the command", reason=failure)
    return exit_code & 0xFF  # os.Exit's status, as the kernel keeps it


def _failure(response: bytes | int) -> str | None:
    """None when a `Response{bool success = 1; string message = 2}` says success, else its message."""
    fields = grpc_lite.fields(response) if isinstance(response, bytes) else {}
    return None if fields.get(1) else (_text(fields.get(2)) or "the launcher answered success=false")


def _text(value: bytes | int | None) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else ""


def _log(level: str, msg: str, **more: str) -> None:
    sys.stderr.write(line("virt-probe", level, msg, "virt-probe.py:0", **more) + "\n")
    sys.stderr.flush()


def main(argv: list[str] | None = None) -> int:
    return run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
