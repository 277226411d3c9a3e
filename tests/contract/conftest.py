"""Fixtures: a short temporary directory, the backends (simulated and real VMM), VMM launchers.

Every VMM started here is stopped by a finalizer (vmm.shutdown, SIGTERM, SIGKILL, reap), so a
failing test leaves no process behind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests import real_vmm
from tests.contract.harness import (
    FAKE,
    Backend,
    Vmm,
    launch,
    real_backend,
    real_vmm_unavailable,
    remove_tree,
    short_dir,
)


@pytest.fixture
def sdir() -> Iterator[str]:
    directory = short_dir()
    yield directory
    remove_tree(directory)


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.real_vmm)])
def backend(request: pytest.FixtureRequest) -> Backend:
    """Both backends; the real one is skipped (with the reason) when it cannot run here."""
    if request.param == "real":
        reason = real_vmm_unavailable()
        if reason:
            pytest.skip(f"real cloud-hypervisor: {reason}")
        return real_backend()
    return FAKE


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.real_vmm)])
def guest_backend(request: pytest.FixtureRequest) -> Backend:
    """Both backends for the guest-driven tests: the simulated guest acts on signals, the real
    VMM runs the tiny guest (whatever CH_FIRMWARE says), which acts on console commands."""
    if request.param == "real":
        reason = real_vmm.unavailable(tiny_guest=True)
        if reason:
            pytest.skip(f"real cloud-hypervisor: {reason}")
        return real_backend()
    return FAKE


@pytest.fixture
def start(sdir: str) -> Iterator[Callable[..., Vmm]]:
    """`start(backend=FAKE, **launch_kwargs)`: starts a VMM in the test's directory."""
    started: list[Vmm] = []

    def _start(backend: Backend = FAKE, **kwargs: Any) -> Vmm:
        kwargs.setdefault("name", f"ch{len(started)}")
        vmm = launch(backend, sdir, **kwargs)
        started.append(vmm)
        return vmm

    yield _start
    for vmm in reversed(started):
        vmm.stop()


@pytest.fixture
def vmm(backend: Backend, start: Callable[..., Vmm]) -> Vmm:
    """A ready VMM on each backend."""
    return start(backend)
