"""`virt-freezer` for ch-launcher pods: the Velero backup hook KubeVirt adds to every launcher pod.

virt-controller annotates launcher pods with Velero pre/post backup hooks that run
`/usr/bin/virt-freezer --freeze|--unfreeze --name <vmi> --namespace <ns>` in the `compute`
container (kubevirt pkg/storage/pod/annotations/generator.go@d923fdb815cd). Without that
executable the hook fails and Velero fails the pod's backup, so the ch-launcher image ships this
one. It keeps upstream's command line and decision logic (kubevirt
cmd/virt-freezer/virt-freezer.go@d923fdb815cd): dial the launcher's command socket, ask
`GetGuestInfo`; with no guest agent (the guest runs none on vsock, or it is not connected yet)
log "No guest agent, exiting" and exit 0, so the backup proceeds crash-consistent, exactly as it
does for a QEMU VM without an agent. With an agent, and a domain that runs (`GetDomain`), it calls
Freeze (with `--unfreezeTimeoutSeconds`, default 300) or Unfreeze, which ch-launcher carries out
through the agent.

It runs in the `compute` container beside the VM, so what it weighs counts against the pod's
memory limit while a backup runs: the image starts it as `python -ISOO` (no site-packages) and it
imports only built-in modules, speaking gRPC through `ch_launcher.grpc_lite` (grpcio, logging and
argparse would add about 15 MiB); `json` only once a guest agent answered.

Exit status: 0 on success or no agent, 1 on any failure (bad flags, launcher unreachable, RPC
failure), as upstream. Log lines are KubeVirt's JSON (`ch_launcher.kubevirt.logline`).
"""

from __future__ import annotations

import sys

if __package__ in (None, ""):  # run by path (`-I`: without its own directory), as the image runs it
    sys.path.insert(0, __file__.rsplit("/", 2)[0])

from ch_launcher import grpc_lite, pflag
from ch_launcher.kubevirt.logline import line

# Upstream dials this fixed path (the compute container's view of the sockets emptyDir).
LAUNCHER_SOCKET = "/run/kubevirt/sockets/launcher-sock"
CMD = "/kubevirt.cmd.v1.Cmd/"
TIMEOUT = 60.0  # each call; the launcher answers Freeze once the guest agent did
GA_NOT_AVAILABLE = "Guest agent not available for now"
FLAGS = {"freeze": "bool", "unfreeze": "bool", "name": "str", "namespace": "str", "unfreezeTimeoutSeconds": "int",
         "socket": "str"}  # --socket: tests only


class Failed(Exception):
    """What went wrong, already logged."""


def parse(argv: list[str]) -> dict[str, object]:
    """pflag's syntax (`ch_launcher.pflag`; no positional arguments); ValueError."""
    values: dict[str, object] = {"freeze": False, "unfreeze": False, "name": "", "namespace": "",
                                 "unfreezeTimeoutSeconds": 300, "socket": LAUNCHER_SOCKET}
    rest = pflag.parse(argv, FLAGS, values)
    if rest:
        raise ValueError(f"unknown flag: {rest[0]}")
    if not values["freeze"] and not values["unfreeze"]:
        raise ValueError("either --freeze or --unfreeze must be set")
    if not values["name"] or not values["namespace"]:
        raise ValueError("both --name and --namespace must be provided")
    return values


