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
    if request.unfreezeTimeoutSeconds == 1:  # a status that is not OK, and a message all the same
        context.set_code(grpc.StatusCode.FAILED_PRECONDITION)
    if request.unfreezeTimeoutSeconds == 2:  # slow: the server stops meanwhile
        await asyncio.sleep(1)
    return pb.Response(success=True, message=f"{request.vmi.vmiJson.decode()} {request.unfreezeTimeoutSeconds}")


async def _guest_os_info(request: pb.EmptyRequest, context: Any) -> pb.GuestInfoResponse:
    """What the server knows of the caller's deadline, as its answer."""
    return pb.GuestInfoResponse(response=pb.Response(success=True), guestInfoResponse=repr(context.time_remaining()))


LAUNCHER = grpc.method_handlers_generic_handler("kubevirt.cmd.v1.Cmd", {
    "GetGuestInfo": grpc.unary_unary_rpc_method_handler(_guest_info, pb.EmptyRequest.FromString,
                                                        pb.GuestInfoResponse.SerializeToString),
    "FreezeVirtualMachine": grpc.unary_unary_rpc_method_handler(_freeze, pb.FreezeRequest.FromString,
                                                                pb.Response.SerializeToString),
    "GetGuestOSInfo": grpc.unary_unary_rpc_method_handler(_guest_os_info, pb.EmptyRequest.FromString,
                                                          pb.GuestInfoResponse.SerializeToString)})
FREEZE = "/kubevirt.cmd.v1.Cmd/FreezeVirtualMachine"


def freeze_request(vmi_json: bytes, seconds: int) -> bytes:
    return grpc_lite.field_bytes(1, grpc_lite.field_bytes(1, vmi_json)) + grpc_lite.field_varint(2, seconds)


def with_server(tmp_path: Path, story: Callable[[str], Awaitable[None]],
                then: Callable[[grpc.aio.Server, str], Awaitable[None]] | None = None) -> None:
    """Run `story(socket path)` beside a real grpc.aio server of `LAUNCHER`, or `then(server,
    socket path)` when given."""
    async def main() -> None:
        path = str(tmp_path / "launcher-sock")
        s = grpc.aio.server()
        s.add_generic_rpc_handlers((LAUNCHER,))
        s.add_insecure_port(f"unix:{path}")
        await s.start()
        try:
            await (then(s, path) if then else story(path))
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


def test_a_request_longer_than_a_frame_and_the_first_window_arrives_whole(tmp_path: Path) -> None:
    """A domain's JSON (the monitor's epitaph) can pass HTTP/2's 16 KiB frame and 64 KiB window."""
    async def story(server: str) -> None:
        answer = await call(server, FREEZE, freeze_request(LONG.encode(), 300))
        assert pb.Response.FromString(answer) == pb.Response(success=True, message=f"{LONG} 300")

    with_server(tmp_path, story)


def test_a_message_under_a_status_that_is_not_ok_is_call_failed(tmp_path: Path) -> None:
    """A grpc-go or grpcio client reports the status, not the message: so does this one."""
    async def story(server: str) -> None:
        with pytest.raises(grpc_lite.CallFailed, match=r"without an answer \(gRPC status 9\)"):
            await call(server, FREEZE, freeze_request(b"{}", 1))

    with_server(tmp_path, story)


def test_the_server_learns_the_callers_deadline(tmp_path: Path) -> None:
    async def story(server: str) -> None:
        remaining = float(pb.GuestInfoResponse.FromString(
            await call(server, "/kubevirt.cmd.v1.Cmd/GetGuestOSInfo", b"")).guestInfoResponse)
        assert 0 < remaining <= 5.0

    with_server(tmp_path, story)


def test_a_call_in_flight_when_the_server_stops_gracefully_is_answered(tmp_path: Path) -> None:
    """grpc's graceful stop says GOAWAY naming the streams it will still finish."""
    async def story(server: grpc.aio.Server, path: str) -> None:
        answer = asyncio.ensure_future(call(path, FREEZE, freeze_request(b"{}", 2)))
        await asyncio.sleep(0.3)  # the call has reached the servicer (it sleeps 1 s)
        await server.stop(30)
        assert pb.Response.FromString(await answer).message == "{} 2"

    with_server(tmp_path, _a_request, then=story)


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


def test_a_server_that_keeps_the_connection_busy_without_answering_is_still_a_timeout(tmp_path: Path) -> None:
    """The timeout bounds the whole call, not each read."""
    import socket
    import threading

    path = str(tmp_path / "chatty")
    stop = threading.Event()

    def chatty(listener: socket.socket) -> None:
        conn, _ = listener.accept()
        conn.settimeout(0.05)
        with conn:
            while not stop.is_set():  # reads what the client says, and every 50 ms a PING
                try:
                    if not conn.recv(65536):
                        return
                except TimeoutError:
                    pass
                except OSError:  # the client gave up and reset the connection
                    return
                try:
                    conn.sendall(grpc_lite._frame(grpc_lite.PING, 0, 0, bytes(8)))
                except OSError:
                    return

    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(path)
        listener.listen(1)
        server = threading.Thread(target=chatty, args=(listener,), daemon=True)
        server.start()
        try:
            with pytest.raises(grpc_lite.CallFailed, match="timed out"):
                grpc_lite.call(path, GUEST_INFO, b"", 0.5)
        finally:
            stop.set()
            server.join()


def test_the_status_is_found_as_go_writes_it_huffman_coded() -> None:
    """virt-handler's grpc-go codes the name "grpc-status" with Huffman (shorter); the value is
    RFC 7541 C.6.1's Huffman-coded "302"; grpcio writes both plainly (the stories above)."""
    name = bytes((0x80 | 8,)) + bytes.fromhex("9acac8b21234da8f")
    block = b"\x88" + b"\x40" + name + b"\x82" + bytes.fromhex("6402") + b"\x00\x03abc\x01x"
    assert grpc_lite._grpc_status(block) == "302"
    assert grpc_lite._grpc_status(b"\x00" + name + b"\x01" + b"0") == "0"
    assert grpc_lite._grpc_status(b"\x00" + name + b"\x81\x10") is None  # "2", then padding that is not all ones
    assert grpc_lite._grpc_status(b"\x88") is None


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
