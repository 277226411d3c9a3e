"""Shared fixtures: where the reference data lives, and a temporary launcher layout."""

from __future__ import annotations

import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
REFERENCE = SHARED / "reference"
OPENAPI_SPEC = REFERENCE / "data" / "cloud-hypervisor-v53.0.yaml"
KUBEVIRT_EXAMPLES = REFERENCE / "data" / "kubevirt-examples"
DOMAIN_EXAMPLES = REFERENCE / "data" / "domain-examples"


def require_shared(path: pathlib.Path) -> pathlib.Path:
    """Skip (with the reason) when ../shared is not beside the checkout."""
    if not path.exists():
        pytest.skip(f"{path} is absent: ../shared/reference is not beside this checkout")
    return path
