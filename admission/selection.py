"""Which objects the add-on handles, and where their VMI template sits.

The selection is the annotation `kubevirt-ch.io/hypervisor: cloud-hypervisor` on a VMI (docs/admission.md "Selection").
Owners (VirtualMachine, VirtualMachineInstanceReplicaSet, VirtualMachinePool) carry it on the
template that becomes the VMI, or on themselves. Pure; never raises on odd shapes (a field that
is not an object counts as absent).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

ANNOTATION = "kubevirt-ch.io/hypervisor"
VALUE = "cloud-hypervisor"
ANNOTATION_FIELD = f"metadata.annotations[{ANNOTATION}]"  # as k8s field.Path renders a map key

# kind -> path of the VMI template inside the object (empty: the object is the VMI)
TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "VirtualMachineInstance": (),
    "VirtualMachine": ("spec", "template"),
    "VirtualMachineInstanceReplicaSet": ("spec", "template"),
    "VirtualMachinePool": ("spec", "virtualMachineTemplate", "spec", "template"),
}


def get(obj: Any, *path: str) -> Any:
    """`obj[path[0]][path[1]]...`, or None as soon as a level is missing or not an object."""
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def object_at(obj: Any, *path: str) -> dict[str, Any]:
    """The object (dict) at `path`, or {} when it is missing or not an object."""
    found = get(obj, *path)
    return found if isinstance(found, dict) else {}


def annotations_of(obj: Any, *path: str) -> dict[str, Any]:
    """The `metadata.annotations` of the object at `path` ({} when absent or not an object)."""
    return object_at(obj, *path, "metadata", "annotations")


def hypervisor(obj: Any, *path: str) -> str | None:
    """The annotation's value on the object at `path` (None when absent or not a string)."""
    value = annotations_of(obj, *path).get(ANNOTATION)
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class Target:
    """An object's VMI template and how it is selected.

    `prefix` turns the VMI's own field paths into the object's (`spec.template.` for a VM);
    `template` is None when the object has no template object at that path.
    """

    kind: str
    prefix: str
    template: dict[str, Any] | None
    on_template: bool  # the template itself carries the selection
    # Where the owner (or a pool's VM template) carries it when the VMI template does not, e.g.
    # "metadata.annotations"; "" otherwise.
    owner_field: str = ""

    @property
    def on_owner(self) -> bool:
        return bool(self.owner_field)

    @property
    def selected(self) -> bool:
        return self.on_template or self.on_owner


def target(kind: str, obj: Any) -> Target | None:
    """The Target of an object of `kind`, or None for kinds the add-on does not validate."""
    path = TEMPLATE_PATHS.get(kind)
    if path is None:
        return None
    template = get(obj, *path) if path else obj
    template = template if isinstance(template, dict) else None
    on_template = hypervisor(template) == VALUE if template is not None else False
    owners: list[tuple[str, ...]] = [()] if path else []
    if kind == "VirtualMachinePool":
        owners.append(("spec", "virtualMachineTemplate"))
    owner = next((p for p in owners if hypervisor(obj, *p) == VALUE), None)
    owner_field = "" if owner is None or on_template else "".join(f"{p}." for p in owner) + "metadata.annotations"
    prefix = "".join(f"{p}." for p in path)
    return Target(kind, prefix, template, on_template, owner_field)


# `spec`/`metadata` starting a field path: followed by `.`/`[`, or by `:` when the path is the
# field itself (decode errors read "spec: Input should be ...").
_PATH_START = re.compile(r"(?<![\w./\[-])(spec|metadata)(?=[.\[:])")


def prefix_paths(text: str, prefix: str) -> str:
    """Prefix every VMI field path in a message (`spec.domain...` -> `spec.template.spec.domain...`)."""
    if not prefix or not text:
        return text
    return _PATH_START.sub(lambda m: prefix + m.group(1), text)


def prefix_field(field: str, prefix: str) -> str:
    """A cause's field: `""` (no single field) stays `""`."""
    return f"{prefix}{field}" if field and prefix else field
