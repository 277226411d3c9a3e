"""Fixtures of the API-server tests (how to use them: tests/apiserver/cluster.py). Every test in
this directory is marked `apiserver` and gets 600 s: starting a control plane counts towards the
first test that asks for it, and takes 15-80 s depending on the machine's load.

Under pytest-xdist (`--dist loadgroup`, as `make test` runs) the tests that share a control plane
run on one worker: those of the session's `cluster` in the group `apiserver`, those of a module's
own (`make_cluster`) in a group named for the module, so no control plane is started twice."""

from __future__ import annotations

import pathlib

import pytest

from tests.apiserver.cluster import Cluster, unavailable
from tests.xdist_groups import skip_where_the_group_was_lost

HERE = pathlib.Path(__file__).resolve().parent


@pytest.hookimpl(wrapper=True)  # marks before pytest-xdist reads the groups, checks after it named them
def pytest_collection_modifyitems(config, items):
    mine = [item for item in items if HERE in pathlib.Path(str(item.fspath)).resolve().parents]
    for item in mine:
        item.add_marker(pytest.mark.apiserver)
        item.add_marker(pytest.mark.timeout(600))
        group = "apiserver" if "cluster" in item.fixturenames else f"apiserver-{item.path.stem}"
        item.add_marker(pytest.mark.xdist_group(group))
    result = yield
    skip_where_the_group_was_lost(config, mine)
    return result


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """One control plane for the whole run, with virt-api, the add-on installed and its server
    running; its KubeVirt CR sets `workloadUpdateMethods: [LiveMigrate]` (HyperConverged's
    default). Tests may add objects, stop the server (`admission_stopped()`), but must leave the
    add-on installed."""
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    c = Cluster(tmp_path_factory.mktemp("apiserver"))
    try:
        c.start_all()
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def make_cluster(tmp_path_factory):
    """`make_cluster(**start_all_kwargs)`: a control plane of the calling module's own, for
    stories that change the cluster (uninstall, other KubeVirt settings). Closed after the module."""
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    made: list[Cluster] = []

    def make(**kwargs) -> Cluster:
        c = Cluster(tmp_path_factory.mktemp("apiserver"))
        made.append(c)
        return c.start_all(**kwargs)

    yield make
    for c in made:
        c.close()
