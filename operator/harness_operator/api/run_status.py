"""HarnessRun's status: conditions, attempts, usage, output, progress, and the budgets the run was
admitted under."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field

from harness_operator.api.common import (
    Condition,
    Model,
)
from harness_operator.api.session import SessionStatus
from harness_operator.api.tools import DENIED_TOOLS_MAX


class CostSource(StrEnum):
    metered = "metered"
    reported = "reported"
    computed = "computed"
    unknown = "unknown"


class Usage(Model):
    """Tokens, turns and cost; a figure that is not known is absent, never 0."""

    input_tokens: int | None = Field(default=None, description="Input tokens.")
    output_tokens: int | None = Field(default=None, description="Output tokens.")
    cache_read_tokens: int | None = Field(default=None, description="Cache-read tokens.")
    cache_write_tokens: int | None = Field(default=None, description="Cache-write tokens.")
    turns: int | None = Field(default=None, description="Agent turns.")
    cost_usd: float | None = Field(default=None, alias="costUSD", description="Cost in USD.")
    cost_source: CostSource = Field(
        default=CostSource.unknown,
        description="metered by the model gateway from the vendor's answers, reported by the CLI, "
        "computed from pricing, or unknown.",
    )
    price_source: str | None = Field(
        default=None,
        description="Where the prices of a computed cost came from: `definition` (its `pricing`) or the "
        "pinned price table and its version, e.g. `genai-prices 0.2.3`.",
    )


class AttemptOutcome(Model):
    """What one attempt did: the fields the runner's result document (contract/result.py) and the run's
    status.attempts[] share."""

    index: int = Field(description="1-based attempt number.")
    provider: str = Field(description="Provider of this attempt.")
    start_time: str | None = Field(default=None, description="When the attempt started.")
    completion_time: str | None = Field(default=None, description="When it ended.")
    exit_code: int | None = Field(default=None, description="The agent's exit code (124 timeout/cancel).")
    reason: str | None = Field(default=None, description="Typed outcome, e.g. ProviderFailed.")
    message: str | None = Field(default=None, description="Detail.")
    model: str | None = Field(default=None, description="Model the CLI reported.")
    session_id: str | None = Field(
        default=None, alias="sessionID", description="Session id the CLI reported."
    )
    usage: Usage | None = Field(default=None, description="This attempt's usage.")
    cli_version: str | None = Field(default=None, description="CLI version, where cheap to learn.")
    reported_usage: Usage | None = Field(
        default=None,
        description="What the sandbox reported, kept beside the model gateway's metered `usage`, which is "
        "what counts.",
    )
    denied_tools: list[str] | None = Field(
        default=None,
        max_length=DENIED_TOOLS_MAX,
        description="Tools the agent asked for and its tool policy refused (names, first ones first).",
    )

    def outcome(self) -> dict[str, Any]:
        """The shared fields by name, to make the other shape of the same outcome."""
        return {name: getattr(self, name) for name in AttemptOutcome.model_fields}


class Attempt(AttemptOutcome):
    """One attempt with one provider."""

    job_name: str | None = Field(default=None, description="The attempt's Job.")
    pod_name: str | None = Field(default=None, description="The attempt's Pod.")
    cluster: str | None = Field(
        default=None,
        description="The MultiKueue worker cluster the attempt's Job ran on (its MultiKueueCluster's name); "
        "unset: this cluster.",
    )
    image_digest: str | None = Field(default=None, description="Image digest the pod ran.")


class OutputStatus(Model):
    """The successful attempt's output."""

    excerpt: str | None = Field(default=None, description="The first part of the output.")
    bytes: int | None = Field(default=None, description="Size of the full output.")
    sha256: str | None = Field(default=None, description="SHA-256 of the full output.")
    truncated: bool | None = Field(default=None, description="True when cut at maxOutputBytes.")
    config_map_name: str | None = Field(default=None, description="ConfigMap holding the full output.")


class ChecksState(StrEnum):
    """The checks of one commit together: any failed is failure, else any cancelled or broken is error,
    else any unfinished is pending, else success; none when no check reported on it."""

    pending = "pending"
    success = "success"
    failure = "failure"
    error = "error"
    none = "none"


