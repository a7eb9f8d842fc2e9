"""Publishing a run's change (spec.workspace.publish) and starting from one (spec.workspace.from) (pure).

The publisher's plan with the run's templates rendered, the branch name checked as git checks it, the
forge's API root and repository found from the git URL (access/forge_address.py), the change an earlier
run left resolved into where a workspace starts, and the report of the publishing container turned into
status.changes.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import (
    PATCH_LIMIT_BYTES,
    BranchIfExists,
    ChangesStatus,
    HarnessRun,
    ProtectedPathRule,
    PublishBranch,
    WorkspacePublish,
)
from harness_operator.contract.changes import (
    ChangesReport,
    PublishPlan,
    PullRequestPlan,
    SecretScanAllow,
    SecretScanPlan,
    SigningPlan,
)
from harness_operator.core.access.forge_address import compute_api_url, compute_repository
from harness_operator.core.access.git_egress import find_git_egress_problem
from harness_operator.core.attempt import Attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.objects.naming import changes_config_map_name
from harness_operator.core.resolve.resolution import Reader, Rejection, require_succeeded

PATCH_KEY = "changes.patch"
FROM_FIELD = "spec.workspace.from.run"
# What git check-ref-format refuses in a branch name (git-check-ref-format(1), rules 1-10).
_BAD_REF = re.compile(r"(^|/)\.|\.\.|[\x00-\x20\x7f~^:?*\[\\]|@\{|\.lock($|/)|//|/$|^/|\.$|^@$|^-")


def check_git_egress(run: HarnessRun, attempts: Sequence[Attempt], config: OperatorConfig) -> None:
    """Rejection (InvalidSpec) when an attempt's clone or publisher could not reach the run's git host or
    forge API (git_egress.find_git_egress_problem), naming the rule that fixes it."""
    for attempt in attempts:
        problem = find_git_egress_problem(run, attempt.egress, attempt.route, config)
        if problem is not None:
            where = f" (attempt {attempt.index}, provider {attempt.provider})" if len(attempts) > 1 else ""
            raise Rejection(Reason.InvalidSpec, problem + where)


def render_run_template(text: str, run: HarnessRun) -> str:
    """`$(run.name)` and `$(run.namespace)` replaced; `$(output)` is left for the publisher."""
    return text.replace("$(run.name)", run.metadata["name"]).replace(
        "$(run.namespace)", run.metadata["namespace"]
    )


def branch_problem(name: str) -> str | None:
    """Why git would refuse `name` as a branch, or None."""
    if not name or _BAD_REF.search(name):
        return (
            f'"{name}" is not a valid branch name (no spaces, "..", "~^:?*[\\", "@{{", a leading "-" or '
            '".", a trailing "/", "." or ".lock")'
        )
    return None


def publish_branch(run: HarnessRun) -> str | None:
    """The branch the run pushes (a pull request implies the default branch name), or None."""
    publish = _publish(run)
    if publish is None or (publish.branch is None and publish.pull_request is None):
        return None
    return render_run_template((publish.branch or PublishBranch()).name, run)


def fast_forwards(run: HarnessRun) -> bool:
    """Whether the run's push may add its commit to an existing branch (publish.branch.ifExists)."""
    publish = _publish(run)
    branch = publish.branch if publish else None
    return branch is not None and branch.if_exists == BranchIfExists.fast_forward


def check_publish(run: HarnessRun) -> None:
    """Rejection (InvalidSpec) when the branch the run would push is not a valid branch name, or when a
    FastForward push would not go onto the branch the workspace cloned (its name is a template, so the
    CRD's rule checks only a literal one)."""
    branch = publish_branch(run)
    problem = branch_problem(branch) if branch is not None else None
    if problem is not None:
        raise Rejection(Reason.InvalidSpec, f"spec.workspace.publish.branch.name: {problem}; pick another")
    git = run.spec.workspace.git if run.spec.workspace else None
    if fast_forwards(run) and (git is None or git.ref != branch):
        cloned = f'"{git.ref}"' if git and git.ref else "unset"
        raise Rejection(
            Reason.InvalidSpec,
            f'spec.workspace.publish.branch.ifExists: FastForward adds a commit to the branch "{branch}", '
            f'so the workspace must clone it: set spec.workspace.git.ref to "{branch}" (it is {cloned}), '
            "or set ifExists: Fail to push a new branch",
        )


def build_secret_scan_plan(config: OperatorConfig) -> SecretScanPlan | None:
    """The publisher's secret scan as the platform set it (chart publishing.secretScan), None when off."""
    if not config.secret_scan:
        return None
    allow = SecretScanAllow(
        paths=list(config.secret_scan_allow_paths),
        rules=list(config.secret_scan_allow_rules),
        fingerprints=list(config.secret_scan_allow_fingerprints),
    )
    return SecretScanPlan(allow=allow)


