"""The REST client's error mapping (every body format and version) and its transport failures,
against small in-test unix-socket servers that misbehave in ways the real VMM can."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from ch_launcher.ch.api import (
    ChApiError,
    CloudHypervisorClient,
    Conflict,
    InternalError,
    InvalidRequest,
    VmmUnavailable,
    VmNotCreated,
    error_for,
    parse_error_body,
)
from ch_launcher.ch.vmconfig import DiskConfig, VmConfig

# --- bodies and mapping -----------------------------------------------------------------------


def test_json_array_body_is_the_error_chain() -> None:
    body = b'["Error from API","The VM could not shutdown","VM is not running"]'
    assert parse_error_body(body) == ["Error from API", "The VM could not shutdown", "VM is not running"]


def test_plain_text_body_of_old_versions_is_one_message() -> None:
    assert parse_error_body(b"Error from API: The VM info is not available: VM is not created") == [
        "Error from API: The VM info is not available: VM is not created"
    ]


def test_micro_http_error_object_with_a_raw_newline_is_understood() -> None:
    body = b'{ "error": "Invalid HTTP Method: FOO\nAll previous unanswered requests will be dropped." }'
    assert parse_error_body(body) == ["Invalid HTTP Method: FOO", "All previous unanswered requests will be dropped."]


def test_empty_body_has_no_messages() -> None:
    assert parse_error_body(b"") == []


@pytest.mark.parametrize(
    ("status", "body", "cls"),
    [
        (404, b'["Error from API","The VM info is not available","VM is not created"]', VmNotCreated),
        (500, b'["Error from API","The VM info is not available","VM is not created"]', VmNotCreated),
        (500, b"Error from API: The VM info is not available: VM is not created", VmNotCreated),
        (404, b'["Error from API","The VM could not boot","VM config is missing"]', VmNotCreated),
        (500, b'["Error from API","The VM could not boot","VM config is missing"]', VmNotCreated),
        (500, b'["Error from API","The VM could not be created","VM is already created"]', Conflict),
        (500, b'["Error from API","The VM could not be paused","VM is not running"]', Conflict),
        (500, b"Error from API: The VM could not be paused: VM is not running", Conflict),
        (409, b'["Error from API","The VM could not boot","Failed to validate config","Identifier x is not unique"]',
         Conflict),
        (429, b'["Too Many Requests"]', Conflict),
        (500, b'["Error from API","The device could not be removed from the VM","No device with id \\"x\\" to remove"]',
         Conflict),
        (404, b'["Error from API","The device could not be removed from the VM","No device with id \\"x\\" to remove"]',
         Conflict),
        # main after v53: an unknown device id is 404 too, and says nothing of a missing VM
        (404, b'["Error from API","The disk could not be resized","Error from device manager","x"]', Conflict),
        (500, b'["Error from API","The VM could not boot","Failed to remove a temporary file"]', InternalError),
        (400, b'["Failed to deserialize JSON","expected value at line 1 column 1"]', InvalidRequest),
        (400, b'["Bad Request"]', InvalidRequest),
        (400, b"", InvalidRequest),
        (404, b'["Not Found"]', InvalidRequest),
        (400, b'["Error from API","The VM could not boot","Failed to validate config","Max CPUs (1) lower"]',
         InvalidRequest),
        (500, b'["Error from API","The VM could not boot","Failed to validate config","Max CPUs (1) lower"]',
         InternalError),
        (503, b'{ "error": "Too many open connections" }', VmmUnavailable),
        (502, b"", InternalError),
    ],
)  # fmt: skip
def test_errors_map_to_one_class_whatever_the_version(status: int, body: bytes, cls: type) -> None:
    err = error_for("vm.x", status, body)
    assert type(err) is cls
    assert err.status == status and err.endpoint == "vm.x"


def test_error_message_reads_well_in_a_log() -> None:
    err = error_for("vm.resume", 500, b'["Error from API","The VM could not resume","Cannot resume VM"]')
    assert str(err) == "vm.resume failed (HTTP 500): The VM could not resume: Cannot resume VM"
    assert err.root_cause == "Cannot resume VM"
    assert err.mentions("resume VM") and not err.mentions("pause")


@pytest.mark.parametrize(
    ("endpoint", "body", "already"),
    [
        ("vm.pause", b'["Error from API","x","Invalid transition: InvalidStateTransition(Paused, Paused)"]', True),
        ("vm.resume", b'["Error from API","x","Invalid transition: InvalidStateTransition(Running, Running)"]', True),
        ("vm.pause", b'["Error from API","x","Invalid transition: InvalidStateTransition(Created, Paused)"]', False),
        ("vm.shutdown", b'["Error from API","The VM could not shutdown","VM is not running"]', True),
        ("vm.pause", b'["Error from API","The VM could not be paused","VM is not running"]', False),
        ("vm.create", b'["Error from API","The VM could not be created","VM is already created"]', True),
        ("vm.boot", b'["Error from API","The VM could not boot","VM is already created"]', False),
    ],
)
def test_conflict_tells_already_in_that_state_from_a_refusal(endpoint: str, body: bytes, already: bool) -> None:
    err = error_for(endpoint, 500, body)
    assert isinstance(err, Conflict)
    assert err.already_in_state() is already


def test_transition_is_parsed_from_the_chain() -> None:
    err = error_for("vm.pause", 500, b'["a","Invalid transition: InvalidStateTransition(Created, Paused)"]')
    assert isinstance(err, Conflict) and err.transition == ("Created", "Paused")


# --- transport --------------------------------------------------------------------------------


@pytest.fixture
def sockdir() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="kc", dir="/tmp")
    yield d
    for name in os.listdir(d):
        os.unlink(os.path.join(d, name))
    os.rmdir(d)


class OneShotServer:
    """Accepts connections and answers each with `respond(request_bytes) -> bytes | None`
    (None: close without answering; "hang": never answer; ("hold", bytes): answer and keep the
    connection open, as a keep-alive server does)."""

    def __init__(self, path: str, respond: Callable[[bytes], bytes | str | None]) -> None:
        self.path = path
        self.respond = respond
        self.requests: list[bytes] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.stop = threading.Event()
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(2)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    data += conn.recv(4096)
                head, _, rest = data.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                while len(rest) < length:
                    rest += conn.recv(4096)
            except OSError:
                conn.close()
                continue
            request = head + b"\r\n\r\n" + rest  # the body may arrive after the headers
            self.requests.append(request)
            answer = self.respond(request)
            if answer == "hang":
                self.held.append(conn)
                continue
            if isinstance(answer, tuple):
                conn.sendall(answer[1])
                self.held.append(conn)
                continue
            if answer is not None:
                conn.sendall(answer)  # type: ignore[arg-type]
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()
        for c in self.held:
            c.close()
        self.thread.join(2)


@pytest.fixture
def serve(sockdir: str) -> Iterator[Callable[[Callable[[bytes], bytes | str | None]], str]]:
    servers: list[OneShotServer] = []

    def _serve(respond: Callable[[bytes], bytes | str | None]) -> str:
        server = OneShotServer(os.path.join(sockdir, f"s{len(servers)}.sock"), respond)
        servers.append(server)
        return server.path

    yield _serve
    for s in servers:
        s.close()


NO_CONTENT = b"HTTP/1.1 204 \r\nServer: Cloud Hypervisor API\r\nConnection: keep-alive\r\n\r\n"


def test_missing_socket_says_so(sockdir: str) -> None:
    with pytest.raises(VmmUnavailable, match=r"vm.info failed: API socket .*/none.sock does not exist"):
        CloudHypervisorClient(os.path.join(sockdir, "none.sock")).info()


def test_socket_without_listener_is_connection_refused(sockdir: str) -> None:
    path = os.path.join(sockdir, "dead.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.close()
    with pytest.raises(VmmUnavailable, match="connection refused"):
        CloudHypervisorClient(path).ping()


def test_connection_closed_before_an_answer_is_unavailable(serve: Callable[..., str]) -> None:
    path = serve(lambda req: None)
    with pytest.raises(VmmUnavailable, match="reset or closed before an answer") as info:
        CloudHypervisorClient(path).pause()
    assert info.value.status is None


def test_a_hung_answer_times_out_with_the_endpoint_and_seconds(serve: Callable[..., str]) -> None:
    path = serve(lambda req: "hang")
    t0 = time.monotonic()
    with pytest.raises(VmmUnavailable) as info:
        CloudHypervisorClient(path, timeout=0.3).boot()
    assert str(info.value) == "vm.boot failed: no answer from the VMM within 0.3 s"
    assert time.monotonic() - t0 < 3


def test_a_second_caller_waiting_behind_a_hung_call_gives_up_after_its_timeout(serve: Callable[..., str]) -> None:
    received, release = threading.Event(), threading.Event()

    def respond(req: bytes) -> None:
        received.set()  # the first call now holds the per-socket lock
        release.wait(30)
        return  # then close without answering

    path = serve(respond)
    first = CloudHypervisorClient(path, timeout=30.0)
    def first_call() -> None:
        with pytest.raises(VmmUnavailable):
            first.info()

    t = threading.Thread(target=first_call, daemon=True)
    t.start()
    assert received.wait(30)
    try:
        with pytest.raises(VmmUnavailable, match=r"still in progress after 0\.2 s"):
            CloudHypervisorClient(path).ping(timeout=0.2)  # another client of the same socket
    finally:
        release.set()
    t.join(30)
    assert not t.is_alive()


def test_bodyless_puts_send_content_length_zero_and_bodies_send_their_length(serve: Callable[..., str]) -> None:
    seen: list[bytes] = []

    def respond(req: bytes) -> bytes:
        seen.append(req)
        return NO_CONTENT

    path = serve(respond)
    client = CloudHypervisorClient(path)
    client.boot()
    client.create(VmConfig(payload={"firmware": "/fw"}))
    boot_req, create_req = seen[0], seen[1]
    assert boot_req.startswith(b"PUT /api/v1/vm.boot HTTP/1.1\r\n")
    assert b"Content-Length: 0\r\n" in boot_req
    assert b"Transfer-Encoding" not in create_req
    assert create_req.startswith(b"PUT /api/v1/vm.create HTTP/1.1\r\n")
    assert b"Content-Length: " in create_req


def test_models_are_sent_as_compact_json_without_nulls(serve: Callable[..., str]) -> None:
    seen: list[bytes] = []

    def respond(req: bytes) -> bytes:
        seen.append(req)
        return NO_CONTENT

    path = serve(respond)
    CloudHypervisorClient(path).add_disk(DiskConfig(path="/d.img", readonly=True))
    body = seen[0].partition(b"\r\n\r\n")[2]
    assert body == b'{"path":"/d.img","readonly":true}'
    assert b"Content-Type: application/json" in seen[0]


def test_arguments_left_out_are_absent_from_the_body_so_the_vmm_default_applies(serve: Callable[..., str]) -> None:
    seen: list[bytes] = []

    def respond(req: bytes) -> bytes:
        seen.append(req.partition(b"\r\n\r\n")[2])
        return NO_CONTENT

    client = CloudHypervisorClient(serve(respond))
    client.resize(desired_ram=1 << 30)
    client.restore("file:///snap", resume=True)
    client.send_migration("unix:/m.sock", local=True)
    client.receive_migration("unix:/m.sock")
    assert seen == [
        b'{"desired_ram":1073741824}',
        b'{"source_url":"file:///snap","resume":true}',
        b'{"destination_url":"unix:/m.sock","local":true}',
        b'{"receiver_url":"unix:/m.sock"}',
    ]


def test_cold_add_returns_none_and_hot_add_returns_the_pci_device(serve: Callable[..., str]) -> None:
    body = b'{"id":"_disk2","bdf":"0000:00:06.0"}'
    answers = iter([
        NO_CONTENT,
        b"HTTP/1.1 200 \r\nServer: Cloud Hypervisor API\r\nConnection: keep-alive\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body),
    ])  # fmt: skip
    path = serve(lambda req: next(answers))
    client = CloudHypervisorClient(path)
    assert client.add_disk(DiskConfig(path="/d.img")) is None
    info = client.add_disk({"path": "/d.img"})
    assert info is not None and (info.id, info.bdf) == ("_disk2", "0000:00:06.0")


def test_an_unparseable_success_answer_is_an_internal_error(serve: Callable[..., str]) -> None:
    path = serve(lambda req: b"HTTP/1.1 200 \r\nContent-Length: 5\r\n\r\nhello")
    with pytest.raises(InternalError, match="unparseable answer"):
        CloudHypervisorClient(path).info()


def test_resize_without_a_target_is_refused_before_any_request(sockdir: str) -> None:
    with pytest.raises(ValueError, match="at least one of"):
        CloudHypervisorClient(os.path.join(sockdir, "x.sock")).resize()


def test_every_error_is_a_ch_api_error() -> None:
    for cls in (VmNotCreated, InvalidRequest, Conflict, InternalError, VmmUnavailable):
        assert issubclass(cls, ChApiError)


def test_a_hot_add_whose_answer_does_not_say_where_still_succeeds(serve: Callable[..., str],
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    # The device was added (200); only the PciDeviceInfo is missing or partial.
    answers = iter([b"{}", b'{"id":"_disk2"}', b"added"])
    path = serve(lambda req: (lambda body: b"HTTP/1.1 200 \r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))(
        next(answers)))
    client = CloudHypervisorClient(path)
    for _ in range(3):
        assert client.add_disk({"path": "/d.img"}) is None
    assert caplog.text.count("vm.add-disk: the device was added (HTTP 200), but the answer does not say where") == 3


def test_a_ping_without_a_version_field_names_the_build(serve: Callable[..., str]) -> None:
    body = b'{"build_version":"v53.0.0","pid":7}'
    path = serve(lambda req: b"HTTP/1.1 200 \r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    client = CloudHypervisorClient(path)
    assert client.ping().version == "v53.0.0"
    assert client.version == "v53.0.0"


def test_an_answer_without_content_length_on_a_kept_connection_is_read_without_waiting(
        serve: Callable[..., str]) -> None:
    # An HTTP/1.1 server that forgets Content-Length and keeps the connection open (micro_http
    # frames every answer; an independent VMM may not): the body has no end but its JSON's, and
    # an action's success needs no body at all. The client waited for its timeout and reported
    # no answer before.
    keep = b"HTTP/1.1 %d OK\r\nConnection: keep-alive\r\nContent-Type: application/json\r\n\r\n"
    answers = iter([
        ("hold", keep % 200 + b'{"version":"53.0.0","pid":9}'),
        ("hold", keep % 200),                                    # pause: a success, no body
        ("hold", keep % 200 + b'{"id":"_disk2","bdf":"0000:00:06.0"}'),
        ("hold", keep % 500 + b'["Error from API","The VM could not resume","VM is not running"]'),
        ("hold", keep % 500),                                    # an error without a body: its status stands
    ])
    path = serve(lambda req: next(answers))
    client = CloudHypervisorClient(path, timeout=10.0)  # waiting for it: VmmUnavailable "no answer"
    assert client.ping().version == "53.0.0"
    assert client.pause() is None
    info = client.add_disk({"path": "/d.img"})
    assert info is not None and info.bdf == "0000:00:06.0"
    with pytest.raises(Conflict, match="VM is not running"):
        client.resume()
    with pytest.raises(InternalError) as error:
        client.shutdown(timeout=0.5)
    assert error.value.status == 500 and error.value.messages == []


def test_an_answer_without_content_length_that_closes_is_read_to_the_close(serve: Callable[..., str]) -> None:
    body = b'{"state":"Running","config":{}}'
    path = serve(lambda req: b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body)
    assert CloudHypervisorClient(path).info().state == "Running"


def test_a_204_with_a_body_is_complete_after_its_headers(serve: Callable[..., str]) -> None:
    path = serve(lambda req: ("hold", b"HTTP/1.1 204 \r\nContent-Length: 7\r\n\r\ngarbage"))
    assert CloudHypervisorClient(path, timeout=10.0).pause() is None
