"""The standard conditions GitOps tools read, as the operator writes them on the real cluster: runs carry
Ready/Reconciling/Stalled next to Succeeded, definitions carry Ready (and Stalled when unusable)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness_operator.api.v1alpha1 import GROUP, VERSION

from .conftest import Api, wait_until
from .operator_env import run_body


def conditions(obj: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in (obj.get("status") or {}).get("conditions", [])}


def definition(api: Api, name: str) -> dict[str, Any]:
    return api.custom.get_namespaced_custom_object(GROUP, VERSION, api.ns, "harnessdefinitions", name)


def test_definitions_get_ready_acp_ones_too(api: Api, fake: Callable[..., None]) -> None:
    fake("usable", "ok")
    fake("acp-only", "ok", protocol="acp")
    wait_until(lambda: "Ready" in conditions(definition(api, "usable")), timeout=30, what="usable's Ready")
    wait_until(lambda: "Ready" in conditions(definition(api, "acp-only")), timeout=30, what="acp's Ready")
    usable, acp = definition(api, "usable"), definition(api, "acp-only")
    assert conditions(usable) == {"Ready": ("True", "Valid")}
    assert usable["status"]["observedGeneration"] == usable["metadata"]["generation"]
    assert conditions(acp) == {"Ready": ("True", "Valid")}  # ACP runs have a runner (issue 11)


def test_run_conditions_from_waiting_to_stalled(api: Api, fake: Callable[..., None]) -> None:
    """A run waiting for another run's output is Reconciling; a failed run is Stalled with its reason."""
    fake("broken", "fail")
    source = {"runOutput": {"name": "first"}}
    api.create(run_body("second", {"provider": "broken", "promptFrom": source}))
    wait_until(
        lambda: conditions(api.run("second")).get("Reconciling") == ("True", "WaitingForRunOutput"),
        timeout=30,
        what="second to wait for first",
    )
    waiting = conditions(api.run("second"))
    assert waiting["Ready"] == ("False", "WaitingForRunOutput") and "Stalled" not in waiting
    api.create(run_body("first", {"provider": "broken", "prompt": "x"}))
    status = api.wait_finished("first")
    assert status["phase"] == "Failed", status
    failed = conditions(api.run("first"))
    reason = status["reason"]
    assert failed["Ready"] == ("False", reason) and failed["Stalled"] == ("True", reason)
    assert "Reconciling" not in failed
    api.wait_finished("second")
    assert conditions(api.run("second"))["Stalled"] == ("True", "RunOutputFailed")
