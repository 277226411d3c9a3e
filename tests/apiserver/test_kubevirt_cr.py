"""The cluster's KubeVirt CR as the add-on meets it, through the real API server: a KubeVirt
release outside the supported range, a KubeVirt that has not finished deploying (no observed
version yet), and a KubeVirt CR that is not where the configuration says (HyperConverged names it
`kubevirt-kubevirt-hyperconverged`). Users see a denial that names the
annotation and says why; operators see the condition in the server's log, its metric and an Event
on its Deployment (docs/operations.md §10); following the README's Troubleshooting row fixes it.
Runs on a control plane of its own: it changes the KubeVirt CR and restarts the server."""

from __future__ import annotations

import json
import os
import re

import pytest

from tests.apiserver.cluster import KUBEVIRT_VERSION, REPO, Cluster
from tests.apiserver.objects_support import INSTALLED, create, launcher_pod, vm, vmi
from tests.apiserver.readme import row_showing

FIELD = "metadata.annotations[kubevirt-ch.io/hypervisor]"
HCO_NAME = "kubevirt-kubevirt-hyperconverged"


@pytest.fixture(scope="module")
def c(make_cluster) -> Cluster:
    return make_cluster(workload_update_methods=[])


def restart(c: Cluster) -> None:
    """`kubectl -n kubevirt-ch rollout restart deployment/ch-admission`: the server reads its
    configuration (the ConfigMap as it is in the cluster now) and the KubeVirt CR at start-up."""
    config = c.json("get", "configmap", "ch-admission-config", "-n", "kubevirt-ch")["data"]["config.yaml"]
    c.stop_admission()
    c.start_admission(config=config)


def set_version(c: Cluster, name: str, version: str) -> None:
    """What virt-operator writes once a KubeVirt release is deployed."""
    c.ok("patch", "kubevirt", name, "-n", "kubevirt", "--subresource=status", "--type=merge",
         "-p", json.dumps({"status": {"observedKubeVirtVersion": version}}))


def described_events(c: Cluster) -> list[str]:
    described = c.ok("describe", "deployment", "ch-admission", "-n", "kubevirt-ch")
    return described[described.index("Events:"):].splitlines()


def told_to_operators(c: Cluster, condition: str, message: str) -> None:
    """The condition in the server's log (WARNING), its gauge at 1, and a Warning Event on its
    Deployment that `kubectl describe` lists (the log is read as the server writes it, the Event
    posted in the background: both waited for)."""
    c.wait_for(lambda: any(line.endswith(f"WARNING admission: cluster condition {condition}: {message}")
                           for line in c.admission.log), f"the log line of {condition}")
    assert f'ch_admission_cluster_condition{{condition="{condition}"}} 1.0' in c.metrics()
    c.wait_for(lambda: any(re.fullmatch(rf"  Warning  {condition} +\S+ +ch-admission +{re.escape(message)}", e)
                           for e in described_events(c)), f"the Warning Event {condition}", every=0.5)


def holds_no_more(c: Cluster, condition: str) -> None:
    assert f'ch_admission_cluster_condition{{condition="{condition}"}} 0.0' in c.metrics()
    assert not any(f"cluster condition {condition}" in line for line in c.admission.log)


def test_a_kubevirt_release_outside_the_supported_range_refuses_new_ch_vms_and_tells_operators(c):
    running = create(c, vmi("before-downgrade"))
    assert running.rc == 0
    owner = c.json("get", "vmi", "before-downgrade")

    set_version(c, "kubevirt", "v1.7.2")
    restart(c)
    problem = ("Cloud Hypervisor is not available on KubeVirt v1.7.2: this kubevirt-ch release supports KubeVirt "
               ">=1.8.0, <1.10.0")
    r = create(c, vmi("on-old-kubevirt"))
    assert (r.rc, r.lines) == (1, [f"The request is invalid: {FIELD}: {FIELD}: {problem}"])
    assert "`KubeVirtVersionUnsupported`" in row_showing(r.lines[0])
    r = create(c, vm("vm-on-old-kubevirt"))
    template_field = f"spec.template.{FIELD}"
    assert (r.rc, r.lines) == (1, [f"The request is invalid: {template_field}: {template_field}: {problem}"])
    r = create(c, launcher_pod(owner))  # virt-controller restarting the running one: refused too
    assert r.rc == 1 and problem in r.out, r.out
    assert create(c, vmi("qemu-on-old-kubevirt", annotations=None)).rc == 0  # QEMU VMIs are not ours
    assert c.kubectl("label", "vmi", "before-downgrade", "a=b").rc == 0  # existing ones are not blocked
    told_to_operators(c, "KubeVirtVersionUnsupported",
                      f"KubeVirt kubevirt/kubevirt: {problem}; new Cloud Hypervisor VMIs and their launcher pods "
                      "are refused")

    set_version(c, "kubevirt", KUBEVIRT_VERSION)  # KubeVirt upgraded (the server re-reads it every 5 min)
    restart(c)
    assert create(c, vmi("on-new-kubevirt")).out == "virtualmachineinstance.kubevirt.io/on-new-kubevirt created\n"
    holds_no_more(c, "KubeVirtVersionUnsupported")


