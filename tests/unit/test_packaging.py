"""Each image installs only what its own process imports (pyproject's extras `launcher` and
`admission`, the Containerfile's two virtualenvs): importing the whole launcher never loads the
admission stack and the reverse, every third-party import of a package is declared in its
extra (or the common base), and every declared dependency is imported by the process that
installs it."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import tomllib

import pytest

from tests.conftest import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
BASE = PYPROJECT["project"]["dependencies"]
EXTRAS = PYPROJECT["project"]["optional-dependencies"]
# package -> (its extra, what its process must never load: the other image's stack)
SIDES = {
    "ch_launcher": ("launcher", {"aiohttp", "kubernetes", "cryptography", "prometheus_client", "yaml", "requests",
                                 "urllib3", "pydantic"}),
    "admission": ("admission", {"grpc", "google.protobuf", "pycdlib", "psutil"}),
}
# Modules of the package that are developer tools, not part of its process (run from a checkout).
# Distributions a declared one pins exactly and whose modules the code may import by name.
COMPANIONS = {"pydantic-core": "pydantic"}  # pydantic's own, should a module import pydantic_core
DEV_MODULES = {"ch_launcher._proto.regenerate"}  # `make proto`: needs grpcio-tools (the test extra)

IMPORT_ALL = """
import importlib, json, pkgutil, sys
package = importlib.import_module(sys.argv[1])
skip = set(sys.argv[2:])
for info in pkgutil.walk_packages(package.__path__, sys.argv[1] + "."):
    if info.name not in skip:
        importlib.import_module(info.name)
print(json.dumps(sorted(sys.modules)))
"""


def _name(requirement: str) -> str:
    """The distribution name of a requirement string, normalized (PEP 503)."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement).group(0)).lower()


def declared(extra: str) -> set[str]:
    return {_name(r) for r in BASE + EXTRAS[extra]}


def loaded_modules(package: str) -> set[str]:
    """Every module in sys.modules after importing each module of `package`, in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", IMPORT_ALL, package, *DEV_MODULES], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


def direct_imports(package: str) -> set[str]:
    """Top-level names of the third-party modules the package's own source imports."""
    names: set[str] = set()
    for path in (REPO / package).rglob("*.py"):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        if module in DEV_MODULES:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module)
    top = {n.split(".")[0] for n in names}
    return {n for n in top if n not in sys.stdlib_module_names and n not in SIDES and n != "__future__"}


def distributions_of(modules: set[str]) -> set[str]:
    import importlib.metadata

    mapping = importlib.metadata.packages_distributions()
    found = set()
    for module in modules:
        assert module in mapping, f"{module} is imported but installed by no distribution"
        found |= {COMPANIONS.get(_name(d), _name(d)) for d in mapping[module]}
    return found


@pytest.mark.parametrize("package", sorted(SIDES))
def test_importing_a_whole_process_never_loads_the_other_images_stack(package):
    _extra, forbidden = SIDES[package]
    loaded = loaded_modules(package)
    wrong = sorted(m for m in loaded if m in forbidden or any(m.startswith(f + ".") for f in forbidden))
    assert not wrong, f"importing {package} loads {wrong}"


def test_the_launcher_never_loads_the_developer_tools_or_the_admission_package():
    loaded = loaded_modules("ch_launcher")
    assert not {m for m in loaded if m.split(".")[0] in ("admission", "demo", "tests")}


@pytest.mark.parametrize("package", sorted(SIDES))
def test_every_third_party_import_is_declared_in_its_images_extra(package):
    extra, _ = SIDES[package]
    undeclared = distributions_of(direct_imports(package)) - declared(extra)
    assert not undeclared, f"{package} imports {sorted(undeclared)}, which pyproject's [{extra}] does not declare"


@pytest.mark.parametrize("package", sorted(SIDES))
def test_every_declared_dependency_is_imported_by_its_process(package):
    """No dependency is installed into an image that its process never imports."""
    extra, _ = SIDES[package]
    unused = {_name(r) for r in EXTRAS[extra]} - distributions_of(direct_imports(package))
    assert not unused, f"pyproject's [{extra}] declares {sorted(unused)}, which {package} never imports"


def test_the_common_base_is_imported_by_both_processes():
    base = {_name(r) for r in BASE}
    for package in SIDES:
        assert base <= distributions_of(direct_imports(package)), package


def test_the_wheel_holds_the_two_processes_and_no_developer_tools():
    packages = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    assert sorted(packages) == ["admission*", "ch_launcher*"]
    assert not (REPO / "ch_launcher" / "demo").exists()
