"""The attempt's result document and its termination-message form, kept under 4 KiB (pure)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

TERMINATION_LIMIT = 4096
RESULT_VERSION = 1
EXIT_SETUP = 1
EXIT_STOPPED = 124
NETWORK_NOT_CONFINED = "NetworkNotConfined"
# Reasons after which no fallback runs (the user, a limit or the cluster stopped the run, not the provider).
NO_FALLBACK_REASONS = frozenset({"Timeout", "Cancelled", "CostLimitExceeded", NETWORK_NOT_CONFINED})


def build_result_doc(
    *,
    attempt: int,
    provider: str,
    exit_code: int,
    reason: str | None,
    message: str,
    usage: dict[str, Any],
    model: str | None,
    session_id: str | None,
    output: bytes,
    output_bytes: int,
    truncated: bool,
    agent_exit_code: int | None = None,
    cli_version: str | None = None,
    start_time: str | None = None,
    completion_time: str | None = None,
) -> dict[str, Any]:
    """The result of one attempt, camelCase like the API; `output.sha256` covers the bytes kept."""
    doc: dict[str, Any] = {
        "version": RESULT_VERSION,
        "attempt": attempt,
        "provider": provider,
        "exitCode": exit_code,
        "reason": reason,
        "message": message,
        "agentExitCode": agent_exit_code,
        "usage": usage,
        "model": model,
        "sessionID": session_id,
        "output": {
            "bytes": len(output),
            "totalBytes": output_bytes,
            "sha256": hashlib.sha256(output).hexdigest(),
            "truncated": truncated,
        },
        "cliVersion": cli_version,
        "startTime": start_time,
        "completionTime": completion_time,
    }
    return {k: v for k, v in doc.items() if v is not None}


def fallback_line(attempt: int, total: int, failed: str, next_provider: str) -> str:
    """Dagu's line, on stderr locally and as the Event and status message in the cluster."""
    return (
        f"harness: attempt {attempt}/{total} with {failed} failed; "
        f"trying fallback {attempt + 1}/{total} with {next_provider}"
    )


def is_fallback_allowed(doc: dict[str, Any]) -> bool:
    """The operator's rule too: another provider only after a non-zero exit that no limit, timeout or
    cancel caused."""
    return int(doc.get("exitCode", 1)) != 0 and doc.get("reason") not in NO_FALLBACK_REASONS


def _dump(doc: dict[str, Any]) -> str:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def _fits(doc: dict[str, Any], limit: int) -> bool:
    return len(_dump(doc).encode("utf-8")) <= limit


# Dropped in this order until the message fits; exitCode, reason and output.sha256 always stay.
_OPTIONAL = ("cliVersion", "startTime", "completionTime", "sessionID", "model", "agentExitCode", "usage")


def render_termination_message(doc: dict[str, Any], limit: int = TERMINATION_LIMIT) -> str:
    """Compact JSON of `doc`, never over `limit` bytes: the message is cut first, then optional fields
    go, then only the essentials remain."""
    out = dict(doc)
    if _fits(out, limit):
        return _dump(out)
    message = str(out.get("message", ""))
    while message and not _fits(out, limit):
        message = message[: max(0, len(message) - max(16, len(message) // 4))]
        out["message"] = message + "..." if message else ""
    for key in _OPTIONAL:
        if _fits(out, limit):
            return _dump(out)
        out.pop(key, None)
    if _fits(out, limit):
        return _dump(out)
    output = doc.get("output") or {}
    essentials = {
        "version": doc.get("version", RESULT_VERSION),
        "exitCode": doc.get("exitCode"),
        "reason": str(doc.get("reason") or "")[:64] or None,
        "output": {"sha256": output.get("sha256"), "bytes": output.get("bytes")},
    }
    return _dump({k: v for k, v in essentials.items() if v is not None})


def parse_termination_message(text: str) -> dict[str, Any] | None:
    """The result document from a pod's termination message; None when it is not ours."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and "exitCode" in doc else None