class ChecksStatus(Model):
    """The checks on the commit a run pushed, read from the forge's API (never from a webhook's body);
    the harness's own commit status (context harness/<trigger>) is not one of them."""

    state: ChecksState = Field(description="pending, success, failure, error, or none (no check yet).")
    sha: str = Field(description="The commit they are for: status.changes.commit when they were read.")
    total: int = Field(default=0, ge=0, description="Checks on the commit.")
    passed: int = Field(default=0, ge=0, description="Checks that succeeded (or were skipped).")
    failed: int = Field(default=0, ge=0, description="Checks that failed, errored or were cancelled.")
    pending: int = Field(default=0, ge=0, description="Checks not finished.")
    read_time: str | None = Field(default=None, description="When the forge was read.")


class ChangesStatus(Model):
    """The agent's change in the workspace, as the publishing container captured and published it."""

    base: str | None = Field(default=None, description="The commit the change is against (cloned).")
    commit: str | None = Field(default=None, description="The commit pushed (with branch).")
    branch: str | None = Field(default=None, description="The branch pushed to the origin.")
    files: int | None = Field(default=None, description="Files changed.")
    insertions: int | None = Field(default=None, description="Lines added.")
    deletions: int | None = Field(default=None, description="Lines removed.")
    patch_bytes: int | None = Field(default=None, description="Size of the patch (git diff --binary).")
    patch_sha256: str | None = Field(default=None, alias="patchSHA256", description="SHA-256 of the patch.")
    patch_config_map_name: str | None = Field(
        default=None, description="ConfigMap holding the patch (key changes.patch), when it fits in one."
    )
    pull_request_url: str | None = Field(
        default=None, alias="pullRequestURL", description="The pull request opened (or found open)."
    )
    pull_request_number: int | None = Field(
        default=None, description="The pull request's number (GitLab: the merge request's iid)."
    )
    checks: ChecksStatus | None = Field(
        default=None,
        description="The checks (commit statuses, check runs, pipeline jobs) on the commit pushed, as the "
        "reporting step of the run's HarnessTrigger last read them from the forge.",
    )
    tree: str | None = Field(
        default=None,
        description="The tree of the change's commit, kept for approval: what an approval publishes.",
    )
    approval_paths: list[str] | None = Field(
        default=None,
        max_length=10,
        description="The paths the change touches that the policy publishes only with an approval.",
    )

    signed: bool | None = Field(
        default=None,
        description="The pushed commit carries an SSH signature by the platform's key (the operator's "
        "publishing.signing).",
    )
    signing_key: str | None = Field(
        default=None,
        description="The SHA256 fingerprint of the key that signed the pushed commit (as ssh-keygen -l "
        "prints it).",
    )


class ApprovalDecision(StrEnum):
    approved = "Approved"
    rejected = "Rejected"


class ApprovalStatus(Model):
    """A change awaiting a person's decision (spec.workspace.publish.approval), and the decision."""

    decision: ApprovalDecision | None = Field(default=None, description="Approved or Rejected.")
    user: str | None = Field(default=None, description="Who decided (the API server checked it).")
    time: str | None = Field(default=None, description="When the operator saw the decision.")
    reason: str | None = Field(default=None, max_length=1024, description="The decider's reason or note.")
    deadline: str | None = Field(default=None, description="When the wait ends (ApprovalTimedOut).")


class AuditStatus(Model):
    """Who created and cancelled the run, as admission recorded them, and what it was granted by name."""

    created_by: str | None = Field(
        default=None, description="The requester who created the run (agentharness.dev/author)."
    )
    cancelled_by: str | None = Field(
        default=None, description="The requester who cancelled it (agentharness.dev/cancelled-by)."
    )
    credentials: list[str] = Field(
        default_factory=list, description="The run's credential grants as ENV=Secret, never their values."
    )


