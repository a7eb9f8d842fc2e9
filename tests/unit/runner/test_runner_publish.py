"""The publishing container's work (runner/publish.py) with real git: an origin, a clone as the pod's
init container makes it, an agent's edits and attacks, the patch, the push."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from harness_operator.api.reasons import Reason
from harness_operator.contract.changes import ChangesReport, PublishPlan, Verdict
from harness_operator.contract.frame import decode_frame
from harness_operator.runner.publish import count_changes, publish

TOKEN = "ghp_publisher-write-token-0123456789"
VENDOR_KEY = "sk-ant-vendor-key-abcdefghijklmnop"


def git(*args: str, cwd: Path | None = None) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    identity = ["-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "init.defaultBranch=main"]
    done = subprocess.run(["git", *identity, *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


class Pod:
    """An origin, the workspace as the clone leaves it (base recorded), the verdict as the runner writes."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        seed = tmp / "seed"
        seed.mkdir()
        (seed / "README.md").write_text("hello\n")
        (seed / "logo.bin").write_bytes(bytes(range(256)))
        git("init", "-q", str(seed))
        git("add", "-A", cwd=seed)
        git("commit", "-q", "-m", "seed", cwd=seed)
        self.origin = tmp / "origin.git"
        git("clone", "-q", "--bare", str(seed), str(self.origin))
        self.workdir = tmp / "volume" / "repo"
        self.workdir.parent.mkdir()
        git("clone", "-q", "--depth", "1", f"file://{self.origin}", str(self.workdir))
        self.base = git("rev-parse", "HEAD", cwd=self.workdir)
        (tmp / "base").write_text(self.base + "\n")
        self.verdict = tmp / "verdict.json"
        self.verdict.write_text(Verdict(succeeded=True, output="Renamed the greeting.").model_dump_json())
        self.state = tmp / "state"
        self.state.mkdir()

    def plan(self, **changes: object) -> PublishPlan:
        fields: dict[str, object] = {
            "url": f"file://{self.origin}",
            "working_dir": str(self.workdir),
            "patch_limit": 1_000_000,
            "branch": "harness/run-1",
            "commit_message": "run-1",
            "secret_envs": ["HARNESS_PUBLISH_TOKEN", "ANTHROPIC_API_KEY"],
        }
        return PublishPlan.model_validate({**fields, **changes})

    def publish(self, plan: PublishPlan) -> ChangesReport:
        environ = {"HARNESS_PUBLISH_TOKEN": TOKEN, "ANTHROPIC_API_KEY": VENDOR_KEY}
        return publish(plan, environ, str(self.verdict), str(self.tmp / "base"), self.state)

    def branches(self) -> dict[str, str]:
        out = git("for-each-ref", "--format=%(refname:short) %(objectname)", "refs/heads", cwd=self.origin)
        return dict(line.split(" ") for line in out.splitlines())


@pytest.fixture
def pod(tmp_path: Path) -> Pod:
    return Pod(tmp_path)


def test_the_change_is_a_patch_and_a_commit_on_the_branch(
    pod: Pod, capfd: pytest.CaptureFixture[str]
) -> None:
    (pod.workdir / "README.md").write_text("hello, world\nsecond line\n")
    (pod.workdir / "new.txt").write_text("new\n")
    (pod.workdir / "logo.bin").write_bytes(bytes(reversed(range(256))))

    report = pod.publish(pod.plan())

    assert report.reason is None, report.message
    assert (report.files, report.insertions, report.deletions) == (3, 3, 1)
    assert report.base == pod.base and report.branch == "harness/run-1"
    assert pod.branches()["harness/run-1"] == report.commit
    assert git("show", f"{report.commit}:new.txt", cwd=pod.origin) == "new"
    assert git("rev-parse", f"{report.commit}^", cwd=pod.origin) == pod.base
    patch = decode_frame(capfd.readouterr().err, report.patch_sha256)
    assert isinstance(patch, bytes) and report.patch_bytes == len(patch)
    assert b"GIT binary patch" in patch and b"+hello, world" in patch
    # The patch applies to the base as a user would apply it.
    check = pod.tmp / "check"
    git("clone", "-q", str(pod.origin), str(check))
    (pod.tmp / "p.patch").write_bytes(patch)
    git("apply", "--check", str(pod.tmp / "p.patch"), cwd=check)


def test_an_unchanged_workspace_publishes_nothing(pod: Pod) -> None:
    report = pod.publish(pod.plan())
    assert (report.files, report.reason, report.branch) == (0, None, None)
    assert "harness/run-1" not in pod.branches()


