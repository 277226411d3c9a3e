"""Where the suite's shared code lives: helpers that several test modules use are in support
modules (`tests/framework/`, `*_support.py`, the suites' harnesses), never in a test module another
imports; and the suite drives the demo only as a user runs it (`demo` imports the framework, the
tests never import `demo`)."""

from __future__ import annotations

import ast
import pathlib

TESTS = pathlib.Path(__file__).resolve().parents[1]
REPO = TESTS.parent
# tests/cluster follows once the branches changing it have merged (its test_install.py still
# reads INSTALLED through tests/apiserver/test_install.py).
NOT_YET = ("cluster",)


def _imports(path: pathlib.Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def _sources(*roots: pathlib.Path) -> list[pathlib.Path]:
    return [p for root in roots for p in sorted(root.rglob("*.py"))
            if not (p.is_relative_to(TESTS) and p.relative_to(TESTS).parts[0] in NOT_YET)]


def test_no_module_imports_a_test_module() -> None:
    leaks = {str(p.relative_to(REPO)): sorted(m for m in _imports(p) if m.split(".")[-1].startswith("test_"))
             for p in _sources(TESTS, REPO / "bench", REPO / "demo")}
    assert {k: v for k, v in leaks.items() if v} == {}, "move what is shared to a support module"


def test_the_tests_never_import_the_demo() -> None:
    users = [str(p.relative_to(REPO)) for p in _sources(TESTS) if any(m.split(".")[0] == "demo" for m in _imports(p))]
    assert users == []
