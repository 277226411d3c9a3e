"""AdmissionReview decoding and KubeVirt-shaped responses, without a server."""

from __future__ import annotations

import base64
import json

import pytest

from admission.review import Cause, ReviewError, allow, deny, deny_invalid, is_json_content_type, parse_review
from tests.unit.admission.builders import review, vmi


def test_a_request_is_decoded_with_its_uid_kind_and_namespace():
    body = review(vmi(), namespace="ns1", dry_run=True)
    req = parse_review(json.dumps(body).encode())
    assert req.uid == body["request"]["uid"]
    assert (req.kind, req.group, req.resource) == ("VirtualMachineInstance", "kubevirt.io", "virtualmachineinstances")
    assert (req.operation, req.namespace, req.dry_run) == ("CREATE", "ns1", True)
    assert req.object["metadata"]["name"] == "testvmi"


@pytest.mark.parametrize(("body", "expected"), [
    (b"{not json", "not valid JSON"),
    (b"\xff\xfe", "not valid JSON"),
    (b"[1, 2]", "must be a JSON object, got an array"),
    (b'"text"', "must be a JSON object, got a string"),
    (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "a"}}',
     "expected apiVersion 'admission.k8s.io/v1'"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "Pod", "request": {"uid": "a"}}', "kind 'Pod'"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "has no request object"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": 3}', "request must be an object"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 3}}', "request.uid"),
    (b"[" * 100000 + b"]" * 100000, "not valid JSON"),
])
def test_a_body_that_is_not_an_admission_review_is_a_400_naming_the_problem(body, expected):
    with pytest.raises(ReviewError) as e:
        parse_review(body)
    assert e.value.status == 400
    assert expected in e.value.message


def test_denial_copies_kubevirts_format():
    causes = [Cause("FieldValueNotSupported", "spec.a is not supported", "spec.a"),
              Cause("FieldValueRequired", "something is required")]
    response = deny_invalid("u1", causes)["response"]
    assert response["uid"] == "u1"
    assert response["allowed"] is False
    assert response["status"] == {  # exactly the fields KubeVirt's ToAdmissionResponse sets
        "code": 422, "reason": "Invalid", "message": "spec.a is not supported, something is required",
        "details": {"causes": [
            {"type": "FieldValueNotSupported", "message": "spec.a is not supported", "field": "spec.a"},
            {"type": "FieldValueRequired", "message": "something is required"}]}}


def test_more_than_ten_causes_are_capped_and_counted():
    causes = [Cause("FieldValueInvalid", f"m{i}", f"f{i}") for i in range(13)]
    status = deny_invalid("u", causes)["response"]["status"]
    assert len(status["details"]["causes"]) == 10
    assert status["message"] == ", ".join(f"m{i}" for i in range(10)) + ", and 3 more validation errors"


def test_exactly_ten_causes_have_no_tail():
    causes = [Cause("FieldValueInvalid", f"m{i}", f"f{i}") for i in range(10)]
    assert "more validation errors" not in deny_invalid("u", causes)["response"]["status"]["message"]


def test_a_patch_is_sent_base64_encoded_as_json_patch():
    ops = [{"op": "replace", "path": "/spec/containers/0/image", "value": "x"}]
    response = allow("u", patch=ops, audit={"a": "b"})["response"]
    assert response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == ops
    assert response["auditAnnotations"] == {"a": "b"}


def test_warnings_are_deduplicated_and_empty_ones_dropped():
    assert allow("u", ["a", "", "b", "a"])["response"]["warnings"] == ["a", "b"]
    assert "warnings" not in allow("u")["response"]


def test_a_decode_error_has_kubevirts_400_shape_without_causes():
    response = deny("u", "cannot decode")
    assert response["apiVersion"] == "admission.k8s.io/v1" and response["kind"] == "AdmissionReview"
    assert response["response"]["status"] == {"message": "cannot decode", "code": 400}


@pytest.mark.parametrize(("value", "ok"), [
    ("application/json", True), ("application/json; charset=utf-8", True), ("Application/JSON", True),
    ("text/plain", False), ("", False), (None, False), ("application/jsonx", False),
])
def test_only_json_content_types_are_accepted(value, ok):
    assert is_json_content_type(value) is ok
