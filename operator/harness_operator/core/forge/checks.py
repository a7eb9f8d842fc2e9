"""The checks on the commit a trigger's run pushed: the deliveries that say they changed, the runs such a
delivery marks, when the reporting step reads them again, and what the forge's answers say (pure).

A delivery is only a nudge: its body is not believed for the state. The receiver marks the runs that
pushed the delivery's commit (annotation checks-changed = `<sha>@<12 hex of the delivery>`); the reporting
step then reads the checks from the forge's API with its own token and records the nudge it answered
(checks-read), so a read is due exactly when the two differ: level-based, as the reports' stages are.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness_operator.api.v1alpha1 import GROUP, ChecksState, ChecksStatus, Forge
from harness_operator.core.forge.events import REPORT_CONTEXT_PREFIX
from harness_operator.core.objects.naming import ANNOTATION_REPOSITORY, LABEL_TRIGGER

ANNOTATION_CHECKS_CHANGED = f"{GROUP}/checks-changed"  # the receiver's nudge
ANNOTATION_CHECKS_READ = f"{GROUP}/checks-read"  # the nudge (or commit) the reporting step last read for
_SHA = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")
_PULL_URL = re.compile(r"https?://\S+")
# Each forge's word for a check's state, as one of ours (a word not listed counts as pending).
_GITHUB_CONCLUSIONS = {
    "success": ChecksState.success,
    "neutral": ChecksState.success,
    "skipped": ChecksState.success,
    "failure": ChecksState.failure,
    "timed_out": ChecksState.failure,
    "action_required": ChecksState.failure,
    "cancelled": ChecksState.error,
    "stale": ChecksState.error,
}
_STATUS_STATES = {  # GitHub's and Gitea's commit statuses
    "success": ChecksState.success,
    "warning": ChecksState.success,  # Gitea: passed with warnings
    "skipped": ChecksState.success,  # Gitea
    "failure": ChecksState.failure,
    "error": ChecksState.error,
}
_GITLAB_STATES = {
    "success": ChecksState.success,
    "skipped": ChecksState.success,
    "failed": ChecksState.failure,
    "canceled": ChecksState.error,
}


@dataclass(frozen=True)
class ChecksChanged:
    """A delivery saying the checks of commit `sha` of `repository` changed."""

    repository: str
    sha: str
    delivery: str  # sha256 hex of the body

    @property
    def nudge(self) -> str:
        return f"{self.sha}@{self.delivery[:12]}"


def _obj(node: Any, *keys: str) -> dict[str, Any]:
    for key in keys:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def _str(node: Any, key: str) -> str:
    value = node.get(key) if isinstance(node, dict) else None
    return value if isinstance(value, str) else ""


def _header(headers: Mapping[str, str], name: str) -> str:
    return next((str(v) for k, v in headers.items() if k.lower() == name), "")


def _commit_of(forge: str, event: str, payload: dict[str, Any]) -> tuple[str, str, str]:
    """(repository, commit, check name) a checks event is about; ('', '', '') for any other event."""
    if forge == Forge.github:
        repository = _str(_obj(payload, "repository"), "full_name")
        if event == "status":
            return repository, _str(payload, "sha"), _str(payload, "context")
        if event == "check_run":
            run = _obj(payload, "check_run")
            return repository, _str(run, "head_sha"), _str(run, "name")
        if event == "check_suite":
            return repository, _str(_obj(payload, "check_suite"), "head_sha"), ""
    elif forge == Forge.gitea:
        if event == "status":
            return (
                _str(_obj(payload, "repository"), "full_name"),
                _str(payload, "sha"),
                _str(payload, "context"),
            )
    elif forge == Forge.gitlab:
        repository = _str(_obj(payload, "project"), "path_with_namespace")
        if event == "Pipeline Hook":
            return repository, _str(_obj(payload, "object_attributes"), "sha"), ""
        if event == "Job Hook":
            return repository, _str(payload, "sha"), _str(payload, "build_name")
    return "", "", ""


def parse_checks_changed(
    forge: str, headers: Mapping[str, str], body: bytes, delivery: str
) -> ChecksChanged | None:
    """The commit whose checks a verified delivery says changed (GitHub status, check_run, check_suite;
    Gitea status; GitLab Pipeline Hook, Job Hook), any state; None for any other delivery and for the
    harness's own commit status (context harness/<trigger>), which is not one of the checks."""
    names: dict[str, str] = {
        Forge.github: _header(headers, "x-github-event"),
        Forge.gitea: _header(headers, "x-gitea-event-type") or _header(headers, "x-gitea-event"),
        Forge.gitlab: _header(headers, "x-gitlab-event"),
    }
    event = names.get(forge, "")
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(payload, dict):
        return None
    repository, sha, name = _commit_of(forge, event, payload)
    if not repository or not _SHA.fullmatch(sha) or name.startswith(REPORT_CONTEXT_PREFIX):
        return None
    return ChecksChanged(repository, sha, delivery)


