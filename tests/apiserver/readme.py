"""The README's Troubleshooting rows held against what real kubectl prints.

A row's symptom quotes kubectl's output in `code` spans; in them `...` stands for any text and
`<word>` (`<file>`, `<name>`, `<field>`) for the part that differs per object (a span that is
only a placeholder explains one, it shows no output). `row_showing(line)`
returns the symptom of the row with a span that matches a printed line exactly, so a README row
that drifts from kubectl's real output fails the test that produced that output.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import yaml

from tests.apiserver.cluster import REPO

_PLACEHOLDER = re.compile(r"<[a-z][a-z-]*>")


def _symptoms() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Troubleshooting"):]
    section = section[:section.find("\n## ", 1)] if "\n## " in section[1:] else section
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| Symptom")]
    # the symptom is the first cell; code spans may hold " | " (none do today), so split outside them
    symptoms = []
    for row in rows:
        cell, in_code = [], False
        for i, ch in enumerate(row[2:]):
            if ch == "`":
                in_code = not in_code
            if not in_code and row[2 + i:2 + i + 3] == " | ":
                break
            cell.append(ch)
        symptoms.append("".join(cell))
    return symptoms


def _pattern(span: str) -> re.Pattern[str]:
    parts = []
    for piece in re.split(r"(\.\.\.|<[a-z][a-z-]*>)", span):
        if piece == "...":
            parts.append(".*")
        elif _PLACEHOLDER.fullmatch(piece):
            parts.append(".+")
        else:
            parts.append(re.escape(piece))
    return re.compile("".join(parts))


def row_showing(printed: str) -> str:
    """The Troubleshooting symptom that shows `printed` (one line of kubectl's output, compared
    without trailing blanks); AssertionError when no row does."""
    line = printed.rstrip()
    for symptom in _symptoms():
        spans = [span.rstrip() for span in re.findall(r"`([^`]+)`", symptom)]
        if any(_pattern(span).fullmatch(line) for span in spans if not _PLACEHOLDER.fullmatch(span)):
            return symptom
    raise AssertionError(f"no row of README.md's Troubleshooting shows what kubectl printed:\n{line}")


def _use_section() -> str:
    text = (REPO / "README.md").read_text()
    return text[text.index("## Use (annotate a VMI)"):]


def use_vm() -> dict[str, Any]:
    """README "Use": its VirtualMachine, as the YAML block shows it."""
    found: dict[str, Any] = yaml.safe_load(_use_section().split("```yaml\n", 1)[1].split("```", 1)[0])
    return found


def use_refused() -> tuple[dict[str, Any], list[str]]:
    """README "Use": its VM changed as the text says (display left on, a CD-ROM as third disk),
    and the lines it shows `kubectl apply -f fedora-ch.yaml` printing for it."""
    obj = copy.deepcopy(use_vm())
    template = obj["spec"]["template"]["spec"]
    del template["domain"]["devices"]["autoattachGraphicsDevice"]
    template["domain"]["devices"]["disks"].append({"name": "installer", "cdrom": {"bus": "sata"}})
    template["volumes"].append({"name": "installer", "containerDisk": {"image": "example.org/installer:latest"}})
    shown = _use_section().split("$ kubectl apply -f fedora-ch.yaml\n", 1)[1].split("```", 1)[0].splitlines()
    return obj, shown
