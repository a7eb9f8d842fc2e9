"""A change kept for approval and published once approved (runner/kept_change.py, runner/publish_kept.py)
with real git: the attempt's publisher keeps it (nothing pushed), the approval's publisher makes the same
tree again from the kept patch alone and pushes it; an edited patch, a patch giving another tree, and a
branch that moved meanwhile are refused."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest
from tests.unit.runner.test_publish import TOKEN, Pod, git, push_to_origin

from harness_operator.api.reasons import Reason
from harness_operator.contract.changes import ChangesReport, KeptChange, PublishPlan
from harness_operator.contract.frame import decode_frame
from harness_operator.runner.publish_kept import publish_kept


@pytest.fixture
def pod(tmp_path: Path) -> Pod:
    return Pod(tmp_path).commit_and_clone()


def keep(pod: Pod, capfd: pytest.CaptureFixture[str]) -> tuple[ChangesReport, bytes]:
    """The agent's change, kept by the attempt's publisher: (its report, the patch from its log)."""
    (pod.workdir / "README.md").write_text("hello, world\n")
    (pod.workdir / "logo.bin").write_bytes(bytes(reversed(range(256))))
    (pod.workdir / "docs").mkdir()
    (pod.workdir / "docs" / "new.md").write_text("new\n")
    report = pod.publish(pod.plan(approval_required=True))
    patch = decode_frame(capfd.readouterr().err, report.patch_sha256)
    assert isinstance(patch, bytes)
    return report, patch


def kept_plan(pod: Pod, report: ChangesReport, **changes: object) -> PublishPlan:
    assert report.base and report.tree and report.patch_sha256
    kept = KeptChange(base=report.base, tree=report.tree, patch_sha256=report.patch_sha256)
    return pod.plan(
        mode="PublishKept", kept=kept.model_dump(by_alias=True), approval_required=True, **changes
    )


def publish_from(pod: Pod, plan: PublishPlan, patch: bytes) -> ChangesReport:
    (pod.tmp / "kept.patch").write_bytes(patch)
    (pod.tmp / "output").write_text("Renamed the greeting.")
    state = pod.tmp / "kept-state"
    state.mkdir(exist_ok=True)
    environ = {"HARNESS_PUBLISH_TOKEN": TOKEN}
    return publish_kept(plan, environ, str(pod.tmp / "kept.patch"), str(pod.tmp / "output"), state)


def test_a_change_needing_approval_is_kept_and_nothing_is_pushed(
    pod: Pod, capfd: pytest.CaptureFixture[str]
) -> None:
    report, patch = keep(pod, capfd)

    assert report.reason is None and report.awaiting_approval, report.message
    assert report.commit is None and report.branch is None
    assert set(pod.branches()) == {"main"}
    assert (report.files, report.insertions, report.deletions) == (3, 2, 1)
    assert report.patch_sha256 == hashlib.sha256(patch).hexdigest()
    assert report.tree is not None and len(report.tree) == 40
    assert "kept for approval" in (report.message or "")


def test_approval_paths_alone_keep_the_change(pod: Pod, capfd: pytest.CaptureFixture[str]) -> None:
    """The protected-path policy's RequireApproval paths (the report's approval_paths) keep a change the
    run itself did not ask to approve; a report naming them renders under 4 KiB."""
    from harness_operator.runner.kept_change import keep_for_approval
    from harness_operator.runner.publish_git import Git
    from harness_operator.runner.redact import Redactor

    report, _ = keep(pod, capfd)
    git_ = Git(pod.tmp / "again", str(pod.workdir), "", Redactor([]), 1e12)
    git_.init()
    git_.run("fetch", "-q", str(pod.origin), "main")
    commit = git_.text("rev-parse", "FETCH_HEAD")
    plain = report.model_copy(update={"awaiting_approval": False, "approval_paths": ["AGENTS.md"]})
    found = keep_for_approval(git_, pod.plan(), plain, commit)
    assert found is not None and found.awaiting_approval and "AGENTS.md" in (found.message or "")
    assert (
        keep_for_approval(git_, pod.plan(), plain.model_copy(update={"approval_paths": None}), commit) is None
    )
    long = plain.model_copy(update={"approval_paths": ["x" * 4000] * 50, "message": "m" * 5000})
    assert len(long.render().encode()) <= 4096


def test_a_patch_too_large_to_keep_cannot_wait_for_approval(
    pod: Pod, capfd: pytest.CaptureFixture[str]
) -> None:
    (pod.workdir / "README.md").write_text("x" * 5000 + "\n")
    report = pod.publish(pod.plan(approval_required=True, patch_limit=1000))
    assert report.reason == Reason.PatchTooLarge and "approval" in (report.message or "")
    assert set(pod.branches()) == {"main"}


def test_an_approved_change_is_pushed_as_kept(pod: Pod, capfd: pytest.CaptureFixture[str]) -> None:
    report, patch = keep(pod, capfd)
    # The workspace is gone: the approval's publisher has only the patch and the origin.
    subprocess.run(["rm", "-rf", str(pod.workdir)], check=True)

    done = publish_from(pod, kept_plan(pod, report), patch)

    assert done.reason is None, done.message
    assert done.branch == "harness/run-1" and pod.branches()["harness/run-1"] == done.commit
    assert git("rev-parse", f"{done.commit}^{{tree}}", cwd=pod.origin) == report.tree
    assert git("rev-parse", f"{done.commit}^", cwd=pod.origin) == report.base
    assert git("log", "-1", "--format=%an <%ae>|%s", done.commit, cwd=pod.origin) == (
        "harness-operator <harness-operator@users.noreply.invalid>|run-1"
    )
    assert git("show", f"{done.commit}:docs/new.md", cwd=pod.origin) == "new"


def test_an_edited_patch_is_refused(pod: Pod, capfd: pytest.CaptureFixture[str]) -> None:
    report, patch = keep(pod, capfd)
    edited = patch.replace(b"+hello, world", b"+hello, mallory")

    done = publish_from(pod, kept_plan(pod, report), edited)

    assert done.reason == Reason.KeptChangeMismatch and "sha256" in (done.message or "")
    assert set(pod.branches()) == {"main"}


def test_a_patch_giving_another_tree_is_refused(pod: Pod, capfd: pytest.CaptureFixture[str]) -> None:
    """Even with its sha256 recorded (the operator's record could only be as good as the report), the
    tree the approver was shown is what must come out."""
    report, patch = keep(pod, capfd)
    other = patch.replace(b"+hello, world", b"+hello, mallory")
    forged = report.model_copy(update={"patch_sha256": hashlib.sha256(other).hexdigest()})

    done = publish_from(pod, kept_plan(pod, forged), other)

    assert done.reason == Reason.KeptChangeMismatch and report.tree in (done.message or "")
    assert set(pod.branches()) == {"main"}


def test_a_patch_that_does_not_apply_is_refused(pod: Pod, capfd: pytest.CaptureFixture[str]) -> None:
    report, _ = keep(pod, capfd)
    junk = b"diff --git a/nope b/nope\n--- a/nope\n+++ b/nope\n@@ -1 +1 @@\n-a\n+b\n"
    forged = report.model_copy(update={"patch_sha256": hashlib.sha256(junk).hexdigest()})

    done = publish_from(pod, kept_plan(pod, forged), junk)

    assert done.reason == Reason.KeptChangeMismatch and "does not apply" in (done.message or "")


def test_a_branch_created_meanwhile_is_not_overwritten(pod: Pod, capfd: pytest.CaptureFixture[str]) -> None:
    report, patch = keep(pod, capfd)
    theirs = push_to_origin(pod, "harness/run-1", "someone else's\n")

    done = publish_from(pod, kept_plan(pod, report), patch)

    assert done.reason == Reason.PushRejected
    assert pod.branches()["harness/run-1"] == theirs


def test_fast_forward_onto_a_branch_that_moved_is_refused(
    pod: Pod, capfd: pytest.CaptureFixture[str]
) -> None:
    report, patch = keep(pod, capfd)
    moved = push_to_origin(pod, "main", "pushed while the change waited\n")

    done = publish_from(pod, kept_plan(pod, report, branch="main", if_exists="FastForward"), patch)

    assert done.reason == Reason.BranchMoved and moved in (done.message or "")
    assert pod.branches()["main"] == moved
