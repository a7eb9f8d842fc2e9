"""What the reporting step says on the forge about a trigger's run: when it says it, the one comment's
markdown, the commit status, and the run's labels and annotations that remember what was said (pure).

A run is reported at three moments, not on every status write: while it works (first seen), once its pull
request is known, and when it ends. Each moment is a stage; the stage last reported is kept in the run's
annotation, so a report is due exactly when the run's stage differs from it (level-based: a restart or a
second replica computes the same). The agent's output and the run's message are untrusted text: they go
into the comment inside a fence no line of theirs can close, so they can neither mention anyone nor add
markdown of their own, and never into a URL or a header.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import GROUP
from harness_operator.core.forge.triggering import ANNOTATION_COMMENT_ID, LABEL_PULL_REQUEST, THREAD_PULL
from harness_operator.core.objects.naming import (
    ANNOTATION_HEAD,
    ANNOTATION_REPOSITORY,
    ANNOTATION_THREAD_KIND,
    LABEL_THREAD,
    LABEL_TRIGGER,
)

ANNOTATION_REPORTED = f"{GROUP}/forge-reported"  # the stage last reported

WORKING, WORKING_PR, FINISHED, FINISHED_PR = "working", "working+pr", "finished", "finished+pr"
AWAITING = "awaiting"  # the change is kept until a person approves it (workspace.publish.approval)
PENDING, SUCCESS, FAILURE, ERROR = "pending", "success", "failure", "error"  # commit status states
SUMMARY_LINES = 12
SUMMARY_CHARS = 1500
MESSAGE_CHARS = 600
DESCRIPTION_CHARS = 140
MARKER = "<!-- harness-run {namespace}/{name} {uid} -->"

_NUMBER = re.compile(r"[1-9][0-9]{0,9}")
_SHA = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")
_REASON = re.compile(r"[A-Za-z]{1,64}")
_WEB_URL = re.compile(r"https?://[A-Za-z0-9.:\[\]-]+(/[A-Za-z0-9._~%!$&'*+,;=:@/-]*)?")
_PULL_NUMBER = re.compile(r"/(?:pull|pulls|merge_requests)/([1-9][0-9]{0,9})$")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]")


@dataclass(frozen=True)
class ReportedRun:
    """What the forge is told of one run, read from the run (its forge context from its labels and
    annotations, as the receiver set them)."""

    namespace: str
    name: str
    uid: str
    trigger: str
    repository: str
    number: int  # the issue or pull request the event came from
    is_pull_request: bool
    stage: str
    reported: str | None  # the stage last reported
    comment_id: str | None
    outcome: str  # working | succeeded | failed | cancelled
    reason: str | None
    message: str | None
    summary: str | None
    pull_request_url: str | None
    pull_request_number: int | None
    head_sha: str | None  # where the commit status goes: the commit pushed, else the PR head the event saw
    tokens: int | None
    cost_usd: float | None
    cost_source: str | None
    duration: str | None
    # While the change awaits approval: its files, + and - lines, and the paths that need the approval.
    kept: tuple[int, int, int, tuple[str, ...]] | None = None

    @property
    def marker(self) -> str:
        """The hidden first line that makes the comment recognisably this run's."""
        return MARKER.format(namespace=self.namespace, name=self.name, uid=self.uid)


@dataclass(frozen=True)
class CommitStatus:
    """One commit status (GitHub's and Gitea's states; forge calls map them for GitLab)."""

    sha: str
    state: str
    context: str
    description: str