def test_a_server_up_before_kubevirt_has_deployed_refuses_ch_vms_until_it_has_and_says_when(c):
    """The add-on installed with KubeVirt (as HyperConverged does): the KubeVirt CR has no
    observed version yet. New CH VMIs are refused meanwhile; once virt-operator writes the version,
    the server reads it again (on the first request 5 s after its last try) and the condition is resolved: a Normal
    `KubeVirtUnreadableResolved` Event, the gauge back to 0, an INFO line."""
    c.ok("patch", "kubevirt", "kubevirt", "-n", "kubevirt", "--subresource=status", "--type=merge",
         "-p", json.dumps({"status": {"observedKubeVirtVersion": None}}))
    restart(c)
    reason = "the KubeVirt resource has no status.observedKubeVirtVersion yet"
    r = create(c, vmi("while-deploying"))
    assert (r.rc, r.lines) == (1, [(f"The request is invalid: {FIELD}: {FIELD}: cannot verify the cluster's KubeVirt "
                                    f"version ({reason}); Cloud Hypervisor VMIs are refused until it can be read")])
    assert "`KubeVirtUnreadable`" in row_showing(r.lines[0])
    message = (f"cannot read KubeVirt kubevirt/kubevirt ({reason}): new Cloud Hypervisor VMIs and their launcher "
               "pods are refused until it can be read")
    told_to_operators(c, "KubeVirtUnreadable", message)

    set_version(c, "kubevirt", KUBEVIRT_VERSION)  # virt-operator is done
    text = c.yaml(vmi("once-deployed"))
    r = c.wait_for(lambda: (lambda r: r if r.rc == 0 else None)(c.kubectl("create", "-f", "-", input=text)),
                   "the server to read the KubeVirt version again", every=1)
    assert r.out == "virtualmachineinstance.kubevirt.io/once-deployed created\n"
    assert 'ch_admission_cluster_condition{condition="KubeVirtUnreadable"} 0.0' in c.metrics()
    c.wait_for(lambda: any(line.endswith(f"INFO admission: cluster condition KubeVirtUnreadable no longer holds "
                                         f"(was: {message})") for line in c.admission.log), "the INFO line")
    c.wait_for(lambda: any(re.fullmatch(rf"  Normal +KubeVirtUnreadableResolved +\S+ +ch-admission +"
                                        rf"{re.escape('no longer: ' + message)}", e) for e in described_events(c)),
               "the KubeVirtUnreadableResolved Event", every=0.5)


def test_a_kubevirt_cr_named_as_hyperconverged_names_it_is_found_once_configured(c, tmp_path):
    """The KubeVirt CR is `kubevirt/kubevirt-kubevirt-hyperconverged`, the configuration still
    says `kubevirt/kubevirt`: every new CH VMI is refused naming the CR it could not read, until
    the operator sets `kubevirt.name` in an overlay of their own (docs/operations.md §3), applies
    it and restarts the server, as the README's row says."""
    cr = c.json("get", "kubevirt", "kubevirt", "-n", "kubevirt")
    renamed = {"apiVersion": cr["apiVersion"], "kind": "KubeVirt",
               "metadata": {"name": HCO_NAME, "namespace": "kubevirt"}, "spec": cr["spec"]}
    c.ok("create", "-f", "-", input=c.yaml(renamed))
    c.ok("patch", "kubevirt", HCO_NAME, "-n", "kubevirt", "--subresource=status", "--type=merge",
         "-p", json.dumps({"status": cr["status"]}))
    c.ok("delete", "kubevirt", "kubevirt", "-n", "kubevirt")
    restart(c)

    r = create(c, vmi("no-kubevirt-cr"))
    reason = "KubeVirt kubevirt/kubevirt not found"
    assert (r.rc, r.lines) == (1, [(f"The request is invalid: {FIELD}: {FIELD}: cannot verify the cluster's KubeVirt "
                                    f"version ({reason}); Cloud Hypervisor VMIs are refused until it can be read")])
    assert "`KubeVirtUnreadable`" in row_showing(r.lines[0])
    told_to_operators(c, "KubeVirtUnreadable",
                      f"cannot read KubeVirt kubevirt/kubevirt ({reason}): new Cloud Hypervisor VMIs and their "
                      "launcher pods are refused until it can be read")

    # the fix: an overlay of the operator's own that sets kubevirt.name (the add-on's files unchanged)
    configmap = c.json("get", "configmap", "ch-admission-config", "-n", "kubevirt-ch")
    text = configmap["data"]["config.yaml"]
    assert text.count("\n  name: kubevirt\n") == 1
    text = text.replace("\n  name: kubevirt\n", f"\n  name: {HCO_NAME}\n")
    overlay = tmp_path / "my-kubevirt-ch"
    overlay.mkdir()
    patch = {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "ch-admission-config", "namespace": "kubevirt-ch"}, "data": {"config.yaml": text}}
    (overlay / "kustomization.yaml").write_text(c.yaml({
        "sortOptions": {"order": "fifo"},  # without it: kustomize's legacy order (docs/operations.md §3)
        "resources": [os.path.relpath(REPO / "addon_manifests", overlay)],
        "patches": [{"patch": c.yaml(patch)}]}))
    r = c.kubectl("apply", "-k", str(overlay))
    expected = [f"{name} unchanged" for name in INSTALLED]
    for name in ("configmap/ch-admission-config", "poddisruptionbudget.policy/ch-admission"):  # the PDB: test_install
        expected[INSTALLED.index(name)] = f"{name} configured"
    assert (r.rc, r.without_sort_notice()) == (0, expected)
    restart(c)
    assert create(c, vmi("found-kubevirt-cr")).out == "virtualmachineinstance.kubevirt.io/found-kubevirt-cr created\n"
    holds_no_more(c, "KubeVirtUnreadable")
