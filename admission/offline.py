"""`ch-admission check` and `ch-admission overhead`: the webhook's rules on files, offline.

Both read YAML or JSON (several `---` documents per file; `-` is standard input) and never
touch a cluster. `check` sends every VMI-bearing object (VMI, VM, VMI replica set, VM pool)
through the same `rules.validate()` the server uses, as a CREATE (a VMI with the defaults
KubeVirt's virt-api writes first: admission/kubevirt_defaults.py), and prints the verdict, each
cause's field path and each warning; exit status 1 when any object is denied, 2 when a file
cannot be read or is not what `kubectl apply -f` takes: no object at all (an empty file), a
document that is not an object (a YAML list, a bare string), an object without kind or
apiVersion. Nothing is printed on standard output then; the error names the document.
Without a cluster, `check` does not know which host-device resources are USB and warns about
every `hostDevices` entry; `--kubevirt-cr FILE` (the cluster's KubeVirt CR, e.g. `kubectl get
kubevirt -n kubevirt kubevirt -o yaml`) tells it, as the server's read of the CR tells the
webhook, so a USB one is refused as the webhook refuses it (the CR's KubeVirt version gates
nothing offline). A file without exactly one KubeVirt is an input error (exit 2).
A VirtualMachineInstanceMigration is judged as the migration webhook judges it
(`admission/migrations.py`) against the VMI of its `spec.vmiName` among the files (same
namespace; `--all` selects that VMI too); without that VMI it is skipped, saying so. Offline the
VMI has no status, so what only a running VMI's status says (a PVC's access mode, hotplugged
volumes) is not known.
`overhead` prints, per VMI (owners: their template; both with virt-api's defaults, as the VMI is
stored), the Cloud Hypervisor overhead beside
KubeVirt's QEMU figure term by term, their totals and ratio (the same input errors: exit 2).
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Iterator
from typing import Any, TextIO

import yaml

from admission import migrations
from admission.cluster import KubeVirtStatus
from admission.config import Config, ConfigError, load_config
from admission.kubevirt_defaults import with_virt_api_defaults
from admission.overhead import KUBEVIRT_CONSTANTS, ROWS, CHSettings, ch_overhead, kubevirt_overhead, plan_of
from admission.review import parse_review
from admission.rules import validate, vmi_from_template
from admission.selection import ANNOTATION, TEMPLATE_PATHS, VALUE, object_at, target
from ch_launcher.kubevirt.quantity import MiB
from ch_launcher.kubevirt.vmi import InvalidVMI, parse_vmi


class InputError(Exception):
    pass


def documents(path: str) -> Iterator[tuple[str, Any]]:
    """(label, document) for each document of a YAML or JSON file. Raises InputError."""
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read: {e}") from None
    try:
        docs = list(yaml.safe_load_all(text))  # JSON is YAML
    except yaml.YAMLError as e:
        raise InputError(f"{path}: not valid YAML or JSON: {e}".replace("\n", " ")) from None
    for i, doc in enumerate(docs):
        if doc is None:  # an empty document (`---` with nothing, or only comments)
            continue
        _require_object(f"{path}#{i}", doc)
        if not _kind(doc).endswith("List"):
            yield f"{path}#{i}", doc
            continue
        items = doc.get("items")
        if not isinstance(items, list):
            raise InputError(f"{path}#{i}: a {doc['kind']} whose items is not a list")
        for j, item in enumerate(items):
            _require_object(f"{path}#{i}.items[{j}]", item)
            yield f"{path}#{i}.items[{j}]", item


def _require_object(label: str, doc: Any) -> None:
    """As `kubectl apply -f` refuses them: a document that is not a mapping (a YAML list, a bare
    string), or one without a string kind and apiVersion."""
    if isinstance(doc, list):
        raise InputError(f"{label}: a YAML list is not a Kubernetes object; write one object per document "
                         f"(separated by ---) or a List with items")
    if not isinstance(doc, dict):
        raise InputError(f"{label}: {type(doc).__name__} {doc!r} is not a Kubernetes object")
    for key in ("apiVersion", "kind"):
        if not isinstance(doc.get(key), str) or not doc[key]:
            raise InputError(f"{label}: not a Kubernetes object: {key} not set")


def _kind(doc: Any) -> str:
    """The document's kind, or "" when it is not an object or its kind is not a string."""
    kind = doc.get("kind") if isinstance(doc, dict) else None
    return kind if isinstance(kind, str) else ""


