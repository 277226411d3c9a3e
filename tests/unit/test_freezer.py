"""virt-freezer (ch_launcher/freezer.py) against a stand-in launcher that has a guest agent (a real
grpc.aio server of the Cmd contract), run as the image runs it: upstream's decisions
(kubevirt cmd/virt-freezer/virt-freezer.go@d923fdb815cd) and its messages, with nothing but
built-in modules loaded. (Against the real launcher, which has no agent:
tests/functional/test_freezer.py.)"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from ch_launcher import freezer
from ch_launcher._proto import kubevirt_cmd_v1_pb2 as pb


class _Launcher:
    """The Cmd RPCs virt-freezer calls, served with a guest agent (`agent` "" for none)."""

    def __init__(self, *, agent: str = "5.2", os_name: str = "Fedora Linux", state: str = "Running",
                 freeze_error: str = "") -> None:
        self.agent, self.os_name, self.state, self.freeze_error = agent, os_name, state, freeze_error
        self.calls: list[tuple[str, Any]] = []

    def handler(self) -> grpc.GenericRpcHandler:
        def unary(fn: Any, request: Any, response: Any) -> grpc.RpcMethodHandler[Any, Any]:
            return grpc.unary_unary_rpc_method_handler(fn, request.FromString, response.SerializeToString)
        return grpc.method_handlers_generic_handler("kubevirt.cmd.v1.Cmd", {
            "GetGuestInfo": unary(self.GetGuestInfo, pb.EmptyRequest, pb.GuestInfoResponse),
            "GetDomain": unary(self.GetDomain, pb.EmptyRequest, pb.DomainResponse),
            "FreezeVirtualMachine": unary(self.FreezeVirtualMachine, pb.FreezeRequest, pb.Response),
            "UnfreezeVirtualMachine": unary(self.UnfreezeVirtualMachine, pb.VMIRequest, pb.Response)})

    async def GetGuestInfo(self, request: Any, context: Any) -> pb.GuestInfoResponse:  # noqa: N802
        info = {"guestAgentVersion": self.agent, "os": {"name": self.os_name}} if self.agent else {}
        return pb.GuestInfoResponse(response=pb.Response(success=True), guestInfoResponse=json.dumps(info))

    async def GetDomain(self, request: Any, context: Any) -> pb.DomainResponse:  # noqa: N802
        return pb.DomainResponse(response=pb.Response(success=True),
                                 domain=json.dumps({"Status": {"Status": self.state}}))

    async def FreezeVirtualMachine(self, request: pb.FreezeRequest, context: Any) -> pb.Response:  # noqa: N802
        self.calls.append(("Freeze", (json.loads(request.vmi.vmiJson), request.unfreezeTimeoutSeconds)))
        return pb.Response(success=not self.freeze_error, message=self.freeze_error)

    async def UnfreezeVirtualMachine(self, request: pb.VMIRequest, context: Any) -> pb.Response:  # noqa: N802
        self.calls.append(("Unfreeze", json.loads(request.vmi.vmiJson)))
        return pb.Response(success=True)


def run_freezer(tmp_path: Path, launcher: _Launcher, *args: str) -> subprocess.CompletedProcess[str]:
    async def main() -> subprocess.CompletedProcess[str]:
        socket = str(tmp_path / "launcher-sock")
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((launcher.handler(),))
        server.add_insecure_port(f"unix:{socket}")
        await server.start()
        try:
            return await asyncio.to_thread(
                subprocess.run, [sys.executable, "-ISOO", freezer.__file__, *args, "--socket", socket],
                capture_output=True, text=True, timeout=30, check=False)
        finally:
            await server.stop(0)

    return asyncio.run(main())


def messages(done: subprocess.CompletedProcess[str]) -> list[tuple[str, str, str]]:
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert all(line["component"] == "freezer" for line in lines)
    return [(line["level"], line["msg"], line.get("reason", "")) for line in lines]


VMI = {"metadata": {"name": "vm", "namespace": "ns"}}


def test_with_a_guest_agent_freeze_asks_the_launcher_with_the_timeout_and_unfreeze_thaws(tmp_path: Path) -> None:
    launcher = _Launcher()
    done = run_freezer(tmp_path, launcher, "--freeze", "--name", "vm", "--namespace=ns", "--unfreezeTimeoutSeconds=60")
    assert done.returncode == 0, done.stderr
    assert messages(done) == [("info", "Guest agent version is 5.2", ""),
                              ("info", "Operation completed successfully", "")]
    done = run_freezer(tmp_path, launcher, "--unfreeze", "--name=vm", "--namespace", "ns")
    assert done.returncode == 0, done.stderr
    assert launcher.calls == [("Freeze", (VMI, 60)), ("Unfreeze", VMI)]


def test_without_an_agent_or_a_running_domain_nothing_is_frozen(tmp_path: Path) -> None:
    for launcher, said in ((_Launcher(agent=""), "No guest agent, exiting"),
                           (_Launcher(state="Paused"), "VM domain not running, no need to freeze/unfreeze")):
        done = run_freezer(tmp_path, launcher, "--freeze", "--name", "vm", "--namespace", "ns")
        assert done.returncode == 0, done.stderr
        assert messages(done)[-1] == ("info", said, "")
        assert launcher.calls == []


@pytest.mark.parametrize("os_name,words", [("Fedora Linux", "guest agent is running"),
                                           ("Microsoft Windows Server", "guest agent and VSS are running")])
def test_a_freeze_the_agent_cannot_do_thaws_again_and_fails_with_upstreams_advice(tmp_path: Path, os_name: str,
                                                                                  words: str) -> None:
    launcher = _Launcher(os_name=os_name, freeze_error="Guest agent not available for now")
    done = run_freezer(tmp_path, launcher, "--freeze", "--name", "vm", "--namespace", "ns")
    assert done.returncode == 1
    assert messages(done)[-1] == ("error", f"Freezing VMI failed, please make sure {words} and try again",
                                  "Guest agent not available for now")
    assert launcher.calls == [("Freeze", (VMI, 300)), ("Unfreeze", VMI)]


@pytest.mark.parametrize("args,reason", [
    (["--name", "v", "--namespace", "n"], "either --freeze or --unfreeze must be set"),
    (["--freeze", "--namespace", "n"], "both --name and --namespace must be provided"),
    (["--freeze", "--name", "v", "--namespace", "n", "--bogus"], "unknown flag: --bogus"),
    (["--freeze", "--name", "v", "--namespace", "n", "--unfreezeTimeoutSeconds", "x"],
     "invalid argument 'x' for --unfreezeTimeoutSeconds"),
])
def test_bad_flags_are_refused_before_anything_is_asked(tmp_path: Path, args: list[str], reason: str) -> None:
    launcher = _Launcher()
    done = run_freezer(tmp_path, launcher, *args)
    assert done.returncode == 1
    assert messages(done) == [("error", "Failed to parse flags", reason)]


def test_it_loads_nothing_but_built_in_modules_and_its_own() -> None:
    """What the interpreter imports after its start (`-X importtime`) for a whole run, as the
    image runs it: none of grpcio, json, re, logging, argparse, socket (whose enum is ~1 MiB)."""
    done = subprocess.run([sys.executable, "-ISOO", "-X", "importtime", freezer.__file__, "--freeze", "--name", "v",
                           "--namespace", "n", "--socket", "/nonexistent"], capture_output=True, text=True, timeout=30,
                          check=False)
    assert done.returncode == 1
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert {"ch_launcher.grpc_lite", "_socket"} <= imported
    assert not {m.split(".")[0] for m in imported} & {"grpc", "google", "json", "re", "logging", "argparse", "socket",
                                                     "enum"}, sorted(imported)
