"""Fixtures of the unit tests that drive a domain manager in this process (tests/framework/managers.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.framework.launcher import LauncherLayout
from tests.framework.managers import short_layout


@pytest.fixture
def layout() -> Iterator[LauncherLayout]:
    """One launcher's directories under a short root."""
    with short_layout() as made:
        yield made


@pytest.fixture
def layouts() -> Iterator[tuple[LauncherLayout, LauncherLayout]]:
    """A migration source's and target's directories."""
    with short_layout() as source, short_layout() as target:
        yield source, target
