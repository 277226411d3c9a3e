"""Fixtures shared by the functional tests of the admission server."""

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
