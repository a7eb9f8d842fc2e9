"""The status of a run computed from what was observed of its attempts (core/status/observed.py), and the
status of a harness definition (pure)."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import (
    BUILTIN,
    LABEL_CATALOG,
    AcpTransport,
    Attempt,
    ChangesStatus,
    Condition,
    HarnessDefinitionSpec,
    HarnessDefinitionStatus,
    HarnessRun,
    HarnessRunStatus,
    OutputStatus,
    Phase,
    Protocol,
    RetryPolicy,
    RunBudget,
    SessionStatus,
)
from harness_operator.contract.result import (
    EXIT_STOPPED,
    ResultDocument,
    fallback_line,
)
from harness_operator.contract.times import timestamp
from harness_operator.core.objects.conditions import (
    ACCEPTED,
    FALSE,
    READY,
    STALLED,
    SUCCEEDED,
    TRUE,
    UNKNOWN,
    compute_kstatus_conditions,
    set_condition,
)
from harness_operator.core.queue.budget import build_budget_charge, build_run_charge
from harness_operator.core.resolve.retry import compute_next_index, retry_line, retry_number
from harness_operator.core.status.audit import build_audit_summary
from harness_operator.core.status.awaiting import AWAITING_APPROVAL, build_awaiting
from harness_operator.core.status.observed import FINISHED, RUNNING, SUSPENDED, Observed, ObservedAttempt
from harness_operator.core.status.progress import build_final_progress
from harness_operator.core.status.usage import sum_usage

EXCERPT_CHARS = 2000


def build_excerpt(output: bytes, limit: int = EXCERPT_CHARS) -> str:
    """The first `limit` characters of the output."""
    text = output.decode("utf-8", "replace")
    return text if len(text) <= limit else text[:limit]


def build_attempt(doc: ResultDocument) -> Attempt:
    """status.attempts[] entry from one result document."""
    return Attempt(**{**doc.outcome(), "message": doc.message or None})


def attempt_positions(observed: Observed) -> list[int]:
    """The chain position of each attempt number."""
    return observed.positions or list(range(1, len(observed.providers) + 1))


def compute_next_attempt(observed: Observed, policy: RetryPolicy | None) -> int | None:
    """The 1-based attempt to create now, if any: the first, a retry after a failure `policy` (spec.retry)
    retries, or the next provider's first after an allowed fallback."""
    if observed.rejected or observed.waiting or observed.failed or observed.cancelled:
        return None
    if not observed.attempts:
        return 1
    last = observed.attempts[-1]
    if last.state != FINISHED or last.result is None or last.succeeded:
        return None
    positions = attempt_positions(observed)
    if not 1 <= last.index <= len(positions):
        return None
    return compute_next_index(positions, last.index, policy, last.result.reason, last.result.exit_code)


def describe_next_attempt(run: HarnessRun, observed: Observed, next_index: int) -> tuple[str, str]:
    """(reason, message) of a run whose last attempt failed and whose attempt `next_index` follows: a
    retry of the same provider, or Dagu's fallback line."""
    last = observed.attempts[-1]
    total = len(observed.providers)
    positions = attempt_positions(observed)
    nth = retry_number(positions, next_index)
    provider = observed.providers[next_index - 1]
    if nth == 0:
        return Reason.FallingBack, fallback_line(last.index, total, last.provider, provider, next_index)
    limit = run.spec.retry.limit if run.spec.retry else 0
    reason = last.result.reason if last.result else None
    return Reason.Retrying, retry_line(last.index, total, last.provider, reason, nth, limit, next_index)


def describe_changes(changes: ChangesStatus) -> str:
    """The change in the run's message (and so in `harnessctl logs` and the end Event)."""
    text = f"{changes.files or 0} files changed (+{changes.insertions or 0} -{changes.deletions or 0})"
    if changes.pull_request_url:
        return f"{text}, pull request {changes.pull_request_url}"
    if changes.branch:
        return f"{text}, pushed to branch {changes.branch}"
    return (
        f"{text}, patch in ConfigMap {changes.patch_config_map_name}"
        if changes.patch_config_map_name
        else text
    )


def _final_reason(last: ObservedAttempt) -> str:
    result = last.result
    if result is not None and result.reason:
        return result.reason
    return Reason.Succeeded if result is not None and result.exit_code == 0 else Reason.ProviderFailed


