"""KubeVirt's example VMIs (../shared/reference), as the translator's tests read them."""

from __future__ import annotations

import uuid
from typing import Any

import yaml

from tests.conftest import KUBEVIRT_EXAMPLES


def vmi_of(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The VMI an example object runs: the object itself, or its (nested) VMI template."""
    kind = doc.get("kind")
    spec = doc.get("spec") or {}
    if kind == "VirtualMachineInstance":
        template = doc
    elif kind in ("VirtualMachine", "VirtualMachineInstanceReplicaSet"):
        template = spec.get("template") or {}
    elif kind == "VirtualMachinePool":
        template = ((spec.get("virtualMachineTemplate") or {}).get("spec") or {}).get("template") or {}
    else:
        return None
    metadata = dict(template.get("metadata") or {})
    metadata.setdefault("name", (doc.get("metadata") or {}).get("name", "vmi"))
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "metadata": metadata,
            "spec": template.get("spec") or {}}


def examples() -> list[tuple[str, dict[str, Any]]]:
    """(golden name, VMI) for every example object that holds a VMI; empty without ../shared."""
    if not KUBEVIRT_EXAMPLES.exists():
        return []
    out = []
    for path in sorted(KUBEVIRT_EXAMPLES.glob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
        for i, doc in enumerate(docs):
            vmi = vmi_of(doc)
            if vmi is None:
                continue
            name = path.stem if len(docs) == 1 else f"{path.stem}-{i}"
            # Fixed identity, as the API server would have assigned one.
            vmi["metadata"]["namespace"] = "default"
            vmi["metadata"]["uid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"kubevirt-examples/{name}"))
            out.append((name, vmi))
    return out


EXAMPLES = examples()
