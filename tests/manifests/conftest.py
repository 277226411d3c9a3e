"""Rendered kustomizations, once per session (rendering is a real `kubectl kustomize`)."""

from __future__ import annotations

import pytest

from tests.manifests.render import MANIFESTS, render


@pytest.fixture
def default_install():
    """`kubectl apply -k addon_manifests/`: the default (self-signed) install."""
    return render(MANIFESTS)


@pytest.fixture
def cert_manager_install():
    return render(MANIFESTS / "overlays" / "cert-manager")


@pytest.fixture
def webhooks():
    return render(MANIFESTS / "webhooks")


@pytest.fixture
def guard():
    return render(MANIFESTS / "guard")