def compute_status(run: HarnessRun, observed: Observed, now: datetime) -> HarnessRunStatus:
    """The run's status: conditions are the truth, phase is derived from them."""
    previous = run.status or HarnessRunStatus()
    generation = run.metadata.get("generation")
    conds = list(previous.conditions)
    status = HarnessRunStatus(
        observed_generation=generation,
        start_time=previous.start_time,
        budget=previous.budget,
        audit=build_audit_summary(run),
    )

    if observed.rejected:
        reason, message = observed.rejected
        conds = set_condition(conds, ACCEPTED, FALSE, reason, message, generation, now)
        conds = set_condition(conds, SUCCEEDED, FALSE, reason, message, generation, now)
        return status.model_copy(
            update={
                "conditions": compute_kstatus_conditions(conds, generation, now),
                "phase": Phase.failed,
                "reason": reason,
                "message": message,
                "exit_code": 1,
                "completion_time": previous.completion_time or timestamp(now),
            }
        )
    conds = set_condition(
        conds, ACCEPTED, TRUE, Reason.ProviderResolved, "spec valid, provider resolved", generation, now
    )
    attempts = [
        build_attempt(a.result) if a.result else Attempt(index=a.index, provider=a.provider)
        for a in observed.attempts
    ]
    recorded = {a.index: a for a in previous.attempts}
    for model, seen in zip(attempts, observed.attempts, strict=True):
        model.job_name = seen.job_name
        before = recorded.get(model.index)
        model.pod_name = seen.pod_name or (before and before.pod_name) or None
        model.cluster = seen.cluster
        # A start once recorded stays until the result's own: it never moves in a write of its own.
        model.start_time = model.start_time or (before and before.start_time) or seen.start_time
        if seen.state == FINISHED:  # an end is recorded once (a retry's backoff counts from it)
            model.completion_time = (
                model.completion_time or (before and before.completion_time) or timestamp(now)
            )
    usages = [a.usage for a in attempts if a.usage is not None]
    if observed.unattributed is not None:
        usages.append(observed.unattributed)
    first_start = next((a.start_time for a in observed.attempts if a.start_time), None)
    update: dict[str, Any] = {
        "attempts": attempts,
        "usage": sum_usage(usages) if usages else None,
        "start_time": previous.start_time or first_start,
    }
    total = len(observed.providers)
    last = observed.attempts[-1] if observed.attempts else None
    next_index = compute_next_attempt(observed, run.spec.retry)

    if observed.failed:
        reason, message = observed.failed
        conds = set_condition(conds, SUCCEEDED, FALSE, reason, message, generation, now)
        update |= {
            "phase": Phase.failed,
            "reason": reason,
            "message": message,
            "exit_code": 1,
            "completion_time": previous.completion_time or timestamp(now),
        }
    elif observed.cancelled and not (last and last.succeeded):
        message = "cancelled by spec.cancel"
        conds = set_condition(conds, SUCCEEDED, FALSE, Reason.Cancelled, message, generation, now)
        update |= {
            "phase": Phase.cancelled,
            "reason": Reason.Cancelled,
            "message": message,
            "exit_code": EXIT_STOPPED,
            "completion_time": previous.completion_time or timestamp(now),
        }
    elif last and last.state == FINISHED and next_index is None and not observed.waiting:
        reason = _final_reason(last)
        ok = last.succeeded
        message = (
            f"attempt {last.index}/{total} with {last.provider} succeeded"
            if ok
            else (last.result.message if last.result else None) or reason
        )
        exit_code = last.result.exit_code if last.result else None
        # The agent's output and usage stay; the run did not deliver (its output first: a change pushed
        # with an answer that does not match is still no answer).
        undelivered = observed.output_invalid or observed.publish_failed
        if ok and undelivered:
            reason, message = undelivered
            exit_code = 1
        published = ok and not undelivered
        awaiting = published and observed.awaiting_approval and observed.changes is not None
        if awaiting and observed.changes is not None:
            update |= build_awaiting(run, observed.changes, now)
            message = str(update["message"])
            conds = set_condition(
                conds, AWAITING_APPROVAL, TRUE, Reason.AwaitingApproval, message, generation, now
            )
            conds = set_condition(
                conds, SUCCEEDED, UNKNOWN, Reason.AwaitingApproval, message, generation, now
            )
        else:
            if published and observed.changes is not None:
                message = f"{message}; {describe_changes(observed.changes)}"
            conds = set_condition(
                conds, SUCCEEDED, TRUE if published else FALSE, reason, message, generation, now
            )
            update |= {
                "phase": Phase.succeeded
                if published
                else (Phase.cancelled if reason == Reason.Cancelled else Phase.failed),
                "reason": reason,
                "message": message,
                "exit_code": exit_code,
                "completion_time": previous.completion_time or timestamp(now),
                "changes": observed.changes,
            }
        if ok and observed.output is not None:
            update["output"] = OutputStatus(
                excerpt=build_excerpt(observed.output),
                bytes=len(observed.output),
                sha256=hashlib.sha256(observed.output).hexdigest(),
                truncated=bool(last.result and last.result.output and last.result.output.truncated),
                config_map_name=observed.output_config_map,
            )
        if published and last.result is not None and last.result.session and last.result.session_id:
            update["session"] = SessionStatus(
                attempt=last.index,
                provider=last.provider,
                session_id=last.result.session_id,
                bytes=last.result.session.bytes,
                sha256=last.result.session.sha256,
            )
    else:
        if observed.waiting:
            reason, message = observed.waiting
        elif last and last.state == FINISHED and next_index is not None:
            reason, message = describe_next_attempt(run, observed, next_index)
        elif last and last.state == RUNNING:
            reason, message = Reason.Running, f"attempt {last.index}/{total} with {last.provider} is running"
        elif last and last.state == SUSPENDED and last.waiting:  # Kueue said why; else it is routine
            reason = Reason.Suspended
            message = f"attempt {last.index}/{total} waits for its queue to admit it: {last.waiting}"
        elif last and last.waiting:  # its pod cannot be placed or started: the scheduler's or kubelet's why
            reason, message = Reason.Pending, f"attempt {last.index}/{total} waits: {last.waiting}"
        else:
            reason, message = Reason.Pending, "waiting for the sandbox pod to start"
        conds = set_condition(conds, SUCCEEDED, UNKNOWN, reason, message, generation, now)
        running = last is not None and last.state == RUNNING
        update |= {"phase": Phase.running if running else Phase.pending, "reason": reason, "message": message}
    conds = compute_kstatus_conditions(conds, generation, now)
    status = status.model_copy(update={**update, "conditions": conds})
    if status.completion_time:
        progress = build_final_progress(status, previous.progress)
        return status.model_copy(update={"progress": progress, "budget": build_charged_budget(status)})
    return status.model_copy(update={"progress": previous.progress})