def build_publish_plan(
    run: HarnessRun,
    working_dir: str,
    secret_envs: list[str],
    timeout_seconds: int,
    protected_paths: list[ProtectedPathRule],
    secret_scan: SecretScanPlan | None = None,
    sign: SigningPlan | None = None,
) -> PublishPlan | None:
    """What the publishing container does for this run, or None when it publishes nothing;
    `protected_paths`: the rules merged (core/pod/protected_paths.py); `sign`: how it signs the pushed
    commit (core/pod/signing.py)."""
    publish = _publish(run)
    git = run.spec.workspace.git if run.spec.workspace else None
    if publish is None or git is None:
        return None
    request = None
    if publish.pull_request is not None:
        pr = publish.pull_request
        request = PullRequestPlan(
            forge=pr.forge,
            api_url=pr.api_url or compute_api_url(pr.forge, git.url),
            repository=pr.repository or compute_repository(pr.forge, git.url, pr.api_url),
            # A FastForward run clones the pull request's own branch: its default base is the origin's.
            base=pr.base or (None if fast_forwards(run) else git.ref),
            title=render_run_template(pr.title, run),
            body=render_run_template(pr.body, run),
            draft=pr.draft,
        )
    return PublishPlan(
        url=git.url,
        working_dir=working_dir,
        patch_limit=PATCH_LIMIT_BYTES,
        branch=publish_branch(run),
        if_exists=BranchIfExists.fast_forward if fast_forwards(run) else BranchIfExists.fail,
        commit_message=render_run_template(publish.commit_message, run),
        pull_request=request,
        secret_envs=sorted(set(secret_envs)),
        timeout_seconds=timeout_seconds,
        protected_paths=protected_paths,
        approval_required=bool(publish.approval and publish.approval.required),
        secret_scan=secret_scan,
        sign=sign,
    )


@dataclass(frozen=True)
class WorkspaceStart:
    """Where a workspace starts from an earlier run's change: `commit` checked out, then the patch (in
    ConfigMap `patch_config_map`, checked against `patch_sha256`) applied, when there is one."""

    commit: str
    patch_config_map: str | None = None
    patch_sha256: str | None = None


def resolve_start(reader: Reader, run: HarnessRun) -> WorkspaceStart | None:
    """The start spec.workspace.from names, once that run has succeeded (Waiting until then); Rejection
    when it changed another repository or kept no change to start from."""
    workspace = run.spec.workspace
    source = workspace.from_ if workspace else None
    if source is None or workspace is None or workspace.git is None:
        return None
    other = HarnessRun.model_validate(require_succeeded(reader, run, FROM_FIELD, source.run))
    other_git = other.spec.workspace.git if other.spec.workspace else None
    if other_git is None or other_git.url != workspace.git.url:
        raise Rejection(
            Reason.ChangesUnavailable,
            f'{FROM_FIELD}: HarnessRun "{source.run}" did not change {workspace.git.url} (its workspace '
            f"cloned {other_git.url if other_git else 'nothing'}); name a run of the same repository",
        )
    changes = other.status.changes if other.status else None
    if changes is None or changes.base is None:
        raise Rejection(
            Reason.ChangesUnavailable,
            f'{FROM_FIELD}: HarnessRun "{source.run}" published no change (it sets no workspace.publish)',
        )
    if changes.patch_config_map_name and changes.patch_sha256:
        return WorkspaceStart(changes.base, changes.patch_config_map_name, changes.patch_sha256)
    if changes.commit:  # a patch too large to keep: its branch holds the change
        return WorkspaceStart(changes.commit)
    return WorkspaceStart(changes.base)  # it changed nothing


def compute_changes(
    report: ChangesReport, patch_kept: bool, run_name: str
) -> tuple[ChangesStatus | None, tuple[str, str] | None]:
    """status.changes from the publisher's report, and the run's failure (reason, message) if it
    failed. `patch_kept`: the patch was read from the publisher's log and is in the changes ConfigMap."""
    if report.skipped:
        return None, None
    changes = ChangesStatus(
        base=report.base,
        commit=report.commit,
        branch=report.branch,
        files=report.files,
        insertions=report.insertions,
        deletions=report.deletions,
        patch_bytes=report.patch_bytes,
        patch_sha256=report.patch_sha256 if patch_kept else None,
        patch_config_map_name=changes_config_map_name(run_name) if patch_kept else None,
        pull_request_url=report.pull_request_url,
        pull_request_number=report.pull_request_number,
        tree=report.tree if report.awaiting_approval else None,
        approval_paths=report.approval_paths if report.awaiting_approval else None,
        signed=report.signed or None,
        signing_key=report.signing_key,
    )
    failure = (report.reason, report.message or report.reason) if report.reason else None
    if report.awaiting_approval and not patch_kept and failure is None:
        failure = (
            Reason.PublishLost,
            "the change was kept for approval but its patch could not be read from the publisher's log, "
            "so there is nothing to approve and nothing is pushed; run the task again",
        )
    return changes, failure


def lost_publish(terminated: Mapping[str, Any]) -> tuple[str, str]:
    """The failure of a publishing container that ended without a report it could write."""
    said = terminated.get("reason") or f"exit {terminated.get('exitCode')}"
    return (
        Reason.PublishLost,
        f"the publishing container ended ({said}) without a report: nothing is known to be published; "
        "if it was stopped at the pod's grace period, raise the operator's publishTimeoutSeconds",
    )


def build_changes_config_map_data(patch: bytes) -> dict[str, Any]:
    """The ConfigMap's payload: the patch as text when it is UTF-8 (most are), else as binaryData."""
    try:
        return {"data": {PATCH_KEY: patch.decode("utf-8")}}
    except UnicodeDecodeError:
        return {"binaryData": {PATCH_KEY: base64.b64encode(patch).decode("ascii")}}


def _publish(run: HarnessRun) -> WorkspacePublish | None:
    workspace = run.spec.workspace
    return workspace.publish if workspace else None
