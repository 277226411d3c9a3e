"""A YAML subset reader, enough for CH's OpenAPI spec when PyYAML is not importable.

Part of `fake_cloud_hypervisor.py` (stdlib only, so the simulated VMM runs under any python3).
`tests/unit/ch/test_vmconfig.py` checks it reads the spec exactly as PyYAML does.
"""

from __future__ import annotations

import json
import re
from typing import Any

_KEY = re.compile(r"""^("[^"]*"|'[^']*'|[^:'"][^:]*?)\s*:(?:\s+(.*))?$""")


def parse_yaml(text: str) -> Any:
    """Block mappings and sequences, flow sequences, quoted and plain scalars, `|`/`>` blocks."""
    lines: list[tuple[int, str]] = []
    raw = text.splitlines()
    i = 0
    while i < len(raw):
        line = raw[i]
        stripped = line.strip()
        i += 1
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(line.lstrip(" "))
        content = _strip_comment(stripped)
        match = re.match(r"^(.*?):\s+([|>])[-+]?$", content)
        if match:  # block scalar: gather the more-indented lines that follow
            body: list[str] = []
            while i < len(raw) and (not raw[i].strip() or len(raw[i]) - len(raw[i].lstrip(" ")) > indent):
                body.append(raw[i].strip())
                i += 1
            sep = "\n" if match.group(2) == "|" else " "
            content = f"{match.group(1)}: {json.dumps(sep.join(body).strip())}"
        elif content.endswith(":") and i < len(raw) and _plain_continuation(raw[i], indent):
            # "key:" followed by a multi-line plain scalar (more-indented text, not a key)
            body = []
            while i < len(raw) and raw[i].strip() and len(raw[i]) - len(raw[i].lstrip(" ")) > indent:
                body.append(raw[i].strip())
                i += 1
            content = f"{content} {json.dumps(' '.join(body))}"
        lines.append((indent, content))
    value, _ = _block(lines, 0, lines[0][0] if lines else 0)
    return value


def _plain_continuation(line: str, indent: int) -> bool:
    text = line.strip()
    deeper = len(line) - len(line.lstrip(" ")) > indent
    return bool(text) and deeper and not text.startswith(("- ", "#")) and not _KEY.match(text)


def _strip_comment(s: str) -> str:
    quote = None
    for i, ch in enumerate(s):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and i > 0 and s[i - 1] == " ":
            return s[:i].rstrip()
    return s


def _block(lines: list[tuple[int, str]], i: int, indent: int) -> tuple[Any, int]:
    if (i < len(lines) and lines[i][1].startswith("- ")) or (i < len(lines) and lines[i][1] == "-"):
        out_list: list[Any] = []
        while i < len(lines) and lines[i][0] == indent and (lines[i][1].startswith("- ") or lines[i][1] == "-"):
            rest = lines[i][1][2:].strip()
            if not rest:
                item, i = _block(lines, i + 1, lines[i + 1][0])
            elif _KEY.match(rest) and not rest.startswith(("'", '"', "[", "{")):
                lines[i] = (indent + 2, rest)  # "- key: v" starts a mapping at indent + 2
                item, i = _block(lines, i, indent + 2)
            else:
                item, i = _scalar(rest), i + 1
            out_list.append(item)
        return out_list, i
    out: dict[Any, Any] = {}
    while i < len(lines) and lines[i][0] == indent and not lines[i][1].startswith("- "):
        match = _KEY.match(lines[i][1])
        if not match:
            raise ValueError(f"unsupported YAML line: {lines[i][1]!r}")
        key = _scalar(match.group(1))
        rest = match.group(2)
        i += 1
        if rest:
            out[key] = _scalar(rest)
        elif i < len(lines) and (lines[i][0] > indent or (lines[i][0] == indent and lines[i][1].startswith("- "))):
            out[key], i = _block(lines, i, lines[i][0])
        else:
            out[key] = None
    return out, i


def _scalar(s: str) -> Any:
    s = s.strip()
    if s.startswith('"'):
        return json.loads(s)
    if s.startswith("'"):
        return s[1:-1].replace("''", "'")
    if s.startswith("["):
        inner = s[1:-1].strip()
        return [_scalar(p) for p in _split_flow(inner)] if inner else []
    if s.startswith("{") and s.endswith("}"):
        return {} if not s[1:-1].strip() else dict(_flow_pair(p) for p in _split_flow(s[1:-1]))
    if s in ("true", "True"):
        return True
    if s in ("false", "False"):
        return False
    if s in ("null", "~"):
        return None
    if re.fullmatch(r"-?\d+", s):
        return int(s)
    if re.fullmatch(r"-?\d+\.\d*(e-?\d+)?", s):
        return float(s)
    return s


def _flow_pair(p: str) -> tuple[Any, Any]:
    k, _, v = p.partition(":")
    return _scalar(k), _scalar(v)


def _split_flow(s: str) -> list[str]:
    parts, depth, quote, cur = [], 0, None, ""
    for ch in s:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]