def test_a_failed_agent_is_skipped(pod: Pod) -> None:
    (pod.workdir / "README.md").write_text("half done\n")
    pod.verdict.write_text(Verdict(succeeded=False).model_dump_json())
    assert pod.publish(pod.plan()).skipped
    pod.verdict.unlink()  # no verdict at all: the runner never reported
    assert pod.publish(pod.plan()).skipped
    assert "harness/run-1" not in pod.branches()


def test_the_workspace_git_config_and_hooks_are_never_used(pod: Pod) -> None:
    """The agent points the remote elsewhere (url, pushurl, insteadOf) and adds hooks: the push goes to the
    origin of the plan, to the run's branch, and no hook runs."""
    evil = pod.tmp / "evil.git"
    git("init", "-q", "--bare", str(evil))
    marker = pod.tmp / "hook-ran"
    config = pod.workdir / ".git" / "config"
    config.write_text(
        config.read_text()
        + f'[remote "origin"]\n\tpushurl = file://{evil}\n'
        + f'[url "file://{evil}"]\n\tinsteadOf = file://{pod.origin}\n'
        + "[core]\n\tfsmonitor = touch "
        + str(marker)
        + "\n"
    )
    hooks = pod.workdir / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    for hook in ("pre-push", "pre-commit", "post-commit", "reference-transaction"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {marker}\n")
        (hooks / hook).chmod(0o755)
    (pod.workdir / "README.md").write_text("changed\n")

    report = pod.publish(pod.plan())

    assert report.reason is None, report.message
    assert pod.branches()["harness/run-1"] == report.commit
    assert git("for-each-ref", cwd=evil) == ""
    assert not marker.exists()


def test_the_branch_is_never_forced(pod: Pod) -> None:
    (pod.workdir / "README.md").write_text("first\n")
    first = pod.publish(pod.plan())
    assert first.reason is None
    (pod.workdir / "README.md").write_text("second\n")
    for path in pod.state.iterdir():  # a new pod's own volume
        subprocess.run(["rm", "-rf", str(path)], check=True)

    again = pod.publish(pod.plan())

    assert again.reason == Reason.PushRejected
    assert "harness/run-1" in (again.message or "") and "set publish.branch.name" in (again.message or "")
    assert pod.branches()["harness/run-1"] == first.commit
    assert again.patch_sha256  # the patch is kept all the same


@pytest.mark.parametrize(
    ("where", "content"),
    [
        ("leak.txt", f"token={TOKEN}\n"),
        ("notes/key.json", '{"key": "' + VENDOR_KEY + '"}\n'),
        ("leak.bin", b"\0\1" + __import__("base64").b64encode(VENDOR_KEY.encode()) + b"\0"),
    ],
)
def test_a_change_holding_a_credential_is_refused(pod: Pod, where: str, content: str | bytes) -> None:
    path = pod.workdir / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())

    report = pod.publish(pod.plan())

    assert report.reason == Reason.ChangeHoldsCredential
    assert where in (report.message or "")
    assert TOKEN not in report.render() and VENDOR_KEY not in report.render()
    assert report.patch_sha256 is None and "harness/run-1" not in pod.branches()


def test_a_working_directory_the_agent_replaced_is_not_read(pod: Pod) -> None:
    outside = pod.tmp / "outside"
    outside.mkdir()
    (outside / "secret").write_text("not the repository\n")
    subprocess.run(["rm", "-rf", str(pod.workdir)], check=True)
    pod.workdir.symlink_to(outside)

    report = pod.publish(pod.plan())

    assert report.reason == Reason.WorkspaceNotGit
    assert "replaced" in (report.message or "")


def test_a_patch_over_the_limit_needs_a_branch(pod: Pod, capfd: pytest.CaptureFixture[str]) -> None:
    (pod.workdir / "big.txt").write_text("x" * 5000 + "\n")

    alone = pod.publish(pod.plan(branch=None, patch_limit=1000))
    assert alone.reason == Reason.PatchTooLarge
    assert "spec.workspace.publish.branch" in (alone.message or "")

    with_branch = pod.publish(pod.plan(patch_limit=1000))
    assert with_branch.reason is None and with_branch.patch_sha256 is None
    assert with_branch.patch_bytes and with_branch.patch_bytes > 1000
    assert pod.branches()["harness/run-1"] == with_branch.commit
    assert "HARNESS-OUTPUT-BEGIN" not in capfd.readouterr().err


def test_counts_read_renames_and_binary_files() -> None:
    numstat = b"3\t1\ta.txt\0-\t-\tlogo.bin\0" + b"0\t0\t\0old.txt\0new.txt\0"
    assert count_changes(numstat) == (3, 3, 1)