def run(argv: list[str]) -> int:
    try:
        flags = parse(argv)
    except ValueError as e:
        _log("error", "Failed to parse flags", reason=str(e))
        return 1
    socket, name, namespace = str(flags["socket"]), str(flags["name"]), str(flags["namespace"])
    try:
        info = _response(_call(socket, "GetGuestInfo", b"", f"Failed to get guest info from {socket}"),
                         "Failed to get guest info")
        agent = _guest_agent(_text(info.get(2)))
        if agent is None:
            _log("info", "No guest agent, exiting")
            return 0
        _log("info", f"Guest agent version is {agent[0]}")
        if not _domain_runs(socket):
            _log("info", "VM domain not running, no need to freeze/unfreeze")
            return 0
        vmi = grpc_lite.field_bytes(1, grpc_lite.field_bytes(1, _vmi_json(name, namespace)))  # VMI{vmiJson}
        if flags["freeze"]:
            timeout = grpc_lite.field_varint(2, int(str(flags["unfreezeTimeoutSeconds"])))
            reply = _call(socket, "FreezeVirtualMachine", vmi + timeout, "Freezing VMI failed")
            failure = _failure(reply)
            if failure is not None:
                if GA_NOT_AVAILABLE in failure:
                    _call(socket, "UnfreezeVirtualMachine", vmi, "Unfreezing VMI failed")
                    vss = " and VSS are" if "windows" in agent[1].lower() else " is"
                    _log("error", f"Freezing VMI failed, please make sure guest agent{vss} running and try again",
                         reason=failure)
                else:
                    _log("error", "Freezing VMI failed", reason=failure)
                return 1
        else:
            failure = _failure(_call(socket, "UnfreezeVirtualMachine", vmi, "Unfreezing VMI failed"))
            if failure is not None:
                _log("error", "Unfreezing VMI failed", reason=failure)
                return 1
    except Failed:
        return 1
    _log("info", "Operation completed successfully")
    return 0


def _call(socket: str, method: str, request: bytes, what: str) -> bytes:
    try:
        return grpc_lite.call(socket, CMD + method, request, TIMEOUT)
    except grpc_lite.CallFailed as e:
        _log("error", what, reason=str(e))
        raise Failed from None


def _response(answer: bytes, what: str) -> dict[int, bytes | int]:
    """A `...Response{Response response = 1; ...}` answer's fields; Failed unless it succeeded."""
    try:
        fields = grpc_lite.fields(answer)
        failure = _failure(fields.get(1, b""))
    except ValueError as e:
        failure = f"unreadable answer: {e}"
    if failure is not None:
        _log("error", what, reason=failure)
        raise Failed
    return fields


def _failure(response: bytes | int) -> str | None:
    """None when a `Response{bool success = 1; string message = 2}` says success, else its message."""
    fields = grpc_lite.fields(response) if isinstance(response, bytes) else {}
    return None if fields.get(1) else (_text(fields.get(2)) or "the launcher answered success=false")


def _guest_agent(guest_info: str) -> tuple[str, str] | None:
    """(agent version, guest OS name) from GetGuestInfo's JSON; None without an agent. `json` is
    imported only when the answer names an agent version."""
    if '"guestAgentVersion"' not in guest_info or '"guestAgentVersion":""' in guest_info:
        return None
    import json

    try:
        info = json.loads(guest_info)
        version, os_name = str(info.get("guestAgentVersion") or ""), str((info.get("os") or {}).get("name") or "")
    except (ValueError, AttributeError):
        return None
    return (version, os_name) if version else None


def _domain_runs(socket: str) -> bool:
    import json

    fields = _response(_call(socket, "GetDomain", b"", "Failed to get domain"), "Failed to get domain")
    try:
        domain = json.loads(_text(fields.get(2)) or "null")
    except ValueError:
        return False
    return isinstance(domain, dict) and (domain.get("Status") or {}).get("Status") == "Running"


def _vmi_json(name: str, namespace: str) -> str:
    from _json import encode_basestring_ascii as quoted

    return f'{{"metadata":{{"name":{quoted(name)},"namespace":{quoted(namespace)}}}}}'


def _text(value: bytes | int | None) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else ""


def _log(level: str, msg: str, **more: str) -> None:
    sys.stderr.write(line("freezer", level, msg, "virt-freezer.py:0", **more) + "\n")
    sys.stderr.flush()


def main(argv: list[str] | None = None) -> int:
    return run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
