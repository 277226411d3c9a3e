"""A small reader for the repository's Containerfile: stages, ARGs, COPY sources, RUN text.

Enough for the checks in test_containerfile.py, not a general Dockerfile parser: it joins
backslash continuations, drops comments, and splits instructions into words the way the
exec (JSON) and shell forms write them. Raises ValueError on lines it does not understand.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field


@dataclass
class Stage:
    name: str
    base: str
    args: dict[str, str] = field(default_factory=dict)
    instructions: list[tuple[str, str]] = field(default_factory=list)  # (INSTRUCTION, rest)

    def all(self, instruction: str) -> list[str]:
        return [rest for ins, rest in self.instructions if ins == instruction]

    def run_text(self) -> str:
        return "\n".join(self.all("RUN"))

    def exec_form(self, instruction: str) -> list[str] | None:
        found = self.all(instruction)
        return json.loads(found[-1]) if found else None


@dataclass
class Containerfile:
    global_args: dict[str, str]
    stages: dict[str, Stage]
    header: str  # the leading comment block

    def stage(self, name: str) -> Stage:
        return self.stages[name]


def parse(text: str) -> Containerfile:
    header_lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        header_lines.append(line[1:].strip())
    logical, current = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # comment inside a continued instruction
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    if current:
        raise ValueError("Containerfile ends inside a continued line")
    global_args: dict[str, str] = {}
    stages: dict[str, Stage] = {}
    stage: Stage | None = None
    for line in logical:
        m = re.match(r"([A-Z]+)\s+(.*)$", line)
        if not m:
            raise ValueError(f"not an instruction: {line!r}")
        ins, rest = m.groups()
        if ins == "FROM":
            fm = re.match(r"(\S+)\s+AS\s+(\S+)$", rest, re.IGNORECASE)
            if not fm:
                raise ValueError(f"every stage must be named: {line!r}")
            stage = Stage(fm.group(2), fm.group(1))
            stages[stage.name] = stage
        elif ins == "ARG":
            name, _, default = rest.partition("=")
            (stage.args if stage else global_args)[name.strip()] = default.strip()
        elif stage is None:
            raise ValueError(f"{ins} before the first FROM")
        else:
            stage.instructions.append((ins, rest))
    return Containerfile(global_args, stages, "\n".join(header_lines))


def copy_sources(rest: str) -> tuple[list[str], str, str | None]:
    """(sources, destination, --from stage or None) of a COPY instruction."""
    words = shlex.split(rest)
    source_stage = None
    while words and words[0].startswith("--"):
        flag = words.pop(0)
        if flag.startswith("--from="):
            source_stage = flag.split("=", 1)[1]
    return words[:-1], words[-1], source_stage
