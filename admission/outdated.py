"""`ch-admission outdated [--resync]`: which Cloud Hypervisor VMIs KubeVirt calls outdated, and
which it should (docs/operations.md §7).

A running Cloud Hypervisor VMI should be outdated to KubeVirt exactly when its pod runs another
ch-launcher image than the configuration names (`launcher_status.py`). The webhook decides that
whenever virt-controller writes the VMI; two things can leave a VMI looking otherwise until
virt-controller writes it again (on any event of the VMI or its pod, at the latest at its
informers' resync, 12 to 24 hours):

- an add-on upgrade (a new configured image): VMIs already rewritten as current still look
  current, though their pods run the old image;
- an outage of the webhook (failurePolicy Ignore): VMIs written meanwhile look outdated, though
  their pods run the configured image.

The command reads every Cloud Hypervisor VMI with the caller's kubeconfig (the add-on's own
ServiceAccount may not list or patch VMIs), prints one line per VMI, and exits 1 when one of them
is not as it should be. With `--resync` it removes, from those, the label
`kubevirt.io/outdatedLauncherImage` and the annotation `kubevirt-ch.io/launcher-image` (a
metadata patch any user who may patch VMIs may send; KubeVirt reverts status changes from anyone
but its own service accounts). virt-controller sees the change, writes the VMI again, and the
webhook decides with the configuration now in force. Nothing else is changed.

Pure functions (`rows`, `resync_patch`, `table`) decide; `outdated_main` does the I/O, through
`OperatorClient` (the two calls the server never makes, so they are not in `kube.py`, whose calls
the server's RBAC is checked against).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
from dataclasses import dataclass
from typing import Any

from admission.config import Config, ConfigError, load_config
from admission.launcher_status import IMAGE_ANNOTATION, OUTDATED_LABEL, PATCHED_PHASES
from admission.selection import VALUE, annotations_of, get, hypervisor, object_at

CURRENT, OUTDATED, UNJUDGED = "current", "outdated", "-"
LIST_TIMEOUT = (2.0, 60.0)  # connect, read (seconds): one list of every VMI
PATCH_TIMEOUT = (2.0, 10.0)


@dataclass(frozen=True)
class Row:
    namespace: str
    name: str
    phase: str
    image: str       # the image the pod runs (the annotation, else what virt-controller reported), or ""
    kubevirt: str    # what KubeVirt sees: CURRENT, OUTDATED, or UNJUDGED (not running, image unknown)
    wanted: str      # what the configuration says it should see

    @property
    def mismatch(self) -> bool:
        return UNJUDGED not in (self.kubevirt, self.wanted) and self.kubevirt != self.wanted


def rows(vmis: list[Any], config: Config) -> list[Row]:
    """One Row per Cloud Hypervisor VMI, sorted by namespace and name."""
    out = []
    for vmi in vmis:
        if not isinstance(vmi, dict) or hypervisor(vmi) != VALUE:
            continue
        status = object_at(vmi, "status")
        phase = status.get("phase") if isinstance(status.get("phase"), str) else ""
        image = annotations_of(vmi).get(IMAGE_ANNOTATION)
        if not isinstance(image, str) or not image:
            reported = status.get("launcherContainerImageVersion")
            # without our annotation the webhook never rewrote it: the status is the pod's image
            image = reported if isinstance(reported, str) else ""
        labels = get(vmi, "metadata", "labels")
        labelled = isinstance(labels, dict) and OUTDATED_LABEL in labels
        judged = phase in PATCHED_PHASES and bool(image)
        out.append(Row(
            namespace=str(get(vmi, "metadata", "namespace") or ""), name=str(get(vmi, "metadata", "name") or ""),
            phase=phase or "-", image=image,
            kubevirt=(OUTDATED if labelled else CURRENT) if judged else UNJUDGED,
            wanted=(CURRENT if image == config.launcher.image else OUTDATED) if judged else UNJUDGED))
    return sorted(out, key=lambda r: (r.namespace, r.name))


def resync_patch(vmi: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON Patch that makes virt-controller write the VMI again: its resourceVersion tested
    (a VMI that changed meanwhile is left alone), the label and the annotation removed."""
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/resourceVersion",
                                  "value": get(vmi, "metadata", "resourceVersion")}]
    labels = get(vmi, "metadata", "labels")
    if isinstance(labels, dict) and OUTDATED_LABEL in labels:
        ops.append({"op": "remove", "path": "/metadata/labels/" + OUTDATED_LABEL.replace("/", "~1")})
    if IMAGE_ANNOTATION in annotations_of(vmi):
        ops.append({"op": "remove", "path": "/metadata/annotations/" + IMAGE_ANNOTATION.replace("/", "~1")})
    return ops


