"""ch_launcher/grpc_lite.py against a real grpc.aio server (the library the launcher serves with):
one unary call, its answer or why there is none, and the few protobuf helpers it brings, checked
against the generated code's own encoding."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from ch_launcher import grpc_lite
from ch_launcher._proto import kubevirt_cmd_v1_pb2 as pb

GUEST_INFO = "/kubevirt.cmd.v1.Cmd/GetGuestInfo"
LONG = "x" * (300 << 10)  # longer than HTTP/2's first flow-control window (64 KiB)


async def _guest_info(request: pb.EmptyRequest, context: Any) -> pb.GuestInfoResponse:
    return pb.GuestInfoResponse(response=pb.Response(success=True), guestInfoResponse=LONG)


async def _freeze(request: pb.FreezeRequest, context: Any) -> pb.Response:
    if request.unfreezeTimeoutSeconds == 0:
        await context.abort(grpc.StatusCode.INTERNAL, "no timeout")
    return pb.Response(success=True, message=f"{request.vmi.vmiJson.decode()} {request.unfreezeTimeoutSeconds}")


LAUNCHER = grpc.method_handlers_generic_handler("kubevirt.cmd.v1.Cmd", {
    "GetGuestInfo": grpc.unary_unary_rpc_method_handler(_guest_info, pb.EmptyRequest.FromString,
                                                        pb.GuestInfoResponse.SerializeToString),
    "FreezeVirtualMachine": grpc.unary_unary_rpc_method_handler(_freeze, pb.FreezeRequest.FromString,
                                                                pb.Response.SerializeToString)})


def with_server(tmp_path: Path, story: Callable[[str], Awaitable[None]]) -> None:
    """Run `story(socket path)` beside a real grpc.aio server of `_Launcher`."""
    async def main() -> None:
        path = str(tmp_path / "launcher-sock")
        s = grpc.aio.server()
        s.add_generic_rpc_handlers((LAUNCHER,))
        s.add_insecure_port(f"unix:{path}")
        await s.start()
        try:
            await story(path)
        finally:
            await s.stop(0)

    asyncio.run(main())


def call(server: str, method: str, request: bytes) -> Awaitable[bytes]:
    return asyncio.to_thread(grpc_lite.call, server, method, request, 5.0)


def test_a_call_returns_the_answer_however_long(tmp_path: Path) -> None:
    with_server(tmp_path, _a_long_answer)


async def _a_long_answer(server: str) -> None:
    answer = await call(server, GUEST_INFO, b"")
    fields = grpc_lite.fields(answer)
    response = fields[1]
    assert isinstance(response, bytes) and grpc_lite.fields(response) == {1: 1}  # response.success
    assert fields[2] == LONG.encode()
    assert pb.GuestInfoResponse.FromString(answer).guestInfoResponse == LONG


def test_requests_are_encoded_as_the_generated_code_encodes_them(tmp_path: Path) -> None:
    with_server(tmp_path, _a_request)


async def _a_request(server: str) -> None:
    request = grpc_lite.field_bytes(1, grpc_lite.field_bytes(1, b'{"a":1}')) + grpc_lite.field_varint(2, 300)
    assert request == pb.FreezeRequest(vmi=pb.VMI(vmiJson=b'{"a":1}'), unfreezeTimeoutSeconds=300).SerializeToString()
    answer = await call(server, "/kubevirt.cmd.v1.Cmd/FreezeVirtualMachine", request)
    assert pb.Response.FromString(answer) == pb.Response(success=True, message='{"a":1} 300')
    assert grpc_lite.field_varint(2, 0) == b"" and grpc_lite.field_bytes(1, "") == b""  # proto3 leaves them out


def test_an_error_status_an_unknown_method_and_no_server_are_call_failed(tmp_path: Path) -> None:
    async def story(server: str) -> None:
        for method in ("/kubevirt.cmd.v1.Cmd/FreezeVirtualMachine", "/kubevirt.cmd.v1.Cmd/NoSuchMethod"):
            with pytest.raises(grpc_lite.CallFailed, match="without an answer"):
                await call(server, method, b"")
        with pytest.raises(grpc_lite.CallFailed, match="No such file or directory"):
            await call(str(tmp_path / "absent"), GUEST_INFO, b"")

    with_server(tmp_path, story)


def test_a_server_that_never_answers_is_a_timeout(tmp_path: Path) -> None:
    import socket

    path = str(tmp_path / "silent")
    with socket.socket(socket.AF_UNIX) as silent:
        silent.bind(path)
        silent.listen(1)
        with pytest.raises(grpc_lite.CallFailed, match="timed out"):
            grpc_lite.call(path, GUEST_INFO, b"", 0.5)


def test_malformed_messages_are_value_errors() -> None:
    for bad in (b"\x0a\x05ab", b"\x08", b"\x0b"):
        with pytest.raises(ValueError):
            grpc_lite.fields(bad)


def test_it_imports_only_built_in_modules() -> None:
    """The monitor (`python -I -S`) imports it: nothing from site-packages, nothing heavy."""
    code = ("import sys; before = set(sys.modules); sys.path.insert(0, sys.argv[1]); import ch_launcher.grpc_lite; "
            "print(sorted(m for m in set(sys.modules) - before if not m.startswith('ch_launcher')))")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code, root], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "['__future__', '_socket']"
