"""Fixtures for launcher stories that run on both VMMs: `@BOTH_VMMS` parametrises a story over
the simulated VMM and the real cloud-hypervisor (../shared/vmm or CH_BINARY) with the tiny guest
of tests/guest/; `new_harness(**kwargs)` makes Harnesses for the story's VMM (each closed
afterwards). On the real VMM the launcher and the VMM run with the pod's privileges (uid 107,
only NET_BIND_SERVICE, a network namespace of their own: the `pod` sandbox). conftest.py makes
the fixtures available to every functional test.
"""

from __future__ import annotations

import pytest

from tests.functional.harness import Harness, RealVmm

BOTH_VMMS = pytest.mark.parametrize("story_vmm", ["simulated", pytest.param("real", marks=pytest.mark.real_vmm)],
                                    indirect=True)


@pytest.fixture
def story_vmm(request):
    """The VMM the story runs on: None for the simulated one (the default), else the real one."""
    if getattr(request, "param", "simulated") == "simulated":
        return None
    real = RealVmm.from_environment(tiny_guest=True)
    if isinstance(real, str):
        pytest.skip(f"real cloud-hypervisor: {real}")
    return real


def story_harness(request, real, **kwargs) -> Harness:
    """On the real VMM the launcher runs as the pod's compute container does: uid 107 with only
    NET_BIND_SERVICE, in its own network namespace (tests/functional/pod_sandbox.py)."""
    pod = request.getfixturevalue("pod") if real is not None else None
    return Harness(real=real, pod=pod, **kwargs)


@pytest.fixture
def vh(request, story_vmm):
    h = story_harness(request, story_vmm)
    yield h
    h.close()


@pytest.fixture
def new_harness(request, story_vmm):
    """A factory of Harnesses for stories that need their own settings; each is closed afterwards."""
    made = []

    def new(**kwargs):
        made.append(story_harness(request, story_vmm, **kwargs))
        return made[-1]

    yield new
    for h in made:
        h.close()
