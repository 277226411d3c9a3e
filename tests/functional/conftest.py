"""Fixtures shared by the functional tests: the admission server's TLS, and launcher pods (pod_fixtures)."""

from __future__ import annotations

import pytest

from tests.functional.admission_harness import client, make_tls


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    """A CA and a serving certificate for `localhost`, generated for the module."""
    return make_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def https(tls):
    """An HTTPS session that trusts the module's CA."""
    session = client(tls["ca"])
    yield session
    session.close()

# Launcher stories in a pod sandbox (uid 107, the pod's network namespace), simulated and real VMM.
from tests.functional.pod_fixtures import launch, pod, vmm, vmm_kind  # noqa: E402, F401

# Launcher stories on the simulated VMM and, marked @BOTH_VMMS, on the real one too.
from tests.functional.story_fixtures import new_harness, story_vmm, vh  # noqa: E402, F401
