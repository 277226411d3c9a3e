"""AdmissionReview v1: decoding requests and building responses, as pure functions.

Wire format: `ecosystem.md` §1. Denials copy KubeVirt's (`kubevirt pkg/util/webhooks/
webhooks.go@d923fdb815cd`, `ToAdmissionResponse`): `allowed: false`, `status.code` 422,
`status.reason: Invalid`, `status.details.causes[]` `{type, message, field}`, the message joining
the causes' messages with ", ", both capped at the first 10 causes with ", and N more validation
errors" appended. Objects that do not decode get KubeVirt's `ToAdmissionResponseError` shape
(`status {message, code: 400}`, no reason, no causes). Like KubeVirt's, the denials leave
`status.status` unset: the API server sets it to "Failure" when it turns a denial into the
client's error (k8s.io/apiserver admission/plugin/webhook/errors `ToStatusErr`).

`parse_review()` raises `ReviewError(http_status, message)` for a body that is not an
AdmissionReview at all (no uid to answer to); the server then answers that HTTP status with a
`metav1.Status` body. Nothing here raises anything else.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from admission.selection import object_at

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
MAX_CAUSES = 10  # KubeVirt reports the first 10 causes


class ReviewError(Exception):
    """The body is not an AdmissionReview v1 request; `status` is the HTTP status to answer."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Cause:
    """A `metav1.StatusCause`. `field` is `""` when the problem has no single field."""

    type: str
    message: str
    field: str = ""

    def to_json(self) -> dict[str, str]:
        out = {"type": self.type, "message": self.message}
        if self.field:
            out["field"] = self.field
        return out


@dataclass
class AdmissionRequest:
    """The parts of `request` the webhooks read; `raw` keeps the whole decoded request."""

    uid: str
    kind: str  # request.kind.kind, e.g. "VirtualMachineInstance"
    group: str
    resource: str
    sub_resource: str
    operation: str
    namespace: str
    name: str
    object: Any
    old_object: Any
    dry_run: bool
    raw: dict[str, Any] = field(repr=False, default_factory=dict)
    # Why the request cannot be judged although it is an AdmissionReview ("" when it can): both
    # webhooks refuse it first, in-band (KubeVirt's decode-error answer), whatever its kind.
    problem: str = ""


def is_json_content_type(content_type: str | None) -> bool:
    """`application/json`, optionally with parameters (`; charset=utf-8`)."""
    if not content_type:
        return False
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


def parse_review(body: bytes | str | Mapping[str, Any]) -> AdmissionRequest:
    """Decode an AdmissionReview v1 request. Raises ReviewError (400) with what is wrong."""
    if isinstance(body, Mapping):
        data: Any = body
    else:
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            raise ReviewError(400, f"the body is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ReviewError(400, f"an AdmissionReview must be a JSON object, got {_json_type(data)}")
    if data.get("apiVersion") != API_VERSION or data.get("kind") != KIND:
        raise ReviewError(400, f"expected apiVersion {API_VERSION!r} and kind {KIND!r}, got "
                               f"apiVersion {data.get('apiVersion')!r} and kind {data.get('kind')!r}")
    request = data.get("request")
    if not isinstance(request, dict):
        raise ReviewError(400, "the AdmissionReview has no request object" if request is None
                          else f"request must be an object, got {_json_type(request)}")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError(400, "request.uid is missing or not a string")
    kind = object_at(request, "kind")
    resource = object_at(request, "resource")
    return AdmissionRequest(problem=_problem(request),
        uid=uid,
        kind=_str(kind.get("kind")),
        group=_str(kind.get("group")) or _str(resource.get("group")),
        resource=_str(resource.get("resource")),
        sub_resource=_str(request.get("subResource")),
        operation=_str(request.get("operation")),
        namespace=_str(request.get("namespace")),
        name=_str(request.get("name")),
        object=request.get("object"),
        old_object=request.get("oldObject"),
        dry_run=request.get("dryRun") is True,
        raw=request,
    )


OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")


def _problem(request: dict[str, Any]) -> str:
    """What makes a request unjudgeable: an operation the API server never sends, an object or old
    object that is not a JSON object (an array, a string), no object on CREATE or UPDATE."""
    operation = request.get("operation")
    if operation not in OPERATIONS:
        return f"request.operation must be one of {', '.join(OPERATIONS)}, got {operation!r}"
    for key in ("object", "oldObject"):
        value = request.get(key)
        if value is not None and not isinstance(value, dict):
            return f"request.{key} must be a JSON object (the object under admission), got {_json_type(value)}"
    if operation in ("CREATE", "UPDATE") and request.get("object") is None:
        return f"request.object is missing on {operation}"
    return ""


def _str(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _json_type(v: Any) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number",
            type(None): "null"}.get(type(v), type(v).__name__)


# --- responses --------------------------------------------------------------------------------


def review(response: dict[str, Any]) -> dict[str, Any]:
    """Wrap a `response` into the AdmissionReview the API server expects back."""
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}


def allow(uid: str, warnings: Iterable[str] = (), patch: Sequence[Mapping[str, Any]] | None = None,
          audit: Mapping[str, str] | None = None) -> dict[str, Any]:
    """An allowing AdmissionReview; `patch` (a JSON Patch document) is base64-encoded as required."""
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    warnings = _unique(warnings)
    if warnings:
        response["warnings"] = warnings
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(list(patch), separators=(",", ":")).encode()).decode()
    if audit:
        response["auditAnnotations"] = dict(audit)
    return review(response)


def deny_invalid(uid: str, causes: Sequence[Cause], warnings: Iterable[str] = ()) -> dict[str, Any]:
    """KubeVirt's 422 denial: all causes' messages (first 10) joined, the causes in details."""
    if not causes:
        raise ValueError("deny_invalid needs at least one cause")
    shown = list(causes[:MAX_CAUSES])
    message = ", ".join(c.message for c in shown)
    if len(causes) > MAX_CAUSES:
        message += f", and {len(causes) - MAX_CAUSES} more validation errors"
    response: dict[str, Any] = {
        "uid": uid,
        "allowed": False,
        "status": {
            "message": message,
            "reason": "Invalid",
            "code": 422,
            "details": {"causes": [c.to_json() for c in shown]},
        },
    }
    warnings = _unique(warnings)
    if warnings:
        response["warnings"] = warnings
    return review(response)


def deny(uid: str, message: str, code: int = 400, reason: str = "") -> dict[str, Any]:
    """A denial without causes: KubeVirt's ToAdmissionResponseError shape (code 400 by default)."""
    status: dict[str, Any] = {"message": message, "code": code}
    if reason:
        status["reason"] = reason
    return review({"uid": uid, "allowed": False, "status": status})


def http_error_status(code: int, message: str) -> dict[str, Any]:
    """The `metav1.Status` body sent with a non-200 HTTP answer (body not an AdmissionReview)."""
    reasons = {400: "BadRequest", 404: "NotFound", 405: "MethodNotAllowed", 413: "RequestEntityTooLarge",
               415: "UnsupportedMediaType", 500: "InternalError"}
    return {"apiVersion": "v1", "kind": "Status", "status": "Failure", "message": message,
            "reason": reasons.get(code, ""), "code": code}


def _unique(items: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for item in items:
        if item:
            seen.setdefault(item, None)
    return list(seen)
