"""The guard of the suites that share one expensive fixture per `xdist_group` (tests/apiserver,
tests/cluster): if pytest-xdist lost a test's group, every worker would start its own control
plane or cluster, so such a test skips instead (tests/conftest.py reports that skip as a failure
when ../shared is beside the checkout)."""

from __future__ import annotations

import pytest


def skip_where_the_group_was_lost(config: pytest.Config, items: list[pytest.Item]) -> None:
    """After pytest-xdist has named the groups: a worker with `--dist loadgroup` suffixes each
    grouped test's id with `@group`; `items` without it are marked skipped with the reason."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        if "@" not in item.nodeid:
            item.add_marker(pytest.mark.skip(reason="pytest-xdist ignored its xdist_group: this pytest breaks "
                                                    "--dist loadgroup (pytest-xdist#1386); install the "
                                                    "versions pyproject.toml allows"))
