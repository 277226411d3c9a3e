"""Verdicts that come from the translator's configurators (compute, storage): certain ones only."""

from __future__ import annotations

from admission.config import load_config
from admission.review import parse_review
from admission.rules import validate
from tests.unit.admission import builders as b
from tests.unit.admission.builders import CH

CONFIG = load_config()


def decide(body):
    outcome = validate(parse_review(body), CONFIG)
    return outcome.review["response"], outcome.verdict


def causes(response):
    return response["status"]["details"]["causes"]


def test_unsupported_cpu_features_are_refused_one_cause_each():
    response, _ = decide(b.review(b.cpu_features(b.vmi(annotations=CH), 2)))
    assert response["allowed"] is False
    fields = [c["field"] for c in causes(response)]
    assert "spec.domain.cpu.features[0]" in " ".join(fields)
    assert "spec.domain.cpu.features[1]" in " ".join(fields)


def test_a_cdrom_disk_is_refused_at_its_field():
    response, _ = decide(b.review(b.cdrom(b.vmi(annotations=CH))))
    assert response["allowed"] is False
    assert any(c["field"].startswith("spec.domain.devices.disks[1]") for c in causes(response))
