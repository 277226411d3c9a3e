"""A small RFC 6902 JSON Patch applier for tests (add, remove, replace, move, copy, test).

Strict like the API server's: a missing parent, a `replace`/`remove` of an absent member or an
out-of-range index raises `PatchError`, so a patch that works here works there.
"""

from __future__ import annotations

import copy
from typing import Any


class PatchError(ValueError):
    pass


def _tokens(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"bad JSON pointer {path!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _parent(doc: Any, path: str) -> tuple[Any, str]:
    tokens = _tokens(path)
    if not tokens:
        raise PatchError("operations on the whole document are not supported")
    node = doc
    for t in tokens[:-1]:
        if isinstance(node, dict):
            if t not in node:
                raise PatchError(f"{path}: missing member {t!r}")
            node = node[t]
        elif isinstance(node, list):
            node = node[_index(node, t, path)]
        else:
            raise PatchError(f"{path}: cannot descend into {type(node).__name__}")
    return node, tokens[-1]


def _index(node: list[Any], token: str, path: str, allow_end: bool = False) -> int:
    if token == "-" and allow_end:
        return len(node)
    if not token.isdigit():
        raise PatchError(f"{path}: {token!r} is not an array index")
    i = int(token)
    if i > len(node) or (i == len(node) and not allow_end):
        raise PatchError(f"{path}: index {i} out of range")
    return i


def _get(doc: Any, path: str) -> Any:
    parent, last = _parent(doc, path)
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"{path}: no such member")
        return parent[last]
    return parent[_index(parent, last, path)]


def _add(doc: Any, path: str, value: Any) -> None:
    parent, last = _parent(doc, path)
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, path, allow_end=True), value)
    else:
        raise PatchError(f"{path}: parent is not a container")


def _remove(doc: Any, path: str) -> Any:
    parent, last = _parent(doc, path)
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"{path}: no such member")
        return parent.pop(last)
    return parent.pop(_index(parent, last, path))


def apply_patch(doc: Any, patch: list[dict[str, Any]]) -> Any:
    """Return a patched deep copy of `doc`; the input is never modified."""
    out = copy.deepcopy(doc)
    for op in patch:
        kind, path = op.get("op"), op.get("path")
        if not isinstance(path, str):
            raise PatchError(f"operation without a path: {op}")
        if kind == "add":
            _add(out, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            _remove(out, path)
        elif kind == "replace":
            _get(out, path)  # must exist
            _remove(out, path)
            _add(out, path, copy.deepcopy(op["value"]))
        elif kind == "move":
            _add(out, path, _remove(out, op["from"]))
        elif kind == "copy":
            _add(out, path, copy.deepcopy(_get(out, op["from"])))
        elif kind == "test":
            if _get(out, path) != op["value"]:
                raise PatchError(f"test failed at {path}")
        else:
            raise PatchError(f"unknown operation {kind!r}")
    return out
