"""Fixtures of the cluster suite (how to use them: tests/cluster/node.py). Every test in this
directory is marked `cluster` and gets 900 s for itself (`func_only`): its fixtures are bounded by
their own steps' timeouts instead, since the first test that asks for the cluster waits for the
images to build (about 4 minutes from a clean checkout on a quiet machine, 14 at a load of 30;
seconds once podman's layers and the base root filesystem are in build/) and the cluster to start
(about a minute), which overlap, and a module's node02 or node03 starts in its first test's setup.

Under pytest-xdist (`--dist loadgroup`, as `make test` runs) they are all in the group `cluster`,
so one worker starts the one cluster and runs them in file order."""

from __future__ import annotations

import concurrent.futures
import pathlib
import shutil
import tempfile
from collections.abc import Iterator

import pytest

from tests.cluster.images import Builder, missing
from tests.cluster.node import NodeCluster, unavailable
from tests.xdist_groups import skip_where_the_group_was_lost

HERE = pathlib.Path(__file__).resolve().parent


@pytest.hookimpl(wrapper=True)  # marks before pytest-xdist reads the groups, checks after it named them
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Iterator[None]:
    mine = [item for item in items if HERE in pathlib.Path(str(item.fspath)).resolve().parents]
    for item in mine:
        item.add_marker(pytest.mark.cluster)
        item.add_marker(pytest.mark.timeout(900, func_only=True))
        item.add_marker(pytest.mark.xdist_group("cluster"))
    result = yield
    skip_where_the_group_was_lost(config, mine)
    return result


@pytest.fixture(scope="session")
def node_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
    """One cluster for the whole run: control plane, node, images loaded, the add-on installed as
    the README says. Tests add their own VMIs and leave the add-on installed."""
    reason = unavailable() or missing()
    if reason:
        pytest.skip(reason)
    # The nodes' unix sockets live under the cluster's directory, and a socket's path holds at most
    # 107 bytes: under pytest-xdist (`popen-gwN/` more) node02's containerd.sock.ttrpc had 110 and
    # its containerd failed at every start. The cluster works through a short link to its directory.
    short = pathlib.Path(tempfile.mkdtemp(prefix="kc", dir="/tmp")) / "c"
    short.symlink_to(tmp_path_factory.mktemp("cluster"), target_is_directory=True)
    cluster = NodeCluster(short)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        built = pool.submit(Builder().build)  # the images build while the cluster starts
        try:
            cluster.start_node()
            cluster.load_images(built.result())
            cluster.install()
        except BaseException:
            cluster.close()
            shutil.rmtree(short.parent)
            raise
    try:
        yield cluster
    finally:
        cluster.close()
        shutil.rmtree(short.parent)  # the link only: the directory stays with pytest's others

