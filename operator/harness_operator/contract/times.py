"""Times as Kubernetes writes them (RFC 3339, UTC, seconds), and the one parser of the times in objects
(pure)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

ISO = "%Y-%m-%dT%H:%M:%SZ"


def timestamp(now: datetime) -> str:
    """RFC 3339 in UTC with seconds, as Kubernetes writes it."""
    return now.strftime(ISO)


def parse_time(value: Any) -> datetime | None:
    """A time from an object ('Z' or an offset, with or without fractions); None when absent or not a
    time with a zone (status can be written by hand)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.astimezone(UTC) if parsed.tzinfo else None


def normalize_time(value: str | None) -> str | None:
    """Any RFC 3339 time in Kubernetes' form (not a time: None)."""
    parsed = parse_time(value)
    return None if parsed is None else timestamp(parsed)
