"""Shared fixtures: where the reference data lives, and a temporary launcher layout."""

from __future__ import annotations

import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
REFERENCE = SHARED / "reference"
OPENAPI_SPEC = REFERENCE / "data" / "cloud-hypervisor-v53.0.yaml"
KUBEVIRT_EXAMPLES = REFERENCE / "data" / "kubevirt-examples"
DOMAIN_EXAMPLES = REFERENCE / "data" / "domain-examples"


def require_shared(path: pathlib.Path) -> pathlib.Path:
    """`path`, a file of ../shared; skip (naming it) when it is absent."""
    if not path.exists():
        pytest.skip(f"{path} is absent" if SHARED.is_dir() else "../shared is not beside this checkout: no "
                    f"../shared/{path.relative_to(SHARED).parts[0]}")
    return path


# What each part of ../shared gives the tests (its README says more), for the skips without it.
SHARED_PARTS = {
    "vmm": "the real cloud-hypervisor (or set CH_BINARY to one)",
    "tools": "KubeVirt's own virt-handler code (kubevirt-probe, probe-run.sh)",
    "k8s": "the real control plane (kube-apiserver, virt-api)",
    "reference": "the reference data (Cloud Hypervisor's API spec, KubeVirt's examples, check_contract.py)",
    "kubevirt": "KubeVirt's node binaries",
}
_SHARED_PART = re.compile(rf"(?:\.\./shared|{re.escape(str(SHARED))})/(\w+)")


def fold_shared_skip(report: pytest.TestReport) -> None:
    """Without ../shared a few hundred tests skip, from fixtures and tests all over the suite, each
    naming what it misses in its own words at its own line: so that `-ra` says it once per part of
    ../shared, a skip whose reason names a part of ../shared is reported as skipped at that part
    (`SKIPPED [N] ../shared/vmm: not beside this checkout: ...`)."""
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    found = _SHARED_PART.search(reason)
    if found is None:
        return
    part = found.group(1)
    what = SHARED_PARTS.get(part, "a part of ../shared")
    report.longrepr = (str(SHARED / part), None, f"not beside this checkout: {what}")


# Tests that need a component of ../shared (the real cloud-hypervisor, KubeVirt's own client, a
# real API server) carry one of these markers. They skip, with the reason, where that component
# cannot run; but with ../shared beside the checkout (CI) such a skip is a failure, so that these
# tests cannot silently stop running.
MUST_RUN_WITH_SHARED = ("real_vmm", "probe", "apiserver", "cluster")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    if not SHARED.is_dir():
        fold_shared_skip(report)
        return
    marker = next((m for m in MUST_RUN_WITH_SHARED if item.get_closest_marker(m)), None)
    if marker is None:
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = (f"a test marked `{marker}` skipped although ../shared is beside this checkout, "
                       f"where it must run: {reason}")
