"""`metav1.Time` as Go encodes it. Its own module, so that the Domain view and the migration
metadata (which the view carries) both use it without importing each other."""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(when: datetime | str) -> str:
    """A `metav1.Time` as Go encodes it: RFC 3339, UTC, whole seconds (`2026-08-22T10:00:00Z`).

    Accepts an aware datetime, a naive one (taken as UTC), or an RFC 3339 string (re-encoded in
    UTC). Raises ValueError for a string that is not RFC 3339.
    """
    if isinstance(when, str):
        try:
            parsed = datetime.fromisoformat(when.replace("z", "Z"))
        except ValueError:
            raise ValueError(f"not an RFC 3339 time: {when!r}") from None
        if parsed.tzinfo is None:
            raise ValueError(f"RFC 3339 time without a zone: {when!r}")
        when = parsed
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    u = when.astimezone(UTC)
    # Formatted by hand: strftime's %Y does not zero-pad years below 1000 on glibc.
    return f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}Z"


def now_rfc3339() -> str:
    """The current time as a `metav1.Time` string."""
    return rfc3339(datetime.now(UTC))
