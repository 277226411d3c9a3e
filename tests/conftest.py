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


# Tests that need a component of ../shared (the real cloud-hypervisor, KubeVirt's own client, a
# real API server) carry one of these markers. They skip, with the reason, where that component
# cannot run; but with ../shared beside the checkout (CI) such a skip is a failure, so that these
# tests cannot silently stop running.
MUST_RUN_WITH_SHARED = ("real_vmm", "probe", "apiserver", "cluster")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or hasattr(report, "wasxfail") or not SHARED.is_dir():
        return
    marker = next((m for m in MUST_RUN_WITH_SHARED if item.get_closest_marker(m)), None)
    if marker is None:
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = (f"a test marked `{marker}` skipped although ../shared is beside this checkout, "
                       f"where it must run: {reason}")
