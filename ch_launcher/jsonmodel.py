"""Typed records decoded from JSON: the shape of the VMI the launcher reads (`kubevirt.vmi`) and of
the VmConfig it writes and the VMM's answers (`ch.vmconfig`).

A model is a subclass of `Record`: a keyword-only dataclass whose annotations are the JSON shape.
`decode(Model, value)` checks a decoded JSON value against it and builds the objects, or raises
`DecodeError` listing every problem, each with its location (`("spec", "domain", "cpu", "cores")`)
and what was wrong, in the order of the model's fields (unknown ones last, as written: the order
pydantic reported them in); `encode(record)` is the JSON object back, without the fields that are None.
Constructing a record in code checks nothing at run time: mypy does (and a misspelt keyword is a
TypeError).

What the annotations may say: `str`, `int` (a JSON integer, not a boolean), `float` (any
number), `bool`, `Any`, `X | None`, `list[X]`, `dict[str, X]`, `Literal[...]`, another Record,
and `Annotated[X, Check(function)]` for a value only `function` judges (it returns the value or
raises ValueError with the message). Strict, as Go's encoding/json is: "1" is not an integer.

Per model (class variables): `json_extra` "ignore" (unknown fields are dropped, as for an API
that grows) or "forbid"; `json_lenient`: an optional field whose value cannot be read is left at
its default rather than failing the whole (answers of VMMs that spell an option differently).
JSON `null` is "absent" everywhere, as Go decodes it: the field keeps its default.

Why not pydantic, which did this before: its schema machinery and the validators it builds for
every model were about a fifth of a launcher's memory, 8 MiB of which every VM's pod paid
(bench/footprint.py, docs/operations.md "Where the launcher's memory goes"). Standard library only.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal, TypeVar, dataclass_transform

R = TypeVar("R", bound="Record")
Loc = tuple[str | int, ...]
_INVALID = object()  # what a decoder returns after it recorded a problem


@dataclasses.dataclass(frozen=True)
class Check:
    """`Annotated[X, Check(function)]`: `function(value)` returns the value to keep, or raises
    ValueError with the message to report."""

    function: Callable[[Any], Any]


class DecodeError(ValueError):
    """A value that does not fit the model; `problems` holds (location, message) pairs."""

    def __init__(self, problems: list[tuple[Loc, str]]) -> None:
        super().__init__("; ".join(f"{'.'.join(map(str, loc)) or 'the value'}: {message}" for loc, message in problems))
        self.problems = problems


@dataclass_transform(kw_only_default=True, field_specifiers=(dataclasses.field,))
class Record:
    """The base of the models (the module docstring): every subclass is made a keyword-only dataclass."""

    json_extra: ClassVar[Literal["ignore", "forbid"]] = "ignore"
    json_lenient: ClassVar[bool] = False
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]  # what the dataclass adds (for typing)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dataclasses.dataclass(kw_only=True)(cls)


def decode(model: type[R], value: Any) -> R:
    """`value` (decoded JSON) as a `model`; DecodeError with every problem found."""
    problems: list[tuple[Loc, str]] = []
    result = _record_decoder(model)(value, (), problems)
    if problems:
        raise DecodeError(problems)
    return typing.cast("R", result)


def encode(record: Record) -> dict[str, Any]:
    """The JSON object of `record`: its fields that are not None, records within it encoded too."""
    return {f.name: _plain(v) for f in dataclasses.fields(record) if (v := getattr(record, f.name)) is not None}


def _plain(value: Any) -> Any:
    if isinstance(value, Record):
        return encode(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


# --- decoders ------------------------------------------------------------------------------------

Decoder = Callable[[Any, Loc, list[tuple[Loc, str]]], Any]
_RECORD_DECODERS: dict[type[Record], Decoder] = {}


class _Fields:
    """A model's fields, resolved on the first decode (its annotations may name models defined later)."""

    def __init__(self, model: type[Record]) -> None:
        hints = typing.get_type_hints(model, include_extras=True)
        fields = dataclasses.fields(model)
        self.decoders = {f.name: _decoder(hints[f.name]) for f in fields}
        self.exact = {f.name: t for f in fields if (t := _EXACT.get(hints[f.name])) is not None}
        self.required = [f.name for f in fields
                         if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        self.order: dict[str | int, int] = {f.name: n for n, f in enumerate(fields)}  # unknown ones after all


def _record_decoder(model: type[Record]) -> Decoder:
    found = _RECORD_DECODERS.get(model)
    if found is not None:
        return found
    resolved: list[_Fields] = []
    lenient, forbid = model.json_lenient, model.json_extra == "forbid"

    def decode_record(value: Any, loc: Loc, problems: list[tuple[Loc, str]]) -> Any:
        if type(value) is not dict:
            if isinstance(value, model):
                return value
            problems.append((loc, f"Input should be a valid dictionary or instance of {model.__name__}"))
            return _INVALID
        if not resolved:
            resolved.append(_Fields(model))
        fields = resolved[0]
        start = len(problems)
        kwargs: dict[str, Any] = {}
        for name, raw in value.items():  # what the value has, usually few of the model's fields
            if raw is None:
                continue
            if fields.exact.get(name) is type(raw):  # a plain str, bool or int field: nothing to convert
                kwargs[name] = raw
                continue
            decoder = fields.decoders.get(name)
            if decoder is None:
                if forbid:
                    problems.append(((*loc, name), "Extra inputs are not permitted"))
                continue
            mark = len(problems)
            decoded = decoder(raw, (*loc, name), problems)
            if decoded is not _INVALID:
                kwargs[name] = decoded
            elif lenient and name not in fields.required:
                del problems[mark:]  # unreadable: the default
        problems.extend(((*loc, name), "Field required") for name in fields.required
                        if name not in kwargs and value.get(name) is None)
        if len(problems) == start:
            return model(**kwargs)
        if len(problems) - start > 1:  # in the fields' order, whatever the JSON's (a stable sort)
            depth, last = len(loc), len(fields.order)
            problems[start:] = sorted(problems[start:], key=lambda p: fields.order.get(p[0][depth], last))
        return _INVALID

    _RECORD_DECODERS[model] = decode_record
    return decode_record


def _decoder(annotation: Any) -> Decoder:
    """The decoder of one annotation (module docstring)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        check = next(a for a in args[1:] if isinstance(a, Check))
        return _checked(check.function)
    if annotation is Any:
        return lambda value, loc, problems: value
    if isinstance(annotation, type) and issubclass(annotation, Record):
        return _record_decoder(annotation)
    if annotation in _SCALARS:
        return _scalar(*_SCALARS[annotation])
    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        if len(members) == 1:
            return _decoder(members[0])  # null never reaches a decoder: it is "absent"
        what = " or ".join(_SCALARS.get(m, (bool, f"a valid {m.__name__}"))[1] for m in members)
        return _first_of([_decoder(m) for m in members], what)
    if origin is list:
        return _list(_decoder(args[0]))
    if origin is dict:
        return _dict(_decoder(args[1]))
    if origin is Literal:
        return _literal(args)
    raise TypeError(f"jsonmodel cannot decode {annotation!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_EXACT: dict[Any, type] = {str: str, bool: bool, int: int}  # fields whose JSON value is taken as is, by its type
_SCALARS: dict[Any, tuple[Callable[[Any], bool], str]] = {
    str: (lambda v: isinstance(v, str), "a valid string"),
    bool: (lambda v: isinstance(v, bool), "a valid boolean"),
    int: (_is_int, "a valid integer"),
    float: (lambda v: _is_int(v) or isinstance(v, float), "a valid number"),
}


def _scalar(test: Callable[[Any], bool], what: str) -> Decoder:
    def decode_scalar(value: Any, loc: Loc, problems: list[tuple[Loc, str]]) -> Any:
        if test(value):
            return value
        problems.append((loc, f"Input should be {what}"))
        return _INVALID
    return decode_scalar


def _first_of(decoders: list[Decoder], what: str) -> Decoder:
    def decode_union(value: Any, loc: Loc, problems: list[tuple[Loc, str]]) -> Any:
        for decoder in decoders:
            scratch: list[tuple[Loc, str]] = []
            decoded = decoder(value, loc, scratch)
            if not scratch:
                return decoded
        problems.append((loc, f"Input should be {what}"))
        return _INVALID
    return decode_union


def _checked(function: Callable[[Any], Any]) -> Decoder:
    def decode_checked(value: Any, loc: Loc, problems: list[tuple[Loc, str]]) -> Any:
        try:
            return function(value)
        except ValueError as e:
            problems.append((loc, str(e)))
            return _INVALID
    return decode_checked


def _list(item: Decoder) -> Decoder:
    def decode_list(value: Any, loc: Loc, problems: list[tuple[Loc, str]]) -> Any:
        if not isinstance(value, list):
            problems.append((loc, "Input should be a valid list"))
            return _INVALID
        start = len(problems)
        out = [item(v, (*loc, i), problems) for i, v in enumerate(value)]
        return out if len(problems) == start else _INVALID
    return decode_list


def _dict(item: Decoder) -> Decoder:
    def decode_dict(value: Any, loc: Loc, problems: list[tuple[Loc, str]]) -> Any:
        if not isinstance(value, dict):
            problems.append((loc, "Input should be a valid dictionary"))
            return _INVALID
        start = len(problems)
        out: dict[str, Any] = {}
        for key, v in value.items():
            if not isinstance(key, str):
                problems.append(((*loc, key), "Input should be a valid string"))
            else:
                out[key] = item(v, (*loc, key), problems)
        return out if len(problems) == start else _INVALID
    return decode_dict


def _literal(choices: tuple[Any, ...]) -> Decoder:
    what = ", ".join(repr(c) for c in choices[:-1]) + (" or " if len(choices) > 1 else "") + repr(choices[-1])

    def decode_literal(value: Any, loc: Loc, problems: list[tuple[Loc, str]]) -> Any:
        if isinstance(value, str) and value in choices:
            return value
        problems.append((loc, f"Input should be {what}"))
        return _INVALID
    return decode_literal
