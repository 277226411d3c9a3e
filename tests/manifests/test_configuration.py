"""The ConfigMap is admission/config.example.yaml, verbatim, and the server accepts it."""

from __future__ import annotations

import yaml

from admission.config import EXAMPLE, parse_config
from tests.manifests.render import REPO, one

RESYNC = ("regenerate it: { sed -n '1,/^  config.yaml: |$/p' addon_manifests/base/20-configmap.yaml; "
          "sed 's/^/    /; s/^    $//' admission/config.example.yaml; } > /tmp/cm && "
          "mv /tmp/cm addon_manifests/base/20-configmap.yaml")


def test_the_configmap_holds_the_example_configuration_verbatim(default_install):
    configmap = one(default_install, "ConfigMap", "ch-admission-config")
    assert list(configmap["data"]) == ["config.yaml"]
    assert configmap["data"]["config.yaml"] == EXAMPLE.read_text(), \
        f"addon_manifests/base/20-configmap.yaml differs from {EXAMPLE.relative_to(REPO)}; {RESYNC}"


def test_the_server_accepts_the_installed_configuration(default_install, cert_manager_install):
    for objects in (default_install, cert_manager_install):
        text = one(objects, "ConfigMap", "ch-admission-config")["data"]["config.yaml"]
        config = parse_config(yaml.safe_load(text), "ConfigMap ch-admission-config")
        assert config.launcher.image and config.launcher.command