def _name(doc: Any) -> str:
    if not isinstance(doc, dict):
        return "?"
    meta = object_at(doc, "metadata")
    return f"{doc.get('kind', '?')} {meta.get('name') or meta.get('generateName') or '?'}"


def _review(doc: dict[str, Any]) -> dict[str, Any]:
    meta = object_at(doc, "metadata")
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "offline", "kind": {"kind": doc.get("kind", "")}, "operation": "CREATE",
        "namespace": meta.get("namespace") or "default", "name": meta.get("name", ""), "object": doc}}


def _select(doc: dict[str, Any]) -> dict[str, Any]:
    """A copy of an object with the selection set where its VMI template carries it (for --all)."""
    out = copy.deepcopy(doc)
    node: Any = out
    for key in TEMPLATE_PATHS[doc["kind"]]:
        node = node.setdefault(key, {}) if isinstance(node, dict) else {}
    if isinstance(node, dict):
        meta = node.setdefault("metadata", {})
        if isinstance(meta, dict):
            anns = meta.setdefault("annotations", {})
            if isinstance(anns, dict):
                anns[ANNOTATION] = VALUE
    return out


def _inputs(ns: argparse.Namespace, kinds: tuple[str, ...] = ()) -> tuple[Config, list[tuple[str, dict[str, Any]]]]:
    """The configuration and every VMI-bearing object (VMI, VM, replica set, pool; and of
    `kinds`) of the files, all read before anything is printed. Raises InputError (exit 2)
    naming the file."""
    try:
        config = load_config(ns.config)
    except ConfigError as e:
        raise InputError(str(e)) from None
    every = [(label, doc) for path in ns.files for label, doc in documents(path)]
    if not every:
        raise InputError(f"no objects passed to {ns.command} (as kubectl says of an empty file)")
    objects = [(label, doc) for label, doc in every if _kind(doc) in TEMPLATE_PATHS or _kind(doc) in kinds]
    return config, objects


def kubevirt_cr(path: str) -> KubeVirtStatus:
    """The KubeVirt CR in a file (alone, in a List, or among other objects). Raises InputError
    unless there is exactly one."""
    found = [(label, doc) for label, doc in documents(path) if _kind(doc) == "KubeVirt"]
    if len(found) != 1:
        where = "none" if not found else ", ".join(label for label, _ in found)
        raise InputError(f"{path}: --kubevirt-cr takes a file with the cluster's one KubeVirt object, found {where}")
    return KubeVirtStatus.from_cr(found[0][1])


def _namespaced(doc: dict[str, Any]) -> tuple[str, str]:
    meta = object_at(doc, "metadata")
    namespace, name = meta.get("namespace") or "default", meta.get("name") or ""
    return (namespace if isinstance(namespace, str) else "default", name if isinstance(name, str) else "")


def _check_migration(label: str, vmim: dict[str, Any], vmis: dict[tuple[str, str], dict[str, Any]],
                     select: bool, out: TextIO) -> bool | None:
    """Print the verdict on a migration; True when denied, False when allowed, None when skipped."""
    request = parse_review(_review(vmim))
    wanted = migrations.wants_vmi(request)
    if not isinstance(wanted, migrations.VMIName):
        verdict = wanted.verdict
        if verdict == "invalid":
            print(f"{label}: {_name(vmim)}: DENIED\n  {wanted.review['response']['status']['message']}", file=out)
            return True
        print(f"{label}: {_name(vmim)}: nothing to judge ({verdict}); skipped", file=out)
        return None
    vmi = vmis.get((wanted.namespace or "default", wanted.name))
    if vmi is None:
        print(f"{label}: {_name(vmim)}: its VMI {wanted.namespace or 'default'}/{wanted.name} is not among the files "
              "(the webhook reads it from the cluster); skipped", file=out)
        return None
    outcome = migrations.decide(request, with_virt_api_defaults(_select(vmi) if select else vmi))
    if outcome.verdict == "ignored":
        print(f"{label}: {_name(vmim)}: its VMI {wanted.name} is not selected for Cloud Hypervisor ({ANNOTATION}: "
              f"{VALUE}); skipped", file=out)
        return None
    response = outcome.review["response"]
    if response["allowed"]:
        print(f"{label}: {_name(vmim)}: allowed", file=out)
        return False
    print(f"{label}: {_name(vmim)}: DENIED\n  {response['status']['message']}", file=out)
    return True


