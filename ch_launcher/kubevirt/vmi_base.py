"""The base of the inbound VMI models (`ch_launcher.kubevirt.vmi`): JSON `null` is "absent",
unknown fields are ignored, `Empty` marks a presence-only block, `Quantity` is a resource quantity
as written (parsed where it is used, by `kubevirt.quantity`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, PlainValidator, model_validator
from pydantic_core import PydanticCustomError


def _quantity(value: Any) -> str | int | float:
    # One check, one message: a plain `str | int | float` union reports a wrong value three
    # times (once per member) and turns `true` into the quantity 1. The text is parsed where it
    # is used (`kubevirt.quantity`), so a malformed one is reported by the translator.
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise PydanticCustomError("quantity", "must be a quantity: a string such as '1Gi', or a number")
    return value


Quantity = Annotated[str | int | float, PlainValidator(_quantity)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=False)

    @model_validator(mode="before")
    @classmethod
    def _drop_nulls(cls, data: Any) -> Any:
        # Go decodes `null` as the zero value; treat it as "absent" so defaults apply.
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data


class Empty(_Model):
    """A presence-only block such as `masquerade: {}` or `rng: {}`."""
