"""The one error preparation raises."""

from __future__ import annotations


class PreparationError(Exception):
    """A preparation step failed. `field` is the VMI field the step serves
    (`spec.volumes[0].containerDisk`); the message repeats it and names the path involved."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message

    def __repr__(self) -> str:
        return f"PreparationError({self.field!r}, {self.message!r})"
