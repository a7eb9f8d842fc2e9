"""A HarnessRun's status from its attempts' result documents (pure; `harnessctl run --status-file`)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from harness_operator.api.v1alpha1 import (
    Attempt,
    Condition,
    HarnessRunStatus,
    OutputStatus,
    Phase,
    Usage,
)
from harness_operator.runner.cost import sum_usage

EXCERPT_CHARS = 2000


def build_excerpt(output: bytes, limit: int = EXCERPT_CHARS) -> str:
    """The first `limit` characters of the output."""
    text = output.decode("utf-8", "replace")
    return text if len(text) <= limit else text[:limit]


def build_attempt(doc: dict[str, Any]) -> Attempt:
    """status.attempts[] entry from one result document."""
    usage = doc.get("usage")
    return Attempt(
        index=int(doc.get("attempt", 0)),
        provider=str(doc.get("provider", "")),
        start_time=doc.get("startTime"),
        completion_time=doc.get("completionTime"),
        exit_code=doc.get("exitCode"),
        reason=doc.get("reason"),
        message=doc.get("message") or None,
        model=doc.get("model"),
        session_id=doc.get("sessionID"),
        usage=Usage.model_validate(usage) if isinstance(usage, dict) else None,
        cli_version=doc.get("cliVersion"),
    )


def build_accepted_condition(accepted: bool, reason: str, message: str, now: str) -> Condition:
    return Condition(
        type="Accepted",
        status="True" if accepted else "False",
        reason=reason,
        message=message,
        last_transition_time=now,
    )


def build_run_status(
    docs: Sequence[dict[str, Any]],
    output: bytes | None,
    *,
    start_time: str | None,
    completion_time: str,
) -> HarnessRunStatus:
    """The final status once the attempts are over: the last attempt decides the outcome."""
    attempts = [build_attempt(d) for d in docs]
    last: dict[str, Any] = (
        docs[-1] if docs else {"exitCode": 1, "reason": "SetupFailed", "message": "no attempt ran"}
    )
    exit_code = int(last.get("exitCode", 1))
    reason = last.get("reason")
    succeeded = exit_code == 0 and not reason
    final_reason = "Succeeded" if succeeded else str(reason or "ProviderFailed")
    if succeeded:
        message = f"attempt {last.get('attempt')}/{len(docs)} with {last.get('provider')} succeeded"
    else:
        message = str(last.get("message") or final_reason)
    phase = (
        Phase.succeeded if succeeded else (Phase.cancelled if final_reason == "Cancelled" else Phase.failed)
    )
    out = None
    if succeeded and output is not None:
        out_doc = last.get("output") or {}
        out = OutputStatus(
            excerpt=build_excerpt(output),
            bytes=len(output),
            sha256=hashlib.sha256(output).hexdigest(),
            truncated=bool(out_doc.get("truncated", False)),
        )
    return HarnessRunStatus(
        phase=phase,
        conditions=[
            build_accepted_condition(
                True, "ProviderResolved", "spec valid, provider resolved", completion_time
            ),
            Condition(
                type="Succeeded",
                status="True" if succeeded else "False",
                reason=final_reason,
                message=message,
                last_transition_time=completion_time,
            ),
        ],
        start_time=start_time,
        completion_time=completion_time,
        exit_code=exit_code,
        reason=final_reason,
        message=message,
        attempts=attempts,
        usage=sum_usage([a.usage for a in attempts if a.usage is not None]) if attempts else None,
        output=out,
    )


def build_rejected_status(reason: str, message: str, now: str) -> HarnessRunStatus:
    """A run that never started: Accepted False (e.g. UnknownProvider), Succeeded False."""
    return HarnessRunStatus(
        phase=Phase.failed,
        conditions=[
            build_accepted_condition(False, reason, message, now),
            Condition(
                type="Succeeded", status="False", reason=reason, message=message, last_transition_time=now
            ),
        ],
        completion_time=now,
        exit_code=1,
        reason=reason,
        message=message,
    )
