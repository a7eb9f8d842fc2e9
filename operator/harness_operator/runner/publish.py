"""The publishing container of an attempt's pod (I/O): the agent's change as a patch, a branch, a PR.

    python3 -I -m harness_operator.runner.publish

A sidecar: it starts before the agent and waits. The kubelet stops it (SIGTERM) only once the runner's
and the agent's containers have ended, so no process of the agent is left when the workspace is read.
Then, if the runner's verdict (a volume the agent does not mount) says the agent succeeded, it takes the
change into a bare repository of its own (contract/changes.py: PUBLISH_DIR). The commit the clone
recorded is fetched from the origin, the only step but the push that holds the credential, and neither
names the working tree. The change is then taken with no token in git's environment and no credential
helper: the files are read as the bytes the agent wrote (runner/worktree.py: no filter, attribute,
encoding or configuration of the workspace's, no nested repository entered) and written as one commit on
that base by `git fast-import`. A change holding a granted credential's value, adding what the secret
scanner takes for a secret (runner/secret_scan.py), reaching into a submodule or linking out of the tree
is refused, and one touching a protected path is not pushed (refused, or held for approval:
runner/protected_paths.py). The patch goes to this container's log, framed; the commit is signed with
the platform's SSH key when the plan says so (runner/signing.py) and pushed to the run's branch with the
write credential, which only this container holds, never forced: only if the branch does not exist yet,
or (publish.branch.ifExists FastForward) onto the branch when it is still at the commit the workspace
cloned from it; the pull request is found or opened through the forge's API (runner/pull_request.py).
What happened is the termination message (ChangesReport); the exit code is 0 unless the publisher
itself broke.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from itertools import chain
from pathlib import Path
from types import FrameType

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import BranchIfExists
from harness_operator.contract.changes import (
    BASE_FILE,
    CLONE_TOKEN_ENV,
    PUBLISH_DIR,
    PUBLISH_PLAN_ENV,
    PUBLISH_TOKEN_ENV,
    VERDICT_FILE,
    ChangesReport,
    PublishPlan,
    Verdict,
)
from harness_operator.contract.frame import encode_frame
from harness_operator.runner.forges import PullRequestRef
from harness_operator.runner.kept_change import keep_for_approval
from harness_operator.runner.protected_paths import check_links, check_protected_paths
from harness_operator.runner.publish_git import Git, PublishError, describe_push_failure, last_lines
from harness_operator.runner.pull_request import find_pull_request, open_pull_request
from harness_operator.runner.redact import Redactor
from harness_operator.runner.secret_scan import GITLEAKS, check_secrets
from harness_operator.runner.signing import sign_commit
from harness_operator.runner.worktree import NestedRepository, fast_import_commit, parse_tree, take_entries

DEFAULT_TERMINATION_LOG = "/dev/termination-log"
# The ref of the taken change in the publisher's repository.
CHANGE_REF = "refs/harness/change"
COMMIT = re.compile(r"^([0-9a-f]{40}|[0-9a-f]{64})$")


def read_verdict(path: str) -> Verdict | None:
    try:
        return Verdict.model_validate_json(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def check_workdir(workdir: str) -> None:
    """The working directory is still the directory the clone made: not a link, not replaced by a file.
    (Its parent is the workspace volume, which the agent could write.)"""
    try:
        info = os.lstat(workdir)
    except OSError as exc:
        raise PublishError(
            Reason.WorkspaceNotGit, f"the working directory {workdir} is gone ({exc.strerror})"
        ) from None
    if not stat.S_ISDIR(info.st_mode) or os.path.realpath(workdir) != os.path.normpath(workdir):
        raise PublishError(
            Reason.WorkspaceNotGit,
            f"the working directory {workdir} was replaced by the agent (a link or a file): no change is "
            "taken from it",
        )


def read_base(path: str) -> str:
    try:
        base = Path(path).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        base = ""
    if not COMMIT.match(base):
        raise PublishError(
            Reason.WorkspaceNotGit,
            "the clone recorded no commit for the workspace, so there is nothing to take a change against",
        )
    return base


def count_changes(numstat: bytes) -> tuple[int, int, int]:
    """(files, insertions, deletions) from `git diff --numstat -z`; a binary file counts no lines."""
    files = insertions = deletions = 0
    fields = numstat.split(b"\0")
    i = 0
    while i < len(fields):
        head = fields[i]
        if not head:
            i += 1
            continue
        added, removed, path = [*head.split(b"\t", 2), b"", b""][:3]
        files += 1
        insertions += int(added) if added.isdigit() else 0
        deletions += int(removed) if removed.isdigit() else 0
        # A rename or copy (-z) leaves the path empty and names both paths in the next two fields.
        i += 3 if not path else 1
    return files, insertions, deletions


def find_credential(
    git: Git, base: str, commit: str, patch: bytes, secrets: Mapping[str, str]
) -> tuple[str, str] | None:
    """(path or 'the patch', variable) of a granted credential's value the change holds, in any form the
    runner redacts: in the patch and in every new or changed file as stored (binary ones too)."""
    if not secrets:
        return None
    raw = git.run("diff", "--raw", "-z", "--no-abbrev", "--no-renames", "--diff-filter=AMT", base, commit)
    fields = raw.split(b"\0")
    blobs: list[tuple[str, str]] = []
    for i in range(0, len(fields) - 1, 2):
        meta = fields[i].decode("ascii", "replace").split()
        if len(meta) >= 4 and meta[0].startswith(":") and not meta[1].startswith("16"):  # not a gitlink
            blobs.append((fields[i + 1].decode("utf-8", "replace"), meta[3]))
    for name, value in sorted(secrets.items()):
        one = Redactor([value])
        for path, blob in blobs:
            if one.finds(git.run("cat-file", "blob", blob)):
                return path, name
        if one.finds(patch):
            return "the patch", name
    return None


def origin_head(git: Git, url: str) -> str:
    """The origin's default branch (its HEAD), for a pull request that names no base."""
    heads = git.remote_run("ls-remote", "--symref", url, "HEAD").decode("utf-8", "replace")
    for line in heads.splitlines():
        if line.startswith("ref: refs/heads/"):
            return line.split("\t")[0].removeprefix("ref: refs/heads/")
    raise PublishError(
        Reason.PullRequestFailed, "the origin names no default branch: set publish.pullRequest.base"
    )


