"""The wire format a client must cope with (cloud-hypervisor.md §2, §4), checked with raw sockets,
and the client's handling of each case. Runs on both backends unless a knob is needed."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable

import pytest

from ch_launcher.ch.api import CloudHypervisorClient, InvalidRequest, VmmUnavailable, VmNotCreated, error_for
from tests.contract.harness import FAKE, Vmm, raw_request, read_response


def _get(endpoint: str) -> bytes:
    return f"GET /api/v1/{endpoint} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()


def _put(endpoint: str, body: bytes = b"") -> bytes:
    head = f"PUT /api/v1/{endpoint} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {len(body)}\r\n"
    if body:
        head += "Content-Type: application/json\r\n"
    return head.encode() + b"\r\n" + body


def _split(raw: bytes) -> tuple[str, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return lines[0], headers, body


def test_status_line_has_an_empty_reason_phrase_and_the_cloud_hypervisor_headers(vmm: Vmm) -> None:
    status, headers, body = _split(raw_request(vmm.api_socket, _get("vmm.ping")))
    assert status == "HTTP/1.1 200 "
    assert headers["server"] == "Cloud Hypervisor API"
    assert headers["connection"] == "keep-alive"
    assert headers["content-type"] == "application/json"
    assert int(headers["content-length"]) == len(body)
    assert json.loads(body)["version"]


def test_204_has_no_body_headers(vmm: Vmm) -> None:
    status, headers, body = _split(raw_request(vmm.api_socket, _put("vm.delete")))
    assert status == "HTTP/1.1 204 "
    assert "content-length" not in headers and "content-type" not in headers
    assert body == b""


def test_vmm_shutdown_answers_200_with_an_empty_body(vmm: Vmm) -> None:
    status, headers, body = _split(raw_request(vmm.api_socket, _put("vmm.shutdown")))
    assert status == "HTTP/1.1 200 "
    assert headers["content-length"] == "0"
    assert body == b""
    assert vmm.proc.wait(10) == 0


def test_unknown_path_is_404_not_found(vmm: Vmm) -> None:
    status, _, body = _split(raw_request(vmm.api_socket, _get("vm.nonsense")))
    assert status == "HTTP/1.1 404 "
    assert json.loads(body) == ["Not Found"]


def test_client_reports_an_unknown_endpoint_as_invalid_request(vmm: Vmm) -> None:
    with pytest.raises(InvalidRequest, match=r"vm.coredump failed \(HTTP 404\): Not Found"):
        vmm.client._put("vm.coredump", {"destination_url": "file:///tmp"})


def test_wrong_method_is_400_bad_request(vmm: Vmm) -> None:
    status, _, body = _split(raw_request(vmm.api_socket, _put("vm.info")))
    assert status == "HTTP/1.1 400 "
    assert json.loads(body) == ["Bad Request"]


def test_a_body_on_a_bodyless_action_is_400_bad_request(vmm: Vmm) -> None:
    status, _, body = _split(raw_request(vmm.api_socket, _put("vm.boot", b"{}")))
    assert status == "HTTP/1.1 400 "
    assert json.loads(body) == ["Bad Request"]


def test_create_without_a_body_is_a_bare_400_with_an_empty_body(vmm: Vmm) -> None:
    # vm.create answers a bare Response::new(BadRequest) (http_endpoint.rs@v53, VmCreate), every
    # other endpoint that needs a body the ["Bad Request"] error (as the real v53.0 does).
    status, headers, body = _split(raw_request(vmm.api_socket, _put("vm.create")))
    assert status == "HTTP/1.1 400 "
    assert headers["content-length"] == "0" and body == b""
    err = error_for("vm.create", 400, body)
    assert isinstance(err, InvalidRequest)
    status, _, body = _split(raw_request(vmm.api_socket, _put("vm.add-disk")))
    assert status == "HTTP/1.1 400 " and json.loads(body) == ["Bad Request"]


def _answers(s: socket.socket, n: int) -> list[tuple[str, dict[str, str], bytes]]:
    """The next `n` answers on `s`, each split by its Content-Length."""
    out, data = [], b""
    while len(out) < n:
        head_end = data.find(b"\r\n\r\n")
        if head_end >= 0:
            status, headers, _ = _split(data[:head_end + 4])
            end = head_end + 4 + int(headers.get("content-length", "0"))
            if len(data) >= end:
                out.append((status, headers, data[head_end + 4 : end]))
                data = data[end:]
                continue
        chunk = s.recv(65536)
        assert chunk, f"the connection closed after {len(out)} answers"
        data += chunk
    return out


@pytest.mark.parametrize("method", ["POST", "DELETE", "HEAD", "OPTIONS"])
def test_a_method_micro_http_does_not_know_gets_its_400_object_and_the_connection_serves_on(
        vmm: Vmm, method: str) -> None:
    # micro_http knows GET, PUT and PATCH; any other method is refused by the parser itself, with
    # a body and Content-Length (so an HTTP client reads the answer instead of waiting for ever),
    # and the connection stays open for the next request.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(vmm.api_socket)
        s.sendall(f"{method} /api/v1/vm.boot HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
        [(status, headers, body)] = _answers(s, 1)
        assert status == "HTTP/1.1 400 " and headers["server"] == "Firecracker API"
        assert body == (b'{ "error": "Invalid HTTP Method: Unsupported HTTP method.\n'
                        b'All previous unanswered requests will be dropped." }')
        err = error_for("vm.boot", 400, body)
        assert isinstance(err, InvalidRequest) and err.messages[0] == "Invalid HTTP Method: Unsupported HTTP method."
        s.sendall(_get("vmm.ping"))
        [(status, _, body)] = _answers(s, 1)
        assert status == "HTTP/1.1 200 " and json.loads(body)["version"]


@pytest.mark.parametrize(("endpoint", "expected"), [
    ("vm.boot", b""), ("vm.add-disk", b""), ("vm.counters", b""),  # VmActionHandler: a bare 400
    ("vm.create", b'["Bad Request"]'), ("vm.info", b'["Bad Request"]'), ("vmm.ping", b'["Bad Request"]'),
])
def test_patch_is_known_to_micro_http_and_refused_by_the_endpoint(vmm: Vmm, endpoint: str, expected: bytes) -> None:
    raw = f"PATCH /api/v1/{endpoint} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()
    status, headers, body = _split(raw_request(vmm.api_socket, raw))
    assert status == "HTTP/1.1 400 " and headers["server"] == "Cloud Hypervisor API"
    assert int(headers["content-length"]) == len(body) and body == expected


def test_an_http_client_gets_the_answer_to_an_unsupported_method_at_once(vmm: Vmm) -> None:
    import http.client

    class UnixConnection(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(5)
            self.sock.connect(vmm.api_socket)

    conn = UnixConnection("localhost", timeout=5)
    try:
        conn.request("POST", "/api/v1/vm.boot")
        answer = conn.getresponse()
        assert answer.status == 400 and b"Unsupported HTTP method." in answer.read()
    finally:
        conn.close()


def test_malformed_json_is_400_failed_to_deserialize(vmm: Vmm) -> None:
    status, _, body = _split(raw_request(vmm.api_socket, _put("vm.create", b"{not json")))
    assert status == "HTTP/1.1 400 "
    chain = json.loads(body)
    assert chain[0] == "Failed to deserialize JSON" and len(chain) == 2
    err = error_for("vm.create", 400, body)
    assert isinstance(err, InvalidRequest) and err.messages == chain


def test_oversized_body_gets_micro_https_error_object_and_spoils_the_connection(vmm: Vmm) -> None:
    body = b'{"x":"' + b"a" * 60000 + b'"}'
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(vmm.api_socket)
        s.sendall(_put("vm.create", body))
        (status, headers, payload), (next_status, _, garbage) = _answers(s, 2)
        assert status == "HTTP/1.1 400 " and headers["server"] == "Firecracker API"
        assert b"larger than the limit of 51200 allowed by server." in payload
        err = error_for("vm.create", 400, payload)
        assert isinstance(err, InvalidRequest)
        assert err.messages[0].startswith("Request payload with size 60008 is larger than the limit")
        assert err.messages[1] == "All previous unanswered requests will be dropped."
        # The body is not skipped but parsed as header lines: more 400s, never a request again
        # (so a client must drop the connection: ours opens one per call).
        assert next_status == "HTTP/1.1 400 " and garbage.startswith(b'{ "error": "Invalid header.')
    assert vmm.client.ping()  # a new connection is served


def test_the_eleventh_connection_gets_the_fixed_503(vmm: Vmm) -> None:
    held = []
    try:
        for _ in range(10):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(vmm.api_socket)
            held.append(s)
        # Make sure the server has accepted all ten before the eleventh arrives.
        held[-1].sendall(_get("vmm.ping"))
        held[-1].settimeout(5)
        assert read_response(held[-1]).startswith(b"HTTP/1.1 200")
        # The server writes the 503 and closes as soon as it accepts: read without sending.
        eleventh = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        eleventh.settimeout(5)
        eleventh.connect(vmm.api_socket)
        raw = read_response(eleventh)
        eleventh.close()
        assert raw.startswith(b"HTTP/1.1 503\r\nServer: Firecracker API\r\nConnection: close\r\n")
        assert raw.endswith(b'{ "error": "Too many open connections" }')
        # A client that sends first sees the 503 or a reset, depending on timing: unavailable.
        with pytest.raises(VmmUnavailable):
            vmm.client.ping()
    finally:
        for s in held:
            s.close()
    # Connections closed: served again, once the server has seen the closes (it may not yet).
    deadline = time.monotonic() + 10
    while True:
        try:
            assert vmm.client.ping()
            break
        except VmmUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def test_client_closes_its_connection_after_every_call(vmm: Vmm) -> None:
    # More calls than CH's 10-connection limit: each must have closed its connection.
    for _ in range(25):
        vmm.client.ping()


def test_one_request_at_a_time_across_clients(vmm: Vmm) -> None:
    import threading

    errors: list[BaseException] = []

    def hammer() -> None:
        try:
            c = CloudHypervisorClient(vmm.api_socket)
            for _ in range(20):
                c.ping()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=hammer) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []


def test_chunked_bodies_are_not_read_so_the_client_always_sends_content_length(start: Callable[..., Vmm]) -> None:
    vmm = start(FAKE)
    body = b'{"payload":{"firmware":"/x"}}'
    req = (
        b"PUT /api/v1/vm.create HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
        + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    )  # fmt: skip
    status, _, _payload = _split(raw_request(vmm.api_socket, req))
    assert status == "HTTP/1.1 400 "  # seen as a create without a body
    with pytest.raises(VmNotCreated):
        vmm.client.info()  # nothing was created
    vmm.client.create(vmm.config())  # the client's own request carries Content-Length
    assert vmm.client.info().state == "Created"


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("46.0.0", b"Error from API: The VM info is not available: VM is not created"),
        ("52.0.0", b'["Error from API","The VM info is not available","VM is not created"]'),
        ("53.0.0", b'["Error from API","The VM info is not available","VM is not created"]'),
    ],
)
def test_error_body_format_follows_the_vmm_version(start: Callable[..., Vmm], version: str, expected: bytes) -> None:
    vmm = start(FAKE, version=version)
    status, _, body = _split(raw_request(vmm.api_socket, _get("vm.info")))
    assert status == ("HTTP/1.1 404 " if version.startswith("53") else "HTTP/1.1 500 ")
    assert body == expected
