"""The errors of the Cloud Hypervisor REST client (`ch.api`), and how an error answer maps to them.

Errors are typed (`ChApiError` and five subclasses) and carry the VMM's error chain. The mapping
understands every body format seen across versions: plain text (<= v46), a JSON array of the
cause chain (v47+), micro_http's JSON object for HTTP-level parse errors, and the status codes of
v53.0 (404 for a missing VM) and of main after v53 (400, 404, 409). It maps on the message text as
well as the status, because the same condition has had different statuses across versions.
"""

from __future__ import annotations

import json
import re

# --- errors ---------------------------------------------------------------------------------


class ChApiError(Exception):
    """A call to the VMM failed.

    `endpoint` is CH's name for the call (`"vm.boot"`), `status` the HTTP status (None when no
    answer was received), `messages` the error chain from the outermost cause to the root, as the
    VMM reported it (v47+: the JSON array; <= v46: the single plain-text line).
    """

    def __init__(self, endpoint: str, status: int | None, messages: list[str], detail: str = "") -> None:
        self.endpoint = endpoint
        self.status = status
        self.messages = list(messages)
        self.detail = detail
        super().__init__(self._render())

    def _render(self) -> str:
        # "Error from API" heads every v47+ chain and says nothing; leave it out of log lines.
        chain = [m for m in self.messages if m != "Error from API"]
        head = f"{self.endpoint} failed"
        if self.status is not None:
            head += f" (HTTP {self.status})"
        text = ": ".join(chain) if chain else self.detail or "no error text"
        if chain and self.detail:
            text += f" ({self.detail})"
        return f"{head}: {text}"

    @property
    def root_cause(self) -> str:
        """The innermost message of the chain ("" if the VMM gave none)."""
        return self.messages[-1] if self.messages else ""

    def mentions(self, text: str) -> bool:
        """True if any message of the chain contains `text`."""
        return any(text in m for m in self.messages)


class VmNotCreated(ChApiError):
    """No VM config is stored (`vm.info`/`vm.boot`/`vm.reboot`/`vm.resize`/`vm.add-*` before `vm.create`).

    404 on v53+, 500 with "VM is not created" / "VM config is missing" before; both are mapped here.
    """


class InvalidRequest(ChApiError):
    """The VMM rejected the request itself (400): malformed JSON, a body where none is allowed,
    a wrong method, an unknown route (404 "Not Found": this VMM lacks the endpoint), and on main
    after v53 a config that fails validation. Retrying the same request cannot succeed.
    """


class Conflict(ChApiError):
    """The call does not fit the VM's current state; nothing changed.

    Covers "VM is already created", "VM is not running", invalid state transitions
    (`InvalidStateTransition(Paused, Paused)`), snapshot of a running VM, receive-migration with a
    VM present, an unknown device id ("No device with id ... to remove" on a created VM, "Failed
    to find device corresponding to the given identifier" on a booted one) and, on main after v53, any other 404 for an
    unknown device id, 409 (duplicate id or device path on main), and 429 "Too Many Requests" (a
    vCPU removal is still pending: retry later, `status == 429`).
    Use `already_in_state()` to tell "already where you wanted it" from a real refusal.
    """

    @property
    def transition(self) -> tuple[str, str] | None:
        """(from, to) of an `InvalidStateTransition(From, To)` in the chain, else None."""
        for m in self.messages:
            match = _TRANSITION.search(m)
            if match:
                return match.group(1), match.group(2)
        return None

    def already_in_state(self) -> bool:
        """True when the VM already is where the call wanted it, so a launcher may treat the
        call as done: pause of a paused VM, resume of a running one (`InvalidStateTransition(X,
        X)`); `vm.shutdown`/`vm.power-button` when no VM runs; `vm.create` when a config is
        stored (possibly another one: compare with `vm.info` if that matters). False for every
        other refusal, e.g. `vm.boot` of a paused VM or `vm.pause` of a created one."""
        tr = self.transition
        if tr is not None:
            return tr[0] == tr[1]
        if self.endpoint in ("vm.shutdown", "vm.power-button"):
            return self.mentions("VM is not running")
        return self.endpoint == "vm.create" and self.mentions("VM is already created")


