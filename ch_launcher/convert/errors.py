"""What the translator reports: problems (the VMI cannot run) and degradations (it runs, with less).

Shaped like KubeVirt's admission causes (`metav1.StatusCause{type, message, field}`) so the
webhook can pass them through unchanged. Messages repeat the field path, as KubeVirt's own do,
because `kubectl` prints only the joined message, not the causes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Reason = Literal["FieldValueNotSupported", "FieldValueInvalid", "FieldValueRequired", "FieldValueNotFound"]


def naming_field(field_path: str, message: str) -> str:
    """`message` as one line that names its field: `"<field>: <message>"`, unless the message
    names it already or there is no single field. The rule for every text a user reads alone
    (kubectl prints a warning's text only; virt-handler shows a failed Sync's message only)."""
    return message if not field_path or field_path in message else f"{field_path}: {message}"


class UnsupportedFeature(Exception):
    """One thing about a VMI that the Cloud Hypervisor backend cannot honour.

    `field` is a KubeVirt field path (`spec.domain.devices.disks[1].cdrom`), or `""` when the
    problem has no single field; `reason` is the StatusCause type.
    """

    def __init__(self, field: str, message: str, reason: Reason = "FieldValueNotSupported"):
        super().__init__(message)
        self.field = field
        self.message = message
        self.reason: Reason = reason

    def __repr__(self) -> str:
        return f"UnsupportedFeature({self.field!r}, {self.message!r}, {self.reason!r})"

    @property
    def text(self) -> str:
        """The message naming its field (`naming_field`)."""
        return naming_field(self.field, self.message)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, UnsupportedFeature) and not isinstance(other, UnsupportedFeatures)
                and (self.field, self.message, self.reason) == (other.field, other.message, other.reason))

    def __hash__(self) -> int:
        return hash((self.field, self.message, self.reason))


class UnsupportedFeatures(UnsupportedFeature):
    """Every problem of one VMI at once, in the order the translator found them."""

    def __init__(self, problems: list[UnsupportedFeature]):
        if not problems:
            raise ValueError("UnsupportedFeatures needs at least one problem")
        first = problems[0]
        super().__init__(first.field, ", ".join(p.message for p in problems), first.reason)
        self.problems = list(problems)

    def __repr__(self) -> str:
        return f"UnsupportedFeatures({self.problems!r})"


@dataclass(frozen=True)
class Degradation:
    """A feature that runs with reduced fidelity; the webhook shows it as a warning."""

    field: str
    message: str

    @property
    def text(self) -> str:
        """The message naming its field (`naming_field`)."""
        return naming_field(self.field, self.message)