def table(found: list[Row]) -> str:
    header = ("NAMESPACE", "NAME", "PHASE", "LAUNCHER IMAGE", "KUBEVIRT SEES", "SHOULD SEE")
    lines = [header] + [(r.namespace, r.name, r.phase, r.image or "-", r.kubevirt, r.wanted) for r in found]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    rows = ("   ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines)
    return "\n".join(rows) + "\n"


class OperatorClient:
    """List and patch VMIs with the caller's credentials; failures raise `KubeError`."""

    def __init__(self, kube: Any):
        self.custom = kube.custom

    def list_vmis(self) -> list[dict[str, Any]]:
        """Every VMI of the cluster (one list call; a long read timeout)."""
        from admission.kube import _error
        try:
            found = self.custom.list_cluster_custom_object("kubevirt.io", "v1", "virtualmachineinstances",
                                                           _request_timeout=LIST_TIMEOUT)
        except Exception as e:  # noqa: BLE001
            raise _error("list VirtualMachineInstances", e) from None
        items = found.get("items") if isinstance(found, dict) else None
        return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []

    def patch_vmi(self, namespace: str, name: str, patch: list[dict[str, Any]]) -> None:
        """A JSON Patch of one VMI. The content type is named: kubernetes-client 37 sends every
        custom-object patch as a merge patch (the API server answers 400 to a list body)."""
        from admission.kube import _error
        try:
            self.custom.patch_namespaced_custom_object("kubevirt.io", "v1", namespace, "virtualmachineinstances",
                                                       name, patch, _request_timeout=PATCH_TIMEOUT,
                                                       _content_type="application/json-patch+json")
        except Exception as e:  # noqa: BLE001
            raise _error(f"patch VirtualMachineInstance {namespace}/{name}", e) from None


def outdated_main(ns: argparse.Namespace) -> int:
    """Exit 0: every VMI looks as it should; 1: some do not (after --resync: a patch failed); 2: usage."""
    from admission.kube import KubeClient, KubeError
    try:
        config = load_config(ns.config)
    except ConfigError as e:
        print(f"ch-admission outdated: {e}", file=sys.stderr)
        return 2
    kubeconfig = ns.kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    if not kubeconfig and (pathlib.Path.home() / ".kube" / "config").exists():
        kubeconfig = str(pathlib.Path.home() / ".kube" / "config")
    try:
        client = KubeClient.auto(kubeconfig)
        if client is None:
            print("ch-admission outdated: no Kubernetes API (--kubeconfig, $KUBECONFIG, ~/.kube/config, "
                  "or run in a pod)", file=sys.stderr)
            return 2
        kube = OperatorClient(client)
        vmis = kube.list_vmis()
    except KubeError as e:
        print(f"ch-admission outdated: {e.message}", file=sys.stderr)
        return 2
    found = rows(vmis, config)
    sys.stdout.write(table(found))
    wrong = [r for r in found if r.mismatch]
    if not wrong:
        return 0
    if not ns.resync:
        print(f"{len(wrong)} VMI(s) do not look to KubeVirt as the configuration says; "
              f"`ch-admission outdated --resync` makes virt-controller write them again", file=sys.stderr)
        return 1
    by_key = {(get(v, "metadata", "namespace"), get(v, "metadata", "name")): v for v in vmis if isinstance(v, dict)}
    failed = 0
    for r in wrong:
        try:
            kube.patch_vmi(r.namespace, r.name, resync_patch(by_key[(r.namespace, r.name)]))
            print(f"resynced {r.namespace}/{r.name}")
        except KubeError as e:
            failed += 1
            print(f"ch-admission outdated: {r.namespace}/{r.name}: {e.message}", file=sys.stderr)
    return 1 if failed else 0
