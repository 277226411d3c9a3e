"""manager.features: the modules the manager imports on first use, not at start."""

import ast
import json
import pathlib
import subprocess
import sys

import pytest

from ch_launcher.manager import features

FEATURES_SOURCE = pathlib.Path(features.__file__).read_text()


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
                         check=True, capture_output=True, text=True).stdout
    return set(json.loads(out))


def test_a_started_manager_has_imported_none_of_the_features():
    loaded = _modules_after("import ch_launcher.manager, ch_launcher.server, ch_launcher.cli")
    assert "ch_launcher.manager.features" in loaded
    assert loaded.isdisjoint(features._MODULES.values())


def test_a_feature_is_imported_when_first_read_and_alone():
    loaded = _modules_after("from ch_launcher.manager import features\nfeatures.tpm.Swtpm")
    assert "ch_launcher.manager.tpm" in loaded
    assert loaded.isdisjoint(m for n, m in features._MODULES.items() if n != "tpm")


def test_the_manager_defers_imports_only_through_features():
    """One lazy-import style: a module the launcher loads at start imports nothing inside its
    functions (it reads `features`); the modules imported on first use import at their top."""
    package = pathlib.Path(features.__file__).parent
    inline = sorted(f"{path.name}:{node.lineno}" for path in package.glob("*.py") if path.name != "features.py"
                    for function in ast.walk(ast.parse(path.read_text()))
                    if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
                    for node in ast.walk(function) if isinstance(node, (ast.Import, ast.ImportFrom)))
    assert inline == []


def test_an_unknown_feature_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'hypervisor'"):
        features.hypervisor  # noqa: B018


def test_the_import_graph_names_every_feature_module():
    """The TYPE_CHECKING imports are what import-linter sees: they must name exactly _MODULES."""
    named = set()
    for node in ast.walk(ast.parse(FEATURES_SOURCE)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ch_launcher"):
            named |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            named |= {a.name for a in node.names if a.name != "importlib"}
    assert named == set(features._MODULES.values())
    assert set(features.__all__) == set(features._MODULES)