def _succeeded(status: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The Succeeded condition's (status, reason); (None, None) while there is none."""
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Succeeded":
            return condition.get("status"), condition.get("reason")
    return None, None


def compute_outcome(status: Mapping[str, Any]) -> str:
    """working, or how the run ended: from its Succeeded condition, never from the phase."""
    state, reason = _succeeded(status)
    if state == "True":
        return "succeeded"
    if state == "False":
        return "cancelled" if reason == Reason.Cancelled else "failed"
    return AWAITING if reason == Reason.AwaitingApproval else "working"


def _pull_request(changes: Mapping[str, Any]) -> tuple[str | None, int | None]:
    """The PR's URL (only a plain http(s) URL: it is shown as a link) and number (status's, else the
    URL's last segment as each forge writes it)."""
    url = changes.get("pullRequestURL")
    url = url if isinstance(url, str) and _WEB_URL.fullmatch(url) else None
    number = changes.get("pullRequestNumber")
    if not isinstance(number, int) or isinstance(number, bool) or number < 1:
        found = _PULL_NUMBER.search(url) if url else None
        number = int(found.group(1)) if found else None
    return url, number


def _tokens(usage: Mapping[str, Any]) -> int | None:
    counts = [usage.get(k) for k in ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens")]
    known = [c for c in counts if isinstance(c, int)]
    return sum(known) if known else None


def compute_report_stage(outcome: str, pull_request_url: str | None) -> str:
    """The stage a run is at, for the forge: working or finished, with its pull request known or not."""
    if outcome == AWAITING:
        return AWAITING
    stage = WORKING if outcome == "working" else FINISHED
    return f"{stage}+pr" if pull_request_url else stage


def build_reported_run(run: Mapping[str, Any]) -> ReportedRun | None:
    """The run as the forge is told of it; None when it is not a trigger's (its forge context is missing
    or malformed: nothing can be said, and nothing is guessed)."""
    meta = run.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    number, repository = (
        str(labels.get(LABEL_THREAD) or ""),
        str(annotations.get(ANNOTATION_REPOSITORY) or ""),
    )
    trigger = str(labels.get(LABEL_TRIGGER) or "")
    if not trigger or not _NUMBER.fullmatch(number) or "/" not in repository:
        return None
    status = run.get("status") or {}
    changes, usage = status.get("changes") or {}, status.get("usage") or {}
    progress = status.get("progress") or {}
    outcome = compute_outcome(status)
    pr_url, pr_number = _pull_request(changes)
    _, condition_reason = _succeeded(status)
    reason = status.get("reason") or condition_reason
    commit, event_head = changes.get("commit"), annotations.get(ANNOTATION_HEAD)
    head = next((s for s in (commit, event_head) if isinstance(s, str) and _SHA.fullmatch(s)), None)
    cost = usage.get("costUSD") if usage else progress.get("costUSD")
    comment_id = annotations.get(ANNOTATION_COMMENT_ID)
    return ReportedRun(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        trigger=trigger,
        repository=repository,
        number=int(number),
        is_pull_request=annotations.get(ANNOTATION_THREAD_KIND) == THREAD_PULL,
        stage=compute_report_stage(outcome, pr_url),
        reported=annotations.get(ANNOTATION_REPORTED),
        comment_id=comment_id if isinstance(comment_id, str) and _NUMBER.fullmatch(comment_id) else None,
        outcome=outcome,
        reason=reason if isinstance(reason, str) and _REASON.fullmatch(reason) else None,
        message=status.get("message") if outcome in ("failed", "cancelled") else None,
        summary=(status.get("output") or {}).get("excerpt") if outcome != "working" else None,
        pull_request_url=pr_url,
        pull_request_number=pr_number,
        head_sha=head,
        tokens=_tokens(usage) if usage else progress.get("tokens"),
        cost_usd=float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None,
        cost_source=usage.get("costSource") if usage else None,
        duration=progress.get("duration") if isinstance(progress.get("duration"), str) else None,
        kept=_kept(changes) if outcome == AWAITING else None,
    )


def _kept(changes: Mapping[str, Any]) -> tuple[int, int, int, tuple[str, ...]]:
    counts = [changes.get(k) for k in ("files", "insertions", "deletions")]
    files, added, removed = (c if isinstance(c, int) and not isinstance(c, bool) else 0 for c in counts)
    paths = changes.get("approvalPaths")
    return files, added, removed, tuple(str(p) for p in paths) if isinstance(paths, list) else ()


def is_report_due(report: ReportedRun) -> bool:
    """The run has reached a stage the forge has not been told of."""
    return report.stage != report.reported


def build_fenced(text: str, max_lines: int, max_chars: int) -> str:
    """Untrusted text as a fenced block: its first lines (bounded), control and direction characters
    dropped, in a fence longer than any run of backticks in it, so no line of it ends the block (inside
    it, nothing mentions, links or renders)."""
    lines = _CONTROL.sub("", text.replace("\r\n", "\n").replace("\r", "\n")).split("\n")
    kept = "\n".join(lines[:max_lines])
    cut = len(lines) > max_lines or len(kept) > max_chars
    kept = kept[:max_chars].rstrip("\n")
    longest = max((len(run) for run in re.findall(r"`+", kept)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{kept}\n{fence}" + ("\n(cut; the whole output is on the run)" if cut else "")


_HEADLINE = {
    "working": "is working on it",
    "succeeded": "succeeded",
    "failed": "failed",
    "cancelled": "was cancelled",
    AWAITING: "awaits approval",
}


def _figures(report: ReportedRun) -> str | None:
    parts = []
    if report.tokens is not None:
        parts.append(f"tokens: {report.tokens:,}")
    if report.cost_usd is not None:
        source = (
            f" ({report.cost_source})" if report.cost_source in ("metered", "reported", "computed") else ""
        )
        parts.append(f"cost: ${report.cost_usd:.4f}{source}")
    if report.duration:
        parts.append(f"time: {_CONTROL.sub('', report.duration)[:32]}")
    return " · ".join(parts) or None


def build_comment_body(report: ReportedRun) -> str:
    """The comment's markdown: the hidden marker, the outcome, the pull request, a short summary (the
    output's first lines), tokens and cost, and how to see more."""
    headline = f"**HarnessRun `{report.namespace}/{report.name}` {_HEADLINE[report.outcome]}**"
    if report.reason and report.outcome in ("failed", "cancelled"):
        headline += f" (`{report.reason}`)"
    lines = [report.marker, headline, ""]
    if report.pull_request_url:
        lines += [f"Pull request: {report.pull_request_url}", ""]
    if report.kept is not None:
        files, added, removed, paths = report.kept
        lines += [f"The change is kept, not pushed: {files} files changed (+{added} -{removed}).", ""]
        if paths:  # file names the agent chose: untrusted text, fenced
            lines += ["It touches paths that need an approval:", build_fenced("\n".join(paths), 10, 2000), ""]
        lines += [
            f"Approve: `harnessctl approve {report.name} -n {report.namespace}` · reject: "
            f"`harnessctl reject {report.name} -n {report.namespace} --reason TEXT`",
            "",
        ]
    figures = _figures(report)
    if figures:
        lines += [figures, ""]
    if report.message:
        lines += ["Why:", build_fenced(report.message, 6, MESSAGE_CHARS), ""]
    if report.summary:
        lines += [
            "Summary (the output's first lines):",
            build_fenced(report.summary, SUMMARY_LINES, SUMMARY_CHARS),
        ]
        lines.append("")
    lines += [
        f"More: `kubectl -n {report.namespace} get hrun {report.name}` · "
        f"`harnessctl logs {report.name} -n {report.namespace}`",
        f"<sub>trigger `{report.trigger}` · this comment is edited as the run goes</sub>",
    ]
    return "\n".join(lines)


def compute_status_state(outcome: str) -> str:
    """The commit status state of an outcome: pending while it works or awaits approval, then success,
    failure or (cancelled) error."""
    return {"working": PENDING, AWAITING: PENDING, "succeeded": SUCCESS, "failed": FAILURE}.get(
        outcome, ERROR
    )


def build_commit_status(report: ReportedRun) -> CommitStatus | None:
    """The commit status on the PR's head (the commit pushed, else the head the event saw); None while the
    run has no pull request and its event none (an issue's run before its PR opens)."""
    if report.head_sha is None or (report.pull_request_url is None and not report.is_pull_request):
        return None
    said = {
        "working": "working",
        AWAITING: "awaits approval",
        "succeeded": "succeeded",
        "failed": "failed",
        "cancelled": "cancelled",
    }
    description = f"HarnessRun {report.name} {said[report.outcome]}"
    if report.reason and report.outcome in ("failed", "cancelled"):
        description += f": {report.reason}"
    if report.cost_usd is not None and report.outcome != "working":
        description += f", ${report.cost_usd:.4f}"
    return CommitStatus(
        sha=report.head_sha,
        state=compute_status_state(report.outcome),
        context=f"harness/{report.trigger}",
        description=description[:DESCRIPTION_CHARS],
    )


def build_report_patch(report: ReportedRun, comment_id: str | None) -> dict[str, Any]:
    """The run's metadata merge patch once its stage is reported: the stage, the comment's id, and its
    pull request's number as a label (the follow-up lookup selects by it)."""
    annotations = {ANNOTATION_REPORTED: report.stage}
    if comment_id is not None:
        annotations[ANNOTATION_COMMENT_ID] = comment_id
    metadata: dict[str, Any] = {"annotations": annotations}
    if report.pull_request_number is not None:
        metadata["labels"] = {LABEL_PULL_REQUEST: str(report.pull_request_number)}
    return {"metadata": metadata}
