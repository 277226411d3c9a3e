"""Words the launcher's modules share are defined once, where they belong, and imported by the
others: a copy drifts the day one of them changes."""

from __future__ import annotations

import ast
import pathlib

import ch_launcher

PACKAGE = pathlib.Path(ch_launcher.__file__).parent
ALIVE_STATES = {"RUNNING", "PAUSED", "PANICKED"}


def _modules() -> dict[str, ast.AST]:
    return {str(p.relative_to(PACKAGE.parent)): ast.parse(p.read_text()) for p in sorted(PACKAGE.rglob("*.py"))
            if "_proto" not in p.parts}


def _alive_tuples(tree: ast.AST) -> int:
    """Tuples (or sets) naming exactly VmState.RUNNING, PAUSED and PANICKED."""
    found = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.Set)) and len(node.elts) == len(ALIVE_STATES):
            names = {e.attr for e in node.elts if isinstance(e, ast.Attribute)
                     and isinstance(e.value, ast.Name) and e.value.id == "VmState"}
            found += names == ALIVE_STATES
    return found


def _string_constants(tree: ast.AST, text: str) -> int:
    return sum(isinstance(n, ast.Constant) and n.value == text for n in ast.walk(tree))


def test_the_states_in_which_a_vmm_runs_the_vm_are_listed_once():
    copies = {name: n for name, tree in _modules().items() if (n := _alive_tuples(tree))}
    assert copies == {"ch_launcher/lifecycle.py": 1}, "use lifecycle.ALIVE"


def test_the_aborted_migrations_failure_reason_is_written_once():
    copies = {name: n for name, tree in _modules().items()
              if (n := _string_constants(tree, "Live migration has been aborted"))}
    assert copies == {"ch_launcher/kubevirt/migration.py": 1}, "use kubevirt.migration.ABORTED_REASON"
