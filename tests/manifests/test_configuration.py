"""The ConfigMap is admission/config.example.yaml, verbatim, and the server accepts it."""

from __future__ import annotations

import os
import pathlib

import yaml

from admission.config import EXAMPLE, parse_config
from tests.manifests.render import MANIFESTS, REPO, one, render

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


def documented_overlay() -> str:
    """The kustomization docs/operations.md §3 tells operators to write beside addon_manifests/."""
    text = (REPO / "docs" / "operations.md").read_text()
    section = text[text.index("## 3. Configuration"):text.index("## 4. ")]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert block.startswith("# my-kubevirt-ch/kustomization.yaml\n")
    return block


def test_the_documented_overlay_keeps_the_add_ons_order_and_a_configuration_the_server_accepts(tmp_path):
    """kustomize orders by the kustomization given to `kubectl -k` only: an overlay without the
    base's `sortOptions` would apply the webhook configurations last, and `kubectl delete -k` would
    remove them after their server (seen through the real kubectl: tests/apiserver/test_kubevirt_cr.py)."""
    overlay = tmp_path / "my-kubevirt-ch"
    overlay.mkdir()
    text = documented_overlay().replace("../addon_manifests", str(pathlib.Path("..") / os.path.relpath(
        REPO / "addon_manifests", tmp_path)))
    (overlay / "kustomization.yaml").write_text(text)
    ours, base = render(overlay), render(MANIFESTS)
    assert [(o["kind"], o["metadata"]["name"]) for o in ours] == [(o["kind"], o["metadata"]["name"]) for o in base]
    config = one(ours, "ConfigMap", "ch-admission-config")["data"]["config.yaml"]
    parsed = parse_config(yaml.safe_load(config), "ConfigMap ch-admission-config")
    assert parsed.launcher.image == "registry.example.com/mirror/ch-launcher:v0.1.0"
    image = one(ours, "Deployment", "ch-admission")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.startswith("registry.example.com/mirror/ch-admission:")