def remote_branch_head(git: Git, url: str, branch: str) -> str | None:
    """The commit the origin's branch is at, or None when it has no such branch."""
    ref = f"refs/heads/{branch}"
    for line in git.remote_run("ls-remote", url, ref).decode("utf-8", "replace").splitlines():
        commit, _, name = line.partition("\t")
        if name == ref:  # ls-remote's pattern also matches longer refs ending in it
            return commit
    return None


def branch_moved(branch: str, base: str, found: str | None) -> PublishError:
    now = f"is now at {found}" if found else "is gone (deleted)"
    return PublishError(
        Reason.BranchMoved,
        f"branch {branch} moved on the origin after the workspace cloned it: it was at {base} and {now}; "
        "the change is not pushed (never forced) and its patch is kept in status.changes when it fits; "
        "start a new run, which clones the branch's new head",
    )


def push_branch(git: Git, plan: PublishPlan, branch: str, base: str, commit: str) -> None:
    """`commit` (whose parent is `base`) pushed to `branch`, never forced. Fail: the branch is created,
    an existing one refused. FastForward: the branch must still be at `base`, which the origin reports
    first so that the reason is exact; the push is then a plain one, which the origin takes only as a
    fast-forward, so a push that slipped in between is refused all the same."""
    ref = f"refs/heads/{branch}"
    fast_forward = plan.if_exists == BranchIfExists.fast_forward
    try:
        if fast_forward:
            found = remote_branch_head(git, plan.url, branch)
            if found != base:
                raise branch_moved(branch, base, found)
            git.remote_run("push", "-q", "--no-verify", plan.url, f"{commit}:{ref}")
        else:
            # Create-only: the lease expects no such branch, so an existing one (main too) is refused.
            git.remote_run(
                "push", "-q", "--no-verify", f"--force-with-lease={ref}:", plan.url, f"{commit}:{ref}"
            )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        said = last_lines(exc)
        if fast_forward:
            try:
                found = remote_branch_head(git, plan.url, branch)
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
                found = base
            if found != base:
                raise branch_moved(branch, base, found) from None
        raise PublishError(Reason.PushRejected, describe_push_failure(said, branch, fast_forward)) from None