class Progress(Model):
    """The run so far, for `kubectl get -w`: finished attempts' usage plus the running attempt's figures,
    which the operator reads from the sandbox's log while it runs; at the end, the run's totals."""

    attempt: int | None = Field(default=None, description="The attempt these figures run up to.")
    turns: int | None = Field(default=None, description="Agent turns so far.")
    tokens: int | None = Field(
        default=None, description="Tokens so far: input, output, cache read and cache write together."
    )
    cost_usd: float | None = Field(default=None, alias="costUSD", description="Cost so far in USD.")
    last_tool: str | None = Field(default=None, description="The last tool the agent called.")
    duration: str | None = Field(default=None, description="Time since the run started, e.g. 2m5s.")
    update_time: str | None = Field(default=None, description="When these figures were read.")


class Phase(StrEnum):
    pending = "Pending"
    running = "Running"
    succeeded = "Succeeded"
    failed = "Failed"
    cancelled = "Cancelled"
    awaiting_approval = "AwaitingApproval"


class ChargeBasis(StrEnum):
    """What a finished run's budget charge is: its cost as metered or reported, its reservation when its
    cost stayed unknown, or nothing when no attempt started its agent."""

    metered = "Metered"
    reported = "Reported"
    reserved = "Reserved"
    not_started = "NotStarted"


class BudgetCharge(Model):
    """What a finished run was charged in each budget it was admitted under, and why (its ledgers hold
    the same amount)."""

    amount_usd: float = Field(alias="amountUSD", description="USD charged to each of the run's budgets.")
    basis: ChargeBasis = Field(
        description="Metered (the model gateway's meter), Reported (the sandbox's report), Reserved (the "
        "cost stayed unknown: the reservation is kept) or NotStarted (no attempt started its agent)."
    )
    message: str = Field(description="The charge in a sentence, and why.")


class RunBudget(Model):
    """The budgets a run was admitted under, the cap it reserved from them, and, once it finished, what
    it was charged."""

    names: list[str] = Field(default_factory=list, description="The HarnessBudgets covering the run.")
    reserved_usd: float | None = Field(
        default=None,
        alias="reservedUSD",
        description="The run's effective maxCostUSD: counted as spent while it runs, and when its cost "
        "stays unknown.",
    )
    admitted_at: str | None = Field(default=None, description="When it took its place in the budgets.")
    charge: BudgetCharge | None = Field(default=None, description="What it was charged once it finished.")


class HarnessRunStatus(Model):
    """Observed state, written only by the operator (or `harnessctl run --status-file`)."""

    phase: Phase | None = Field(default=None, description="Summary derived from the conditions.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Accepted and Succeeded; Ready, Reconciling and Stalled follow Succeeded for kstatus.",
    )
    observed_generation: int | None = Field(default=None, description="Generation last reconciled.")
    start_time: str | None = Field(default=None, description="When the first attempt started.")
    completion_time: str | None = Field(default=None, description="When the run ended.")
    exit_code: int | None = Field(default=None, description="The final exit code.")
    reason: str | None = Field(default=None, description="The final typed reason.")
    message: str | None = Field(default=None, description="The final detail.")
    attempts: list[Attempt] = Field(default_factory=list, description="One entry per attempt.")
    usage: Usage | None = Field(default=None, description="Summed across attempts.")
    output: OutputStatus | None = Field(default=None, description="The output.")
    session: SessionStatus | None = Field(
        default=None, description="The conversation a run's spec.resumeFrom can continue."
    )
    changes: ChangesStatus | None = Field(
        default=None, description="The agent's change (spec.workspace.publish): patch, branch, pull request."
    )
    budget: RunBudget | None = Field(default=None, description="Budget admission and reservation.")
    approval: ApprovalStatus | None = Field(
        default=None, description="The approval the change waits for or got (workspace.publish.approval)."
    )

    audit: AuditStatus | None = Field(
        default=None,
        description="Who created and cancelled the run, and its grants by name (the audit trail).",
    )
    progress: Progress | None = Field(default=None, description="Turns, tokens and cost so far.")
    trace_id: str | None = Field(
        default=None,
        alias="traceID",
        description="The run's OpenTelemetry trace (tracing.endpoint in the chart), when it is traced.",
    )
