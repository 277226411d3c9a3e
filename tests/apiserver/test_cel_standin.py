"""The manifests tests judge which requests reach ch-admission with a stand-in: cel-python for the
API server's cel-go (tests/manifests/cel.py), and the rules and selectors read as Kubernetes
documents them. Here the real API server decides, for the same requests: each one is sent as a
server-side dry run (so nothing changes), and the server's request counter says how many calls it
got. Every webhook the cluster has is predicted (those the add-on installs now or later), so the
stand-in cannot drift from what the API server does."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.apiserver.objects_support import CH, launcher_pod, pool, replicaset, reviews, vm, vmi
from tests.manifests.cel import evaluate, request_for

Change = Callable[[dict[str, Any]], None]

RESOURCE = {"VirtualMachineInstance": "vmi", "VirtualMachine": "vm", "VirtualMachineInstanceReplicaSet": "vmirs",
            "VirtualMachinePool": "vmpool"}


def _selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A LabelSelector (matchLabels, matchExpressions with In, NotIn, Exists, DoesNotExist)."""
    if not selector:
        return True
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        key, op, values = e["key"], e["operator"], e.get("values", [])
        ok = {"In": key in labels and labels[key] in values, "NotIn": key not in labels or labels[key] not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


def _rule_matches(rule: dict[str, Any], group: str, resource: str, operation: str) -> bool:
    return (group in rule["apiGroups"] or "*" in rule["apiGroups"]) and resource in rule["resources"] \
        and (operation in rule["operations"] or "*" in rule["operations"])


def predicted_calls(webhooks: list[dict[str, Any]], username: str, kind: str, operation: str,
                    obj: dict[str, Any], old: dict[str, Any] | None) -> list[str]:
    """The webhooks the stand-in says the API server calls for this request."""
    group, _, resource = request_for(kind, operation)["resource"].values()
    request = {**request_for(kind, operation), "userInfo": {"username": username}}
    namespace_labels = {"kubernetes.io/metadata.name": obj["metadata"]["namespace"]}
    called = []
    for hook in webhooks:
        if not any(_rule_matches(r, group, resource, operation) for r in hook["rules"]):
            continue
        if not _selects(hook.get("namespaceSelector"), namespace_labels):
            continue
        labels = (obj if operation != "DELETE" else old or {}).get("metadata", {}).get("labels", {})
        if not _selects(hook.get("objectSelector"), labels):
            continue
        activation = {"object": obj, "oldObject": old, "request": request}
        if all(bool(evaluate(c["expression"], **activation)) for c in hook.get("matchConditions", [])):
            called.append(hook["name"])
    return called


@pytest.fixture(scope="module")
def installed(cluster):
    """The cluster's webhooks of the add-on (as the API server has them) and who kubectl is."""
    hooks = []
    for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
        for config in cluster.json("get", kind, "-l", "app.kubernetes.io/part-of=kubevirt-ch")["items"]:
            hooks.extend(config["webhooks"])
    username = cluster.json("auth", "whoami")["status"]["userInfo"]["username"]
    return hooks, username


def label(key: str, value: str) -> Change:
    return lambda o: o["metadata"].setdefault("labels", {}).__setitem__(key, value)


def annotate(key: str, value: str | None) -> Change:
    def change(o: dict[str, Any]) -> None:
        annotations = o["metadata"].setdefault("annotations", {})
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
    return change


def at(*path: str, value: Any) -> Change:
    def change(o: dict[str, Any]) -> None:
        for p in path[:-1]:
            o = o.setdefault(p, {})
        if value is None:
            o.pop(path[-1], None)
        else:
            o[path[-1]] = value
    return change


TEMPLATE_SPEC = ("spec", "template", "spec", "terminationGracePeriodSeconds")
POOL_TEMPLATE_SPEC = ("spec", "virtualMachineTemplate", "spec", "template", "spec", "terminationGracePeriodSeconds")
TEMPLATE_ANNOTATION = ("spec", "template", "metadata", "annotations", "kubevirt-ch.io/hypervisor")

CREATES = [
    vmi("cel-ch-vmi"), vmi("cel-plain-vmi", annotations=None), vmi("cel-qemu-vmi", annotations={
        "kubevirt-ch.io/hypervisor": "qemu"}),
    vm("cel-ch-vm"), vm("cel-plain-vm", template_annotations=None), vm("cel-own-vm", template_annotations=None, own=CH),
    replicaset("cel-ch-rs"), pool("cel-ch-pool"),
]

# (the live object's name and kind, what changes) -> sent as `kubectl replace --dry-run=server`
UPDATES: list[tuple[str, str, str, Change]] = [
    ("label", "VirtualMachineInstance", "cel-ch-vmi", label("example.org/a", "b")),
    ("other annotation", "VirtualMachineInstance", "cel-ch-vmi", annotate("example.org/a", "b")),
    ("spec", "VirtualMachineInstance", "cel-ch-vmi", at("spec", "terminationGracePeriodSeconds", value=7)),
    ("selection removed", "VirtualMachineInstance", "cel-ch-vmi", annotate("kubevirt-ch.io/hypervisor", None)),
    ("selection changed", "VirtualMachineInstance", "cel-ch-vmi", annotate("kubevirt-ch.io/hypervisor", "qemu")),
    ("status", "VirtualMachineInstance", "cel-ch-vmi", at("status", "phase", value="Scheduling")),
    ("plain spec", "VirtualMachineInstance", "cel-plain-vmi", at("spec", "terminationGracePeriodSeconds", value=7)),
    ("selection added", "VirtualMachineInstance", "cel-plain-vmi", annotate("kubevirt-ch.io/hypervisor",
                                                                             "cloud-hypervisor")),
    ("run strategy", "VirtualMachine", "cel-ch-vm", at("spec", "runStrategy", value="Always")),
    ("template", "VirtualMachine", "cel-ch-vm", at(*TEMPLATE_SPEC, value=7)),
    ("template selection removed", "VirtualMachine", "cel-ch-vm", at(*TEMPLATE_ANNOTATION, value=None)),
    ("own-annotated template", "VirtualMachine", "cel-own-vm", at(*TEMPLATE_SPEC, value=7)),
    ("own-annotated label", "VirtualMachine", "cel-own-vm", label("example.org/a", "b")),
    ("plain template", "VirtualMachine", "cel-plain-vm", at(*TEMPLATE_SPEC, value=7)),
    ("replicas", "VirtualMachineInstanceReplicaSet", "cel-ch-rs", at("spec", "replicas", value=5)),
    ("template", "VirtualMachineInstanceReplicaSet", "cel-ch-rs", at(*TEMPLATE_SPEC, value=7)),
    ("replicas", "VirtualMachinePool", "cel-ch-pool", at("spec", "replicas", value=5)),
    ("template", "VirtualMachinePool", "cel-ch-pool", at(*POOL_TEMPLATE_SPEC, value=7)),
]


def observed_calls(cluster, args: tuple[str, ...], obj: dict[str, Any]) -> tuple[int, str]:
    before = reviews(cluster)
    r = cluster.kubectl(*args, "--dry-run=server", "-f", "-", input=json.dumps(obj))
    return reviews(cluster) - before, r.out


def test_the_cel_stand_in_calls_exactly_the_webhooks_the_api_server_calls(cluster, installed):
    hooks, username = installed
    table = []
    for obj in CREATES:
        calls, out = observed_calls(cluster, ("create",), obj)
        expected = predicted_calls(hooks, username, obj["kind"], "CREATE", obj, None)
        table.append((f"create {obj['kind']} {obj['metadata']['name']}", calls, expected, out))
    cluster.ok("create", "-f", "-", input=cluster.yaml(CREATES))
    owner = cluster.json("get", "vmi", "cel-ch-vmi")
    plain_owner = cluster.json("get", "vmi", "cel-plain-vmi")
    hotplug = launcher_pod(owner)  # virt-controller's attachment pod for a hotplugged volume
    hotplug["metadata"].update(generateName="hp-volume-", labels={"kubevirt.io": "hotplug-disk"})
    for pod in (launcher_pod(owner), launcher_pod(plain_owner), hotplug):
        calls, out = observed_calls(cluster, ("create",), pod)
        expected = predicted_calls(hooks, username, "Pod", "CREATE", pod, None)
        table.append((f"create pod {pod['metadata']['generateName']}", calls, expected, out))
    for what, kind, name, change in UPDATES:
        old = cluster.json("get", RESOURCE[kind], name)
        new = copy.deepcopy(old)
        change(new)
        calls, out = observed_calls(cluster, ("replace",), new)
        expected = predicted_calls(hooks, username, kind, "UPDATE", new, old)
        table.append((f"update {kind} {name}: {what}", calls, expected, out))
    wrong = [f"{what}: the API server called {calls}, the stand-in predicts {expected}\n  kubectl: {out.strip()}"
             for what, calls, expected, out in table if calls != len(expected)]
    assert not wrong, "\n".join(wrong)
    # the table is not trivial: both answers occur for both operations
    assert {(w.split()[0], c > 0) for w, c, _, _ in table} == {("create", True), ("create", False),
                                                              ("update", True), ("update", False)}
