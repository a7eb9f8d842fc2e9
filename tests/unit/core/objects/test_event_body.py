"""The Event body (core/objects/events.py): what the API server is sent is what the client's own
CoreV1Event model serializes to; a named Event keeps its name, else it is named after the object."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from harness_operator.api.common import GROUP, VERSION
from harness_operator.core.objects.events import MESSAGE_LIMIT, build_event

NOW = datetime(2026, 1, 2, 3, 4, 5, 6789, tzinfo=UTC)


def model_body(meta: dict[str, Any], kind: str, message: str, name: str | None) -> Any:
    names = {"name": name} if name else {"generate_name": f"{meta['name']}."}
    return client.CoreV1Event(
        metadata=client.V1ObjectMeta(namespace=meta["namespace"], **names),
        involved_object=client.V1ObjectReference(
            api_version=f"{GROUP}/{VERSION}",
            kind=kind,
            name=meta["name"],
            namespace=meta["namespace"],
            uid=meta.get("uid"),
        ),
        type="Warning",
        reason="Failed",
        message=message[:1024],
        first_timestamp=NOW,
        last_timestamp=NOW,
        count=1,
        source=client.V1EventSource(component="harness-operator"),
        reporting_component="harness-operator",
    )


@pytest.mark.parametrize("name", [None, "fix-1.published"])
@pytest.mark.parametrize("uid", [None, "uid-1"])
@pytest.mark.parametrize("message", ["short", "x" * (MESSAGE_LIMIT + 50)])
def test_the_body_sent_is_the_client_models(name: str | None, uid: str | None, message: str) -> None:
    meta: dict[str, Any] = {"name": "fix-1", "namespace": "team-a"}
    if uid:
        meta["uid"] = uid
    built = build_event(
        {"metadata": meta}, "HarnessRun", "Warning", "Failed", message, "harness-operator", NOW, name
    )
    serialize = client.ApiClient().sanitize_for_serialization
    assert serialize(built) == serialize(model_body(meta, "HarnessRun", message, name))
    assert len(built["message"]) <= MESSAGE_LIMIT
    assert built["metadata"].get("name", built["metadata"].get("generateName")) == (name or "fix-1.")