def _pushed(run: Mapping[str, Any]) -> str | None:
    """The commit a run pushed with a pull request (status.changes), else None."""
    changes = (run.get("status") or {}).get("changes") or {}
    commit, url = changes.get("commit"), changes.get("pullRequestURL")
    if isinstance(commit, str) and _SHA.fullmatch(commit) and isinstance(url, str) and _PULL_URL.match(url):
        return commit
    return None


def select_runs_to_nudge(runs: Iterable[Mapping[str, Any]], changed: ChecksChanged) -> list[tuple[str, str]]:
    """(name, uid) of the trigger's runs that pushed the commit to a pull request of the repository and are
    not marked with this nudge yet."""
    chosen = []
    for run in runs:
        meta = run.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        same = str(annotations.get(ANNOTATION_REPOSITORY) or "").casefold() == changed.repository.casefold()
        if (
            same
            and _pushed(run) == changed.sha
            and annotations.get(ANNOTATION_CHECKS_CHANGED) != changed.nudge
        ):
            chosen.append((str(meta.get("name") or ""), str(meta.get("uid") or "")))
    return chosen


def compute_checks_due(run: Mapping[str, Any]) -> str | None:
    """What a read of the run's checks now answers (the nudge, or the commit for the read at its end), or
    None when no read is due: the run is not a trigger's, pushed no commit to a pull request, or its checks
    were read for this already."""
    meta = run.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    commit = _pushed(run)
    if commit is None or not (meta.get("labels") or {}).get(LABEL_TRIGGER):
        return None
    changed = str(annotations.get(ANNOTATION_CHECKS_CHANGED) or "")
    due = changed if changed.startswith(f"{commit}@") else commit
    return None if annotations.get(ANNOTATION_CHECKS_READ) == due else due


def build_checks_read_patch(due: str) -> dict[str, Any]:
    """The run's metadata merge patch once its checks are read for `due`."""
    return {"metadata": {"annotations": {ANNOTATION_CHECKS_READ: due}}}


def _classify(forge: str, kind: str, item: Mapping[str, Any]) -> tuple[str, ChecksState]:
    """(the check's name, its state) of one item of a forge's answer."""
    if kind == "check_run":  # GitHub's check runs
        name = _str(item, "name")
        if _str(item, "status") != "completed":
            return name, ChecksState.pending
        return name, _GITHUB_CONCLUSIONS.get(_str(item, "conclusion"), ChecksState.pending)
    if forge == Forge.gitlab:  # a commit's statuses: its pipelines' jobs and external statuses
        state = _GITLAB_STATES.get(_str(item, "status"), ChecksState.pending)
        if state == ChecksState.failure and item.get("allow_failure") is True:
            state = ChecksState.success
        return _str(item, "name"), state
    state_word = _str(item, "state") or _str(item, "status")  # Gitea names it status
    return _str(item, "context"), _STATUS_STATES.get(state_word, ChecksState.pending)


def _items(forge: str, answers: Sequence[bytes]) -> list[tuple[str, Mapping[str, Any]]]:
    """Every check in the answers of build_checks_calls' calls, in order; ValueError for an answer of
    another shape."""
    found: list[tuple[str, Mapping[str, Any]]] = []
    for answer in answers:
        parsed = json.loads(answer or b"null")
        if forge == Forge.gitlab and isinstance(parsed, list):
            found += [("status", i) for i in parsed if isinstance(i, dict)]
        elif isinstance(parsed, dict) and isinstance(parsed.get("check_runs"), list):
            found += [("check_run", i) for i in parsed["check_runs"] if isinstance(i, dict)]
        elif isinstance(parsed, dict) and "statuses" in parsed and isinstance(parsed["statuses"] or [], list):
            found += [("status", i) for i in parsed.get("statuses") or [] if isinstance(i, dict)]
        else:
            raise ValueError("the forge's answer is not a list of checks")
    return found


def compute_checks(forge: str, answers: Sequence[bytes], sha: str, now: str) -> ChecksStatus:
    """The checks of commit `sha` from the forge's answers: each counted once, the harness's own commit
    status left out; any failed makes failure, else any cancelled or broken error, else any unfinished
    pending, else success; none when there is no check."""
    states = [
        state
        for kind, item in _items(forge, answers)
        for name, state in [_classify(forge, kind, item)]
        if not name.startswith(REPORT_CONTEXT_PREFIX)
    ]
    failed = sum(s in (ChecksState.failure, ChecksState.error) for s in states)
    pending = states.count(ChecksState.pending)
    if ChecksState.failure in states:
        state = ChecksState.failure
    elif ChecksState.error in states:
        state = ChecksState.error
    elif pending:
        state = ChecksState.pending
    else:
        state = ChecksState.success if states else ChecksState.none
    return ChecksStatus(
        state=state,
        sha=sha,
        total=len(states),
        passed=states.count(ChecksState.success),
        failed=failed,
        pending=pending,
        read_time=now,
    )
