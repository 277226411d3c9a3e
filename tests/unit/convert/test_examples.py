"""Every KubeVirt example (each VMI, and the VMI template of each VM, replica set and pool) through
the whole translator, against a golden file: the VmConfig and preparation steps for the supported
ones, the exact field paths (and messages) for the refused ones. Golden VmConfigs must validate
against Cloud Hypervisor's OpenAPI spec.

The view is the admission webhook's (no pod): that is what users are told, and it is
deterministic. Regenerate after a deliberate change with `UPDATE_GOLDEN=1 pytest
tests/unit/convert/test_examples.py` and review the diff; network and device changes land here too.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import pathlib
from functools import cache
from typing import Any

import pytest
import yaml

from ch_launcher.convert import LauncherEnv, Verdict, check
from ch_launcher.convert.plan import HostTuning
from tests.conftest import KUBEVIRT_EXAMPLES, OPENAPI_SPEC, require_shared
from tests.unit.convert.examples_support import EXAMPLES

GOLDEN = pathlib.Path(__file__).parent / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(value).decode()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def record(verdict: Verdict) -> dict[str, Any]:
    """What the golden file holds for one translation."""
    out: dict[str, Any] = {
        "allowed": verdict.allowed,
        "problems": [{"field": p.field, "reason": p.reason, "message": p.message} for p in verdict.problems],
        "warnings": [{"field": w.field, "message": w.message} for w in verdict.warnings],
    }
    if verdict.plan is not None:
        out["config"] = verdict.plan.config.to_api()
        out["steps"] = [{"type": type(s).__name__, **{f.name: _plain(getattr(s, f.name))
                                                         for f in dataclasses.fields(s)}}
                        for s in verdict.plan.steps]
        out["serial_socket"] = verdict.plan.serial_socket
        out["disks"] = [dataclasses.asdict(d) for d in verdict.plan.disks]
        if verdict.plan.host != HostTuning():  # what the launcher does to the pod's processes
            out["host"] = json.loads(json.dumps(dataclasses.asdict(verdict.plan.host)))
    return out


def _closed(schema: Any) -> Any:
    """The schema with every object closed to the properties it lists. Cloud Hypervisor ignores
    unknown fields silently (cloud-hypervisor.md §5.4), so a misspelt field must fail here."""
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


@cache
def vmconfig_validator() -> Any:
    from openapi_schema_validator import OAS30Validator

    spec = yaml.safe_load(require_shared(OPENAPI_SPEC).read_text())
    components = _closed(spec["components"])
    schema = dict(components["schemas"]["VmConfig"])
    schema["components"] = components  # "#/components/schemas/..." resolves against this root
    return OAS30Validator(schema)


@pytest.mark.skipif(not EXAMPLES,
                    reason=f"{KUBEVIRT_EXAMPLES} is absent: ../shared/reference is not beside this checkout")
@pytest.mark.parametrize("name, vmi", EXAMPLES, ids=[n for n, _ in EXAMPLES])
def test_each_kubevirt_example_translates_to_its_golden_result(name: str, vmi: dict[str, Any]) -> None:
    got = record(check(vmi, LauncherEnv()))
    path = GOLDEN / f"{name}.json"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(got, indent=2, sort_keys=False) + "\n")
    assert path.exists(), f"no golden file {path}: run with UPDATE_GOLDEN=1 and review it"
    assert got == json.loads(path.read_text())


@pytest.mark.skipif(not EXAMPLES,
                    reason=f"{KUBEVIRT_EXAMPLES} is absent: ../shared/reference is not beside this checkout")
def test_every_golden_vmconfig_validates_against_the_openapi_spec() -> None:
    validator = vmconfig_validator()
    checked = 0
    for path in sorted(GOLDEN.glob("*.json")):
        config = json.loads(path.read_text()).get("config")
        if config is None:
            continue
        errors = sorted(validator.iter_errors(config), key=str)
        assert not errors, f"{path.name}: {errors[0].message} at {list(errors[0].absolute_path)}"
        checked += 1
    assert checked >= 10  # most examples run on Cloud Hypervisor


@pytest.mark.skipif(not EXAMPLES,
                    reason=f"{KUBEVIRT_EXAMPLES} is absent: ../shared/reference is not beside this checkout")
def test_no_golden_file_is_left_over_from_a_removed_example() -> None:
    names = {n for n, _ in EXAMPLES}
    stale = sorted(p.stem for p in GOLDEN.glob("*.json") if p.stem not in names)
    assert not stale, f"golden files without an example: {stale}"


def test_the_vmconfig_validator_catches_a_misspelt_or_mistyped_field() -> None:
    validator = vmconfig_validator()
    assert not list(validator.iter_errors({"payload": {"firmware": "/fw"}, "cpus": {"boot_vcpus": 1, "max_vcpus": 1}}))
    assert list(validator.iter_errors({"payload": {}, "cpus": {"boot_vcpus": "one", "max_vcpus": 1}}))
    assert list(validator.iter_errors({"payload": {}, "disks": [{"pathh": "/x"}]}))
