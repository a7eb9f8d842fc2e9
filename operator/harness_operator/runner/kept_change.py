"""A change kept for approval (I/O, git in the publisher's own repository): the attempt's publisher keeps
it instead of pushing, and the approval's publisher makes the very same commit again from the kept patch.

What an approver saw is what is pushed: the kept patch must have the sha256 the operator recorded (its
ConfigMap is in the tenant's namespace, anyone with edit there could change it), and applied to the base
it must give the tree the attempt's publisher reported. The patch is applied to the index only (`git
apply --cached`), in the publisher's bare repository, with the publisher's own configuration and no
attributes of the repository's (no working tree, no filters).
"""

from __future__ import annotations

import hashlib
import subprocess

from harness_operator.api.reasons import Reason
from harness_operator.contract.changes import ChangesReport, KeptChange, PublishMode, PublishPlan
from harness_operator.runner.publish_git import Git, PublishError, last_lines


def keep_for_approval(
    git: Git, plan: PublishPlan, report: ChangesReport, commit: str
) -> ChangesReport | None:
    """The report of a change kept for approval (nothing pushed), or None when it is to be pushed now: the
    plan publishes a kept change already, or neither the run nor any path the change touches (the
    report's approval_paths) asks for an approval."""
    if plan.mode == PublishMode.publish_kept or not (plan.approval_required or report.approval_paths):
        return None
    if report.patch_sha256 is None:
        raise PublishError(
            Reason.PatchTooLarge,
            f"the patch is {report.patch_bytes} bytes, more than the {plan.patch_limit} a ConfigMap holds, "
            "and an approval publishes the change from its kept patch: nothing is pushed; split the task "
            "into smaller runs, or publish without workspace.publish.approval",
        )
    tree = git.text("rev-parse", f"{commit}^{{tree}}")
    paths = f" (it touches {', '.join(report.approval_paths)})" if report.approval_paths else ""
    return report.model_copy(
        update={
            "awaiting_approval": True,
            "tree": tree,
            "message": f"the change is kept for approval{paths}: nothing is pushed until it is approved",
        }
    )


def rebuild_kept(git: Git, plan: PublishPlan, kept: KeptChange, patch: bytes) -> str:
    """The commit of the kept change made again: `patch` (checked against the recorded sha256) applied to
    `kept.base` (already fetched), its tree checked against the recorded one, committed with the plan's
    message and author. PublishError KeptChangeMismatch when the patch or the tree is not the kept one."""
    digest = hashlib.sha256(patch).hexdigest()
    if digest != kept.patch_sha256:
        raise PublishError(
            Reason.KeptChangeMismatch,
            f"the kept patch (the changes ConfigMap) has sha256 {digest}, not the {kept.patch_sha256} the "
            "approved change had: it was edited after the attempt kept it, and nothing is pushed; start "
            "a new run",
        )
    try:
        git.run("read-tree", kept.base)
        git.run("apply", "--cached", "--binary", "--whitespace=nowarn", "-", stdin=patch)
        tree = git.text("write-tree")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        raise PublishError(
            Reason.KeptChangeMismatch,
            f"the kept patch does not apply to its base {kept.base}: {last_lines(exc)}; nothing is pushed",
        ) from None
    if tree != kept.tree:
        raise PublishError(
            Reason.KeptChangeMismatch,
            f"the kept patch applied to {kept.base} gives tree {tree}, not the approved change's "
            f"{kept.tree}: nothing is pushed; start a new run",
        )
    who = {
        "GIT_AUTHOR_NAME": plan.author_name,
        "GIT_AUTHOR_EMAIL": plan.author_email,
        "GIT_COMMITTER_NAME": plan.author_name,
        "GIT_COMMITTER_EMAIL": plan.author_email,
    }
    message = plan.commit_message.encode()
    return git.run("commit-tree", tree, "-p", kept.base, stdin=message, env=git.local | who).decode().strip()
