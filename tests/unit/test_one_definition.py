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


def _all_modules() -> dict[str, ast.AST]:
    """The launcher's modules and the admission server's."""
    admission = PACKAGE.parent / "admission"
    return {**_modules(), **{str(p.relative_to(PACKAGE.parent)): ast.parse(p.read_text())
                             for p in sorted(admission.rglob("*.py"))}}


def test_the_launchers_directories_are_declared_once():
    # The command line, the manager's settings and the translator's environment each extend it.
    declared = {name for name, tree in _all_modules().items() for node in ast.walk(tree)
                if isinstance(node, ast.ClassDef) for item in node.body
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                and item.target.id in ("private_dir", "ephemeral_disk_dir", "container_disk_dir", "firmware_dir")}
    assert declared == {"ch_launcher/kubevirt/paths.py"}, "extend kubevirt.paths.LauncherPaths"


def test_a_message_is_made_to_name_its_field_by_one_rule():
    # `message if not field or field in message else f"{field}: {message}"`, wherever a user
    # reads a problem's text alone (kubectl warnings, a failed Sync)
    def naming(node: ast.AST) -> bool:
        return (isinstance(node, ast.IfExp) and isinstance(node.orelse, ast.JoinedStr)
                and any(isinstance(c, ast.Compare) and any(isinstance(op, ast.In) for op in c.ops)
                        for c in ast.walk(node.test)))

    copies = {name: n for name, tree in _all_modules().items() if (n := sum(map(naming, ast.walk(tree))))}
    assert copies == {"ch_launcher/convert/errors.py": 1}, "use convert.errors.naming_field (or .text)"


def test_what_counts_as_a_vfio_vmi_is_defined_once():
    defined = {name for name, tree in _all_modules().items() for node in ast.walk(tree)
               if isinstance(node, ast.FunctionDef) and "has_vfio" in node.name}
    assert defined == {"ch_launcher/convert/runtime.py"}, "use convert.runtime.has_vfio"
