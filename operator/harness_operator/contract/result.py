"""The attempt's result document and its termination-message form, kept under 4 KiB (pure)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import DENIED_TOOLS_MAX, AttemptOutcome, Usage

TERMINATION_LIMIT = 4096
RESULT_VERSION = 1
EXIT_SETUP = 1
EXIT_STOPPED = 124
NETWORK_NOT_CONFINED = Reason.NetworkNotConfined
# Reasons after which no fallback runs (the user, a limit or the cluster stopped the run, not the provider).
NO_FALLBACK_REASONS = frozenset(
    {
        Reason.Timeout,
        Reason.Cancelled,
        Reason.CostLimitExceeded,
        NETWORK_NOT_CONFINED,
        Reason.QueueUnavailable,
    }
)


def is_fallback_allowed(exit_code: int, reason: str | None) -> bool:
    """The one rule, the runner's (`harnessctl run`) and the operator's: another provider only after a
    non-zero exit that no limit, timeout, cancel, confinement or lost queue caused."""
    return exit_code != 0 and reason not in NO_FALLBACK_REASONS


class ResultOutput(BaseModel):
    """What the runner kept of the agent's output; `sha256` covers the bytes kept."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    bytes: int | None = None
    total_bytes: int | None = None
    sha256: str | None = None
    truncated: bool = False


class SessionArchive(BaseModel):
    """The agent's session files as the runner framed them in the log (kind SESSION, before the output)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    bytes: int
    sha256: str


class ResultDocument(AttemptOutcome):
    """The result of one attempt, camelCase like the API: the runner writes it (file, termination
    message), the operator and `harnessctl run` read it; status.attempts[] takes its outcome fields as
    they are. Fields added within a version are optional and ignored by older readers; a change they
    would misread bumps `version`."""

    model_config = ConfigDict(extra="ignore")

    version: int = Field(default=RESULT_VERSION, ge=1)
    # The attempt's number, `attempt` on the wire (and as an attribute: the property below).
    index: int = Field(default=0, alias="attempt")
    provider: str = ""
    exit_code: int
    agent_exit_code: int | None = None
    # True when the runner could not end the agent's process: the operator deletes the pod.
    agent_left_running: bool | None = None
    output: ResultOutput | None = None
    session: SessionArchive | None = None

    @property
    def attempt(self) -> int:
        return self.index

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0 and not self.reason

    @property
    def fallback_allowed(self) -> bool:
        return is_fallback_allowed(self.exit_code, self.reason)

    def to_doc(self) -> dict[str, Any]:
        """The document as written: unknown figures absent."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


@dataclass(frozen=True)
class ResultProblem:
    """A termination message that is a result document this reader cannot use; `message` says why."""

    message: str


def build_result_doc(
    *,
    attempt: int,
    provider: str,
    exit_code: int,
    reason: str | None,
    message: str,
    usage: Usage,
    model: str | None,
    session_id: str | None,
    output: bytes,
    output_bytes: int,
    truncated: bool,
    agent_exit_code: int | None = None,
    agent_left_running: bool = False,
    cli_version: str | None = None,
    start_time: str | None = None,
    completion_time: str | None = None,
    denied_tools: Sequence[str] = (),
    session: bytes | None = None,
) -> ResultDocument:
    """The result of one attempt; `output.sha256` covers the bytes kept."""
    return ResultDocument(
        attempt=attempt,
        provider=provider,
        exit_code=exit_code,
        reason=reason,
        message=message,
        agent_exit_code=agent_exit_code,
        agent_left_running=agent_left_running or None,
        usage=usage,
        model=model,
        session_id=session_id,
        output=ResultOutput(
            bytes=len(output),
            total_bytes=output_bytes,
            sha256=hashlib.sha256(output).hexdigest(),
            truncated=truncated,
        ),
        cli_version=cli_version,
        start_time=start_time,
        completion_time=completion_time,
        denied_tools=bound_tool_names(denied_tools),
        session=None
        if session is None
        else SessionArchive(bytes=len(session), sha256=hashlib.sha256(session).hexdigest()),
    )


DENIED_TOOL_CHARS = 64


def bound_tool_names(names: Sequence[str]) -> list[str] | None:
    """At most DENIED_TOOLS_MAX names of at most DENIED_TOOL_CHARS characters each; None for none."""
    kept = [name[:DENIED_TOOL_CHARS] for name in names[:DENIED_TOOLS_MAX]]
    return kept or None


def fallback_line(
    attempt: int, total: int, failed: str, next_provider: str, next_attempt: int | None = None
) -> str:
    """Dagu's line, on stderr locally and as the Event and status message in the cluster; with retries
    (spec.retry) the fallback's attempt number may be further on than the next."""
    following = attempt + 1 if next_attempt is None else next_attempt
    return (
        f"harness: attempt {attempt}/{total} with {failed} failed; "
        f"trying fallback {following}/{total} with {next_provider}"
    )


def _dump(doc: dict[str, Any]) -> str:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def _fits(doc: dict[str, Any], limit: int) -> bool:
    return len(_dump(doc).encode("utf-8")) <= limit


# Dropped in this order until the message fits; exitCode, reason, agentExitCode (the operator checks it
# against the kubelet), agentLeftRunning and output.sha256 always stay.
_OPTIONAL = (
    "deniedTools",
    "session",
    "cliVersion",
    "startTime",
    "completionTime",
    "sessionID",
    "model",
    "usage",
)


def render_termination_message(result: ResultDocument, limit: int = TERMINATION_LIMIT) -> str:
    """Compact JSON of the document, never over `limit` bytes: the message is cut first, then optional
    fields go, then only the essentials remain."""
    doc = result.to_doc()
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
        "agentExitCode": doc.get("agentExitCode"),
        "agentLeftRunning": doc.get("agentLeftRunning"),
        "output": {"sha256": output.get("sha256"), "bytes": output.get("bytes")},
    }
    return _dump({k: v for k, v in essentials.items() if v is not None})


def parse_termination_message(text: str) -> ResultDocument | ResultProblem | None:
    """The result document from a pod's termination message, parsed once; None when the message is not
    one (no JSON object with an exitCode), a ResultProblem when it is one of a newer version or
    malformed."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict) or "exitCode" not in doc:
        return None
    version = doc.get("version", RESULT_VERSION)
    if isinstance(version, int) and not isinstance(version, bool) and version > RESULT_VERSION:
        return ResultProblem(
            f"the runner wrote a result document of version {version}; this operator reads version "
            f"{RESULT_VERSION}: use the sandbox image of the operator's version, or upgrade the operator"
        )
    try:
        return ResultDocument.model_validate(doc)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        return ResultProblem(f"the runner's result document is malformed: {where}: {error['msg']}")