class InternalError(ChApiError):
    """The VMM failed to carry out a valid request (5xx): boot errors, device errors, I/O errors."""


class VmmUnavailable(ChApiError):
    """No answer from the VMM: socket missing, connection refused or reset, or timeout; or an
    answer saying that the VMM is exiting.

    `status` is None (or 503 for micro_http's "Too many open connections"; 500 when the API
    thread answers but the VMM thread behind it has stopped: "API request send error" /
    "API response receive error", seen on v53.0 between a guest poweroff and the process exit).
    The message says which of these happened; a timeout names the endpoint and the seconds
    waited.
    """

    @property
    def timed_out(self) -> bool:
        """The VMM did not answer in time: it may still carry out the request."""
        return self.status is None and ("no answer from the VMM within" in self.detail
                                        or "still in progress after" in self.detail)

    @property
    def exiting(self) -> bool:
        """The VMM is gone or on its way out (not merely slow or busy)."""
        return not self.timed_out and self.status != 503


_TRANSITION = re.compile(r"InvalidStateTransition\((\w+), (\w+)\)")

_NOT_CREATED = ("VM is not created", "VM config is missing")
# The API thread still answers but the VMM thread has stopped (the process is exiting): v53.0's
# ApiError::RequestSend / ResponseRecv, with the channel's own "sending/receiving on a closed channel".
_EXITING_TEXTS = ("API request send error", "API response receive error")
_CONFLICT_TEXTS = (
    "VM is already created",
    "VM is not running",
    "InvalidStateTransition",
    "Trying to snapshot while VM is running",
    "when a VM is already created",
    "currently migrating",
    "No device with id",  # 'No device with id "x" to remove' (500 on v53.0, 404 on main)
    # the same for a booted VM (DeviceManagerError::UnknownDeviceId, vmm/src/device_manager.rs@v53.0)
    "Failed to find device corresponding to the given identifier",
)


def parse_error_body(body: bytes) -> list[str]:
    """The error chain in a response body of any CH version; `[]` for an empty body."""
    text = body.decode("utf-8", errors="replace").strip()
    if not text:
        return []
    try:
        data = json.loads(text, strict=False)  # micro_http puts a raw newline inside its string
    except ValueError:
        return [text]  # <= v46: plain text, the whole chain joined with ": "
    if isinstance(data, list):
        return [m if isinstance(m, str) else json.dumps(m) for m in data]
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        # micro_http's own errors: {"error": "<what>\nAll previous unanswered requests ...}"
        return [line for line in data["error"].splitlines() if line.strip()]
    if isinstance(data, str):
        return [data]
    return [text]


def error_for(endpoint: str, status: int, body: bytes) -> ChApiError:
    """Maps an error response to the most specific `ChApiError` subclass (module docstring)."""
    messages = parse_error_body(body)
    joined = "\n".join(messages)

    if any(t in joined for t in _NOT_CREATED):
        cls: type[ChApiError] = VmNotCreated
    elif ((status == 503 and "Too many open connections" in joined)
          or (status == 500 and any(t in joined for t in _EXITING_TEXTS))):
        cls = VmmUnavailable
    elif status == 429 or status == 409 or any(t in joined for t in _CONFLICT_TEXTS):
        cls = Conflict
    elif status == 404:
        # "Not Found" alone: the route does not exist. A missing VM was caught above by its text
        # (every 404 for it, v53+, carries that text); any other 404 is main's unknown device id:
        # the VM is there, the device named is not.
        cls = InvalidRequest if messages in ([], ["Not Found"]) else Conflict
    elif 400 <= status < 500:
        cls = InvalidRequest
    else:
        cls = InternalError
    return cls(endpoint, status, messages)