def publish(
    plan: PublishPlan,
    environ: Mapping[str, str],
    verdict_file: str = VERDICT_FILE,
    base_file: str = BASE_FILE,
    state: Path = Path(PUBLISH_DIR),
    scanner: str = GITLEAKS,
) -> ChangesReport:
    """Take, check, keep and publish the change; every failure is a report, never a raise."""
    verdict = read_verdict(verdict_file)
    if verdict is None or not verdict.succeeded:
        return ChangesReport(skipped=True, message="the agent did not succeed: no change is taken")
    secrets = {name: environ[name] for name in plan.secret_envs if environ.get(name)}
    redactor = Redactor(secrets.values())
    token = environ.get(PUBLISH_TOKEN_ENV) or ""
    report = ChangesReport()
    try:
        check_workdir(plan.working_dir)
        base = read_base(base_file)
        report = report.model_copy(update={"base": base})
        git = Git(
            state,
            plan.working_dir,
            token or environ.get(CLONE_TOKEN_ENV, ""),
            redactor,
            time.monotonic() + plan.timeout_seconds,
        )
        step = "fetching the cloned commit from the origin"
        try:
            git.init()
            git.remote_run("fetch", "-q", "--no-tags", "--depth=1", plan.url, base)
            step = "taking the working directory's files"
            commit = take_change(git, plan, base)
            if git.text("rev-parse", f"{commit}^{{tree}}") == git.text("rev-parse", f"{base}^{{tree}}"):
                return report.model_copy(
                    update={
                        "files": 0,
                        "insertions": 0,
                        "deletions": 0,
                        "message": "the agent changed nothing",
                    }
                )
            step = "comparing the change with its base"
            numstat = git.run("diff", "--numstat", "-z", base, commit)
            patch = git.run(
                "diff",
                "--binary",
                "--full-index",
                "--no-color",
                "--no-ext-diff",
                "--no-textconv",
                base,
                commit,
            )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            reason = Reason.PushRejected if step.startswith("fetching") else Reason.WorkspaceNotGit
            raise PublishError(reason, f"{step} failed: {last_lines(exc)}") from None
        except NestedRepository as exc:
            raise PublishError(Reason.ChangeTouchesSubmodule, str(exc)) from None
        files, insertions, deletions = count_changes(numstat)
        report = report.model_copy(
            update={
                "files": files,
                "insertions": insertions,
                "deletions": deletions,
                "patch_bytes": len(patch),
            }
        )
        held = find_credential(git, base, commit, patch, secrets)
        if held is not None:
            path, name = held
            raise PublishError(
                Reason.ChangeHoldsCredential,
                f"{path} holds the value of the credential {name}: the change is not kept, pushed or "
                "opened; take the value out of the workspace (the agent wrote it there)",
            )
        if plan.secret_scan is not None:
            check_secrets(git, base, commit, plan.secret_scan, scanner)
        check_links(git, base, commit)
        if len(patch) <= plan.patch_limit:
            sys.stderr.write("\n" + encode_frame(patch))
            sys.stderr.flush()
            report = report.model_copy(update={"patch_sha256": hashlib.sha256(patch).hexdigest()})
        elif plan.branch is None:
            raise PublishError(
                Reason.PatchTooLarge,
                f"the patch is {len(patch)} bytes, more than the {plan.patch_limit} a ConfigMap holds: set "
                "spec.workspace.publish.branch to keep the change on a branch",
            )
        if plan.branch is None:
            return report
        approval_paths = check_protected_paths(git, base, commit, plan.protected_paths)
        report = report.model_copy(update={"approval_paths": approval_paths or None})
        kept = keep_for_approval(git, plan, report, commit)
        if kept is not None:
            return kept
        return push_and_open(git, plan, report, base, commit, verdict.output, environ, redactor)
    except PublishError as exc:
        return report.model_copy(update={"reason": exc.reason, "message": redactor.text(exc.message)})


