"""The base of the inbound VMI models (`ch_launcher.kubevirt.vmi`): records of `ch_launcher.jsonmodel`
(JSON `null` is "absent", unknown fields are ignored), `Empty` marks a presence-only block,
`Quantity` is a resource quantity as written (parsed where it is used, by `kubevirt.quantity`)."""

from __future__ import annotations

from typing import Annotated, Any

from ch_launcher.jsonmodel import Check, Record


def _quantity(value: Any) -> str | int | float:
    # One check, one message: a plain `str | int | float` union reports a wrong value with
    # every member's message and would take `true` for the quantity 1. The text is parsed where
    # it is used (`kubevirt.quantity`), so a malformed one is reported by the translator.
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError("must be a quantity: a string such as '1Gi', or a number")
    return value


Quantity = Annotated[str | int | float, Check(_quantity)]


class _Model(Record):
    """An inbound VMI model: unknown fields ignored (upstream adds fields with every release)."""


class Empty(_Model):
    """A presence-only block such as `masquerade: {}` or `rng: {}`."""
