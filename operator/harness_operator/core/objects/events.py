"""The body of a core/v1 Event about one of our objects, as `kubectl describe` shows it (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from harness_operator.api.common import GROUP, VERSION

MESSAGE_LIMIT = 1024


@dataclass(frozen=True)
class PlannedEvent:
    """An Event a pure decision asks the controller to post on its object."""

    type: str
    reason: str
    message: str
    name: str | None = None  # fixed: posted once however often the object is reconciled


def build_event(
    obj: dict[str, Any],
    kind: str,
    type_: str,
    reason: str,
    message: str,
    component: str,
    now: datetime,
    name: str | None = None,
) -> dict[str, Any]:
    """The Event on `obj` (of `kind`) posted by `component`; one `name`d is the same Event each time it is
    built (so it is posted once), else the API server names it after the object."""
    meta = obj["metadata"]
    names = {"name": name} if name else {"generateName": f"{meta['name']}."}
    involved = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": kind,
        "name": meta["name"],
        "namespace": meta["namespace"],
    }
    if meta.get("uid") is not None:
        involved["uid"] = meta["uid"]
    return {
        "metadata": {"namespace": meta["namespace"], **names},
        "involvedObject": involved,
        "type": type_,
        "reason": reason,
        "message": message[:MESSAGE_LIMIT],
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "source": {"component": component},
        "reportingComponent": component,
    }