def push_and_open(
    git: Git,
    plan: PublishPlan,
    report: ChangesReport,
    base: str,
    commit: str,
    output: str,
    environ: Mapping[str, str],
    redactor: Redactor,
) -> ChangesReport:
    """`commit` (signed first when the plan says so) pushed to the plan's branch and the pull request found
    or opened: the one place a change leaves the publisher, the attempt's and an approved kept change's
    (runner/kept_change.py) alike. Once pushed, a failure of the pull request is reported with the
    pushed commit and branch (they stay on the origin for a pull request by hand)."""
    assert plan.branch is not None
    signature = sign_commit(git, commit, plan.sign, environ) if plan.sign is not None else None
    commit = signature.commit if signature is not None else commit
    push_branch(git, plan, plan.branch, base, commit)
    report = report.model_copy(update={"commit": commit, "branch": plan.branch})
    if signature is not None:
        report = report.model_copy(update={"signed": True, "signing_key": signature.key})
    if plan.pull_request is None:
        return report
    try:
        found = find_or_open_pull_request(git, plan, plan.branch, output, environ, redactor)
    except PublishError as exc:
        return report.model_copy(update={"reason": exc.reason, "message": redactor.text(exc.message)})
    return report.model_copy(update={"pull_request_url": found.url, "pull_request_number": found.number})


def find_or_open_pull_request(
    git: Git, plan: PublishPlan, branch: str, output: str, environ: Mapping[str, str], redactor: Redactor
) -> PullRequestRef:
    """The open pull request from the branch (FastForward), else the one opened into the plan's base (the
    origin's default branch without one)."""
    assert plan.pull_request is not None
    token = environ.get(PUBLISH_TOKEN_ENV) or ""
    if plan.if_exists == BranchIfExists.fast_forward:
        found = find_pull_request(plan.pull_request, branch, token, redactor)
        if found is not None:
            return found
    try:
        target = plan.pull_request.base or origin_head(git, plan.url)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        raise PublishError(
            Reason.PullRequestFailed, f"reading the origin's default branch failed: {last_lines(exc)}"
        ) from None
    return open_pull_request(plan, branch, target, output, token, redactor)


def take_change(git: Git, plan: PublishPlan, base: str) -> str:
    """The commit on `base` whose tree is the working directory as the agent left it: the base's files
    and the untracked ones `.gitignore` does not exclude, read as bytes (runner/worktree.py), streamed to
    `git fast-import` (which never sees the working tree)."""
    git.run("read-tree", base)
    base_tree = parse_tree(git.run("ls-tree", "-r", "-z", "--full-tree", base))
    entries = take_entries(plan.working_dir, base_tree, git.untracked())
    who = f"{plan.author_name} <{plan.author_email}>".encode()
    stream = fast_import_commit(CHANGE_REF, base, who, plan.commit_message.encode(), entries)
    git.run(
        "fast-import", "--quiet", "--force", "--date-format=now", "--done", stdin=chain(stream, [b"done\n"])
    )
    return git.text("rev-parse", CHANGE_REF)


def main(argv: list[str] | None = None) -> int:
    termination_log = (argv or sys.argv[1:] or [DEFAULT_TERMINATION_LOG])[0]
    plan = PublishPlan.model_validate_json(os.environ[PUBLISH_PLAN_ENV])
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    print("harness-publish: waiting for the agent's container to end", file=sys.stderr, flush=True)
    stop.wait()
    report = publish(plan, os.environ)
    finish(report, "published" if not report.skipped else "skipped", termination_log)
    return 0


def finish(report: ChangesReport, outcome: str, termination_log: str) -> None:
    """Tell the pod's log what happened (the report's message, else `outcome`) and write the report as
    the termination message, which the operator reads; a log that cannot be written is only logged."""
    print(f"harness-publish: {report.message or outcome}", file=sys.stderr, flush=True)
    try:
        Path(termination_log).write_text(report.render(), encoding="utf-8")
    except OSError as exc:
        print(f"harness-publish: cannot write the termination message: {exc}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
