"""The README's "Use" example is one the add-on accepts, and the commands it gives exist."""

from __future__ import annotations

import re

import yaml

from ch_launcher.convert import check
from tests.manifests.cel import webhook_matches
from tests.manifests.render import MANIFESTS, REPO, one

README = (REPO / "README.md").read_text()


def section(title: str) -> str:
    start = README.index(f"\n## {title}")
    end = README.find("\n## ", start + 1)
    return README[start:end if end != -1 else None]


def test_the_usage_example_selects_cloud_hypervisor_and_is_accepted(webhooks):
    (block,) = re.findall(r"```yaml\n(.*?)```", section("Use"), re.DOTALL)
    vm = yaml.safe_load(block)
    hooks = one(webhooks, "ValidatingWebhookConfiguration", "kubevirt-ch-validator")["webhooks"]
    (hook,) = [h for h in hooks if h["name"].startswith("virtualmachines.")]
    assert webhook_matches(hook, "VirtualMachine", vm)
    template = vm["spec"]["template"]
    vmi = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
           "metadata": {"name": vm["metadata"]["name"], "namespace": "default", **template["metadata"]},
           "spec": template["spec"]}
    verdict = check(vmi)
    assert verdict.problems == []
    assert verdict.warnings == []


def test_every_kustomization_the_readme_names_exists():
    named = set(re.findall(r"kubectl (?:apply|delete) -k\s+(addon_manifests/[\w/-]*)", README))
    assert named, "the README names no kustomization"
    for path in named:
        assert (REPO / path / "kustomization.yaml").is_file(), path
    assert {"addon_manifests/", "addon_manifests/guard/", "addon_manifests/webhooks/"} <= named
    assert (MANIFESTS / "overlays" / "cert-manager" / "kustomization.yaml").is_file()


def test_the_readmes_check_of_a_vmis_launcher_reads_what_the_add_on_writes():
    """`status.launcherContainerImageVersion` shows KubeVirt's launcher image for a current Cloud
    Hypervisor VMI (the /mutate-vmi webhook writes it there, admission/launcher_status.py); the
    image the pod runs is in the annotation the webhook keeps. The README's check must read that
    (tests/cluster runs it on a real node)."""
    from admission.launcher_status import IMAGE_ANNOTATION

    (command,) = re.findall(r"To see that a VMI runs on Cloud Hypervisor:\s+`(kubectl [^`]+)`", section("Use"))
    escaped = IMAGE_ANNOTATION.replace(".", "\\.")
    assert command == f"kubectl get vmi fedora-ch -o jsonpath='{{.metadata.annotations.{escaped}}}'"
