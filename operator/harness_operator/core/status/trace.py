"""The operator's spans of a run's trace, built from what a status write changes (pure): the admission
(the wait before the first attempt) once that attempt starts, each attempt's span with its pod's steps
once the attempt ends, and the run's own span with its approval once the run ends. Level-based: a write
that changes nothing of these builds nothing, so a replica that writes again after a restart adds no
span. Times are the status's and the kubelet's, whole seconds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import Attempt, HarnessRun, HarnessRunStatus, Usage
from harness_operator.contract.times import parse_time
from harness_operator.contract.tracing import (
    AttributeValue,
    SpanRecord,
    compute_attempt_span_id,
    compute_span_id,
)
from harness_operator.core.objects.conditions import is_finished
from harness_operator.core.objects.naming import ANNOTATION_AUTHOR
from harness_operator.core.status.observed import PodStep

CONTENT_CHARS = 4096  # of the prompt and the output's excerpt, with tracing.recordContent


def _ns(value: str | None) -> int | None:
    parsed = parse_time(value)
    return None if parsed is None else int(parsed.timestamp()) * 1_000_000_000


def _usage(usage: Usage | None) -> dict[str, AttributeValue]:
    if usage is None:
        return {}
    figures = {
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens,
        "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens,
        "harness.cost_usd": usage.cost_usd,
    }
    return {k: v for k, v in figures.items() if v is not None}


def compute_newly_ended(before: HarnessRunStatus | None, after: HarnessRunStatus) -> list[Attempt]:
    """The attempts whose end `after` records and `before` did not, by index."""
    ended = {a.index for a in (before.attempts if before else []) if a.completion_time}
    fresh = [a for a in after.attempts if a.completion_time and a.index not in ended]
    return sorted(fresh, key=lambda a: a.index)


def build_attempt_spans(
    uid: str, attempt: Attempt, steps: Sequence[PodStep], now_ns: int
) -> list[SpanRecord]:
    """Attempt `attempt`'s span under the run's, and its pod's steps under it."""
    span_id = compute_attempt_span_id(uid, attempt.index)
    start = _ns(attempt.start_time) or _ns(attempt.completion_time) or now_ns
    end = _ns(attempt.completion_time) or now_ns
    attributes: dict[str, AttributeValue] = {
        "harness.attempt": attempt.index,
        "harness.provider": attempt.provider,
        **_usage(attempt.usage),
    }
    optional = {
        "harness.reason": attempt.reason,
        "harness.exit_code": attempt.exit_code,
        "gen_ai.response.model": attempt.model,
        "harness.cli_version": attempt.cli_version,
        "harness.job": attempt.job_name,
        "k8s.pod.name": attempt.pod_name,
        "harness.cluster": attempt.cluster,
    }
    attributes.update({k: v for k, v in optional.items() if v is not None})
    failed = attempt.exit_code != 0 or attempt.reason not in (None, Reason.Succeeded)
    parts = []
    for step in steps:
        step_start, step_end = _ns(step.start), _ns(step.end)
        if step_start is None or step_end is None:
            continue
        step_id = compute_span_id(uid, "attempt", attempt.index, step.name)
        attributes_of_step: dict[str, AttributeValue] = {"harness.attempt": attempt.index}
        parts.append(SpanRecord(step.name, step_id, span_id, step_start, step_end, attributes_of_step))
    # The publisher reports after the runner recorded the attempt's end: the attempt lasts until it did.
    end = max([end, *(part.end_ns for part in parts)])
    error = (attempt.reason or "Failed") if failed else None
    name = f"attempt {attempt.index} {attempt.provider}"
    spans = [SpanRecord(name, span_id, compute_span_id(uid), start, end, attributes, error), *parts]
    return spans


def build_run_spans(
    run: HarnessRun,
    before: HarnessRunStatus | None,
    after: HarnessRunStatus,
    steps: Mapping[int, Sequence[PodStep]],
    now: datetime,
    content: bool = False,
) -> list[SpanRecord]:
    """The spans a status write from `before` to `after` completes; `steps`: the pod steps of the
    attempts observed finished, by index. With `content` (the platform's tracing.recordContent) the run's
    span carries its prompt as written (inputs unresolved: no Secret's value) and its output's excerpt,
    which the runner redacted as it redacts the log."""
    meta = run.metadata
    uid, now_ns = meta["uid"], int(now.timestamp()) * 1_000_000_000
    created = _ns(meta.get("creationTimestamp")) or now_ns
    root = compute_span_id(uid)
    spans: list[SpanRecord] = []
    first_start = _ns(after.attempts[0].start_time) if after.attempts else None
    had_start = bool(before and before.attempts and before.attempts[0].start_time)
    if first_start is not None and not had_start:
        waited: dict[str, AttributeValue] = {}
        if before is not None and before.reason:
            waited["harness.wait.reason"] = before.reason
            waited["harness.wait.message"] = (before.message or "")[:256]
        if after.budget and after.budget.names:
            waited["harness.budgets"] = list(after.budget.names)
        spans.append(
            SpanRecord("admission", compute_span_id(uid, "admission"), root, created, first_start, waited)
        )
    for attempt in compute_newly_ended(before, after):
        spans.extend(build_attempt_spans(uid, attempt, steps.get(attempt.index, ()), now_ns))
    if is_finished(after.conditions) and not (before and is_finished(before.conditions)):
        end = _ns(after.completion_time) or now_ns
        approval = after.approval
        if approval is not None and after.attempts:
            asked = _ns(after.attempts[-1].completion_time) or end
            decided = _ns(approval.time) or end
            decision = {
                "harness.approval.decision": approval.decision,
                "harness.approval.user": approval.user,
            }
            decided_by = {k: str(v) for k, v in decision.items() if v is not None}
            span_id = compute_span_id(uid, "approval")
            spans.append(SpanRecord("approval", span_id, root, asked, decided, decided_by))
            if approval.decision == "Approved":
                spans.append(SpanRecord("publish", compute_span_id(uid, "publish"), root, decided, end, {}))
        attributes: dict[str, AttributeValue] = {
            "harness.run": meta["name"],
            "k8s.namespace.name": meta["namespace"],
            "harness.run.uid": uid,
            "harness.phase": str(after.phase or ""),
            "harness.attempts": len(after.attempts),
            **_usage(after.usage),
        }
        optional = {
            "harness.reason": after.reason,
            "harness.author": (meta.get("annotations") or {}).get(ANNOTATION_AUTHOR),
            "harness.provider": run.spec.provider,
            "vcs.ref.head.name": after.changes.branch if after.changes else None,
            "harness.pull_request": after.changes.pull_request_url if after.changes else None,
        }
        attributes.update({k: v for k, v in optional.items() if v})
        if content:
            attributes["harness.prompt"] = (run.spec.prompt or "")[:CONTENT_CHARS]
            if after.output and after.output.excerpt:
                attributes["harness.output"] = after.output.excerpt[:CONTENT_CHARS]
        succeeded = after.reason in (None, Reason.Succeeded)
        name = f"run {meta['namespace']}/{meta['name']}"
        spans.append(
            SpanRecord(name, root, None, created, end, attributes, None if succeeded else after.reason)
        )
    return spans
