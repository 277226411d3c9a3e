"""ch_launcher/jsonmodel.py on its own: what a record accepts from JSON, what it reports and where,
and what it writes back. (The VMI model through it: test_vmi_model.py; the VmConfig: ch/test_vmconfig.py.)"""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated, Any, ClassVar, Literal

import pytest

from ch_launcher.jsonmodel import Check, DecodeError, Record, decode, encode


def _even(value: Any) -> int:
    if not isinstance(value, int) or value % 2:
        raise ValueError("must be an even number")
    return value


class Inner(Record):
    name: str
    tags: list[str] = dataclasses.field(default_factory=list)


class Outer(Record):
    count: int = 0
    ratio: float = 0.0
    on: bool = False
    kind: Literal["a", "b"] = "a"
    inner: Inner | None = None
    inners: list[Inner] = dataclasses.field(default_factory=list)
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    free: dict[str, Any] | None = None
    even: Annotated[int, Check(_even)] = 0
    either: int | str = 0


class Strict(Record):
    json_extra: ClassVar[Literal["ignore", "forbid"]] = "forbid"
    size: int


class Lenient(Record):
    json_lenient: ClassVar[bool] = True
    state: str
    size: int | None = None
    names: list[str] = dataclasses.field(default_factory=list)


def problems(model: type[Record], value: Any) -> list[tuple[tuple[str | int, ...], str]]:
    with pytest.raises(DecodeError) as e:
        decode(model, value)
    return e.value.problems


def test_a_value_that_fits_becomes_the_records_and_back() -> None:
    value = {"count": 3, "ratio": 1, "on": True, "kind": "b", "inner": {"name": "x", "tags": ["t"]},
             "inners": [{"name": "y"}], "labels": {"k": "v"}, "free": {"any": [1, None]}, "even": 4, "either": "s",
             "unknown": {"is": "dropped"}}
    outer = decode(Outer, value)
    assert outer == Outer(count=3, ratio=1, on=True, kind="b", inner=Inner(name="x", tags=["t"]),
                          inners=[Inner(name="y")], labels={"k": "v"}, free={"any": [1, None]}, even=4, either="s")
    assert encode(outer) == {k: v for k, v in value.items() if k != "unknown"} | {"inners": [{"name": "y", "tags": []}]}
    assert json.loads(json.dumps(encode(outer))) == encode(outer)


def test_null_is_absent_and_the_default_stays() -> None:
    assert decode(Outer, {"count": None, "inner": None, "labels": None}) == Outer()


def test_every_problem_is_reported_with_its_location_strictly_as_go_reads_json() -> None:
    found = problems(Outer, {"count": "1", "ratio": "x", "on": 1, "kind": "c", "inner": {"tags": [3]},
                             "inners": [{"name": "ok"}, 5], "labels": {"a": 1, 7: "x"}, "even": 3, "either": 1.5})
    assert found == [
        (("count",), "Input should be a valid integer"),
        (("ratio",), "Input should be a valid number"),
        (("on",), "Input should be a valid boolean"),
        (("kind",), "Input should be 'a' or 'b'"),
        (("inner", "name"), "Field required"),
        (("inner", "tags", 0), "Input should be a valid string"),
        (("inners", 1), "Input should be a valid dictionary or instance of Inner"),
        (("labels", "a"), "Input should be a valid string"),
        (("labels", 7), "Input should be a valid string"),
        (("even",), "must be an even number"),
        (("either",), "Input should be a valid integer or a valid string"),
    ]
    assert problems(Outer, [1]) == [((), "Input should be a valid dictionary or instance of Outer")]
    assert problems(Outer, {"count": True}) == [(("count",), "Input should be a valid integer")]  # no bool


class Ordered(Record):
    json_extra: ClassVar[Literal["ignore", "forbid"]] = "forbid"
    a: int = 0
    inner: Inner | None = None
    b: int
    c: int = 0


def test_problems_come_in_the_models_field_order_then_unknown_fields_as_written() -> None:
    """As pydantic listed them, whatever the order of the JSON object's keys: the admission
    webhook's message joins them, and must not change with a client's key order."""
    assert problems(Ordered, {"zz": 1, "c": "x", "inner": {"tags": [3]}, "a": "y", "yy": 2}) == [
        (("a",), "Input should be a valid integer"),
        (("inner", "name"), "Field required"),
        (("inner", "tags", 0), "Input should be a valid string"),
        (("b",), "Field required"),
        (("c",), "Input should be a valid integer"),
        (("zz",), "Extra inputs are not permitted"),
        (("yy",), "Extra inputs are not permitted"),
    ]


def test_forbid_refuses_unknown_fields_and_lenient_keeps_unreadable_optional_ones_at_their_default() -> None:
    assert problems(Strict, {"size": 1, "sise": 2}) == [(("sise",), "Extra inputs are not permitted")]
    assert decode(Lenient, {"state": "up", "size": "big", "names": [1]}) == Lenient(state="up")
    assert problems(Lenient, {"state": 5}) == [(("state",), "Input should be a valid string")]
    assert problems(Lenient, {"state": None}) == [(("state",), "Field required")]


def test_a_record_is_a_keyword_only_dataclass_whose_misspelt_keyword_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="sise"):
        Strict(sise=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Strict(1)  # type: ignore[call-arg]
    assert dataclasses.replace(Inner(name="a"), name="b") == Inner(name="b")