def build_charged_budget(status: HarnessRunStatus) -> RunBudget | None:
    """A finished run's budget admission with what its budgets charge it (its ledgers settle the same
    amount, from the same status: core/queue/budget.compute_charge)."""
    budget = status.budget
    if budget is None or not budget.names:
        return budget
    charge = build_budget_charge(
        budget.names, budget.reserved_usd, build_run_charge({"status": status.to_api()})
    )
    return budget.model_copy(update={"charge": charge})


def compute_definition_status(definition: dict[str, Any], now: datetime) -> HarnessDefinitionStatus:
    """A HarnessDefinition's or ClusterHarnessDefinition's status: Ready when its spec parses and runs
    can use it; otherwise Ready False and Stalled True (kstatus: Failed) until it is edited. A built-in
    of the catalog that no image ships (it starts a CLI none of our images has) is not Ready: NoImage."""
    generation = (definition.get("metadata") or {}).get("generation")
    previous = [Condition.model_validate(c) for c in (definition.get("status") or {}).get("conditions") or []]
    try:
        spec = HarnessDefinitionSpec.model_validate(definition.get("spec") or {})
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(["spec", *(str(part) for part in error["loc"])])
        reason, message = Reason.InvalidDefinition, f"{where}: {error['msg']}; fix the definition"
    else:
        labels = (definition.get("metadata") or {}).get("labels") or {}
        starts_a_cli = spec.protocol == Protocol.cli or spec.transport in (None, AcpTransport.stdio)
        if labels.get(LABEL_CATALOG) == BUILTIN and spec.image is None and starts_a_cli:
            reason = Reason.NoImage
            message = (
                f"no sandbox image ships {spec.binary}: a run of this built-in ends BinaryNotFound unless it "
                "names an image with the CLI (spec.sandbox.image, or a HarnessDefinition with spec.image)"
            )
        else:  # parsing is the check: every protocol the API admits has a runner
            conds = set_condition(
                previous, READY, TRUE, Reason.Valid, "runs can use this definition", generation, now
            )
            conds = [c for c in conds if c.type != STALLED]
            return HarnessDefinitionStatus(conditions=conds, observed_generation=generation)
    conds = set_condition(previous, READY, FALSE, reason, message, generation, now)
    conds = set_condition(conds, STALLED, TRUE, reason, message, generation, now)
    return HarnessDefinitionStatus(conditions=conds, observed_generation=generation)