def check_main(ns: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    try:
        config, objects = _inputs(ns, (migrations.KIND,))
        kubevirt = kubevirt_cr(ns.kubevirt_cr) if ns.kubevirt_cr else None
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    denied = checked = 0
    vmis = {_namespaced(doc): doc for _, doc in objects if _kind(doc) == "VirtualMachineInstance"}
    for label, given in objects:
        if _kind(given) == migrations.KIND:
            judged = _check_migration(label, given, vmis, ns.all, out)
            if judged is not None:
                checked += 1
                denied += judged
            continue
        doc = _select(given) if ns.all else given
        t = target(doc["kind"], doc)
        if t is None or not t.selected:
            print(f"{label}: {_name(doc)}: not selected for Cloud Hypervisor ({ANNOTATION}: {VALUE}); "
                  f"skipped", file=out)
            continue
        checked += 1
        # a VMI as virt-api writes it before the webhook sees it
        default = kubevirt.eviction_strategy if kubevirt is not None else ""
        seen = with_virt_api_defaults(doc, default) if doc["kind"] == "VirtualMachineInstance" else doc
        response = validate(parse_review(_review(seen)), config, kubevirt, version_gate=False).review["response"]
        if response["allowed"]:
            print(f"{label}: {_name(seen)}: allowed", file=out)
        else:
            denied += 1
            print(f"{label}: {_name(seen)}: DENIED", file=out)
            status = response["status"]
            for cause in status.get("details", {}).get("causes", []):
                print(f"  {cause.get('field') or '-'}: {cause['type']}: {cause['message']}", file=out)
            if "more validation errors" in status.get("message", ""):
                print(f"  ... {status['message'].rsplit(', and ', 1)[1]}", file=out)
        for warning in response.get("warnings", []):
            print(f"  warning: {warning}", file=out)
    print(f"{checked} checked, {denied} denied", file=out)
    return 1 if denied else 0


def _mib(n: int) -> str:
    return f"{n / MiB:9.1f}"


def overhead_table(vmi_doc: dict[str, Any], config: Config, kubevirt: str = "main", arch: str = "amd64") -> str:
    """The comparison table for one VMI document (raises InvalidVMI if it does not decode,
    ValueError if Cloud Hypervisor cannot run it)."""
    vmi = parse_vmi(vmi_doc)
    settings = CHSettings.from_mib(config.overhead.launcherMiB, config.overhead.vmmMiB)
    ch = ch_overhead(vmi, plan_of(vmi), settings=settings, arch=arch, ratio=config.overhead.ratio)
    kv = kubevirt_overhead(vmi, constants=KUBEVIRT_CONSTANTS[kubevirt], arch=arch, ratio=config.overhead.ratio)
    width = max(len(r.label) for r in ROWS)
    lines = [f"{'term':<{width}}  {'CH MiB':>9}  {'QEMU MiB':>9}"]
    lines.extend(f"{row.label:<{width}}  {_mib(ch[row.key])}  {_mib(kv[row.key])}"
                 for row in ROWS if ch[row.key] or kv[row.key])
    lines.append(f"{'total':<{width}}  {_mib(ch.total)}  {_mib(kv.total)}")
    ratio = kv.total / ch.total if ch.total else float("inf")
    lines.append(f"Cloud Hypervisor needs {ch.total} bytes, KubeVirt {kubevirt} reserves {kv.total} bytes for QEMU: "
                 f"{ratio:.2f}x less ({ch.total / kv.total:.0%} of QEMU's)")
    return "\n".join(lines)


def overhead_main(ns: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    try:
        config, objects = _inputs(ns)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    status, shown = 0, 0
    for label, doc in objects:
        t = target(doc["kind"], doc)
        vmi_doc = vmi_from_template(t, "default") if t is not None else None
        vmi_doc = with_virt_api_defaults(vmi_doc)  # as the VMI is stored (virt-controller renders from it)
        print(f"{label}: {_name(doc)}", file=out)
        try:
            if vmi_doc is None:
                raise InvalidVMI("no VMI template")
            print(overhead_table(vmi_doc, config, ns.kubevirt, ns.arch), file=out)
            shown += 1
        except (InvalidVMI, ValueError) as e:
            print(f"  error: {e}", file=out)
            status = 1
        print(file=out)
    if shown == 0 and status == 0:
        print("no VirtualMachineInstance (or VM, replica set, pool) found", file=sys.stderr)
        return 1
    return status

