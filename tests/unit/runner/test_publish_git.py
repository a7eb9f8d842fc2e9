"""runner/publish_git: git's refusal of a push, in its words and with the fix that works."""

from __future__ import annotations

import subprocess

import pytest

from harness_operator.runner.publish_git import describe_push_failure, last_lines

# What git printed when Gitea v1.27.3's pre-receive hook refused a reader's push (tests/forge).
GITEA_READER = """remote: error: User permission denied for writing.
To http://10.88.0.1:3000/owner/repo.git
 ! [remote rejected] harness/run-1 -> harness/run-1 (pre-receive hook declined)
error: failed to push some refs to 'http://10.88.0.1:3000/owner/repo.git'
"""
EXISTING = """To http://git.example/acme/payments.git
 ! [rejected]        harness/run-1 -> harness/run-1 (stale info)
error: failed to push some refs to 'http://git.example/acme/payments.git'
hint: Updates were rejected because the tip of your current branch is behind
"""
PROTECTED = """remote: error: GH006: Protected branch update failed for refs/heads/main.
To https://github.com/acme/payments.git
 ! [remote rejected] main -> main (protected branch hook declined)
error: failed to push some refs to 'https://github.com/acme/payments.git'
"""

HTTP_403 = """remote: Write access to repository not granted.
fatal: unable to access 'https://github.com/acme/payments.git/': The requested URL returned error: 403
"""


def failed(stderr: str) -> subprocess.CalledProcessError:
    return subprocess.CalledProcessError(1, ["git", "push"], stderr=stderr)


def test_the_origins_own_reason_is_kept_before_gits_summary() -> None:
    said = last_lines(failed(GITEA_READER))
    assert said.startswith("remote: error: User permission denied for writing. / To http")
    assert said.endswith("error: failed to push some refs to 'http://10.88.0.1:3000/owner/repo.git'")


def test_without_a_remote_reason_the_last_lines_only_and_no_hint() -> None:
    said = last_lines(failed(EXISTING))
    assert said.count(" / ") == 2 and "hint:" not in said and said.startswith("To http://git.example")


@pytest.mark.parametrize(
    ("stderr", "onto_existing", "fix"),
    [
        (GITEA_READER, False, "may not push to the repository: give it write access"),
        (GITEA_READER, True, "may not push to the repository: give it write access"),
        (EXISTING, False, "branch harness/run-1 exists on the origin: delete it"),
        (EXISTING, True, "does not let the token add commits to branch harness/run-1"),
        # A URL is no reason: a repository named like an HTTP status (found against the real Gitea).
        (EXISTING.replace("acme/payments", "owner-403feaeb/widgets"), False, "exists on the origin: delete"),
        # Nor is a commit id holding one (git names the commit it pushed; found as a flaky unit test).
        (
            EXISTING.replace("harness/run-1 ->", "1e062a3c323a6d8d403f7b9ad375a3037265dae0 ->"),
            False,
            "delete it",
        ),
        (HTTP_403, False, "may not push to the repository: give it write access"),
        (PROTECTED, False, "the origin's rules refused branch harness/run-1 (a protected branch, a hook)"),
        (PROTECTED, True, "does not let the token add commits to branch harness/run-1"),
        ("fatal: unable to access: Could not resolve host\n", False, "check the origin and the token"),
    ],
)
def test_each_refusal_gets_the_fix_that_works(stderr: str, onto_existing: bool, fix: str) -> None:
    message = describe_push_failure(last_lines(failed(stderr)), "harness/run-1", onto_existing)
    assert message.startswith("the origin refused the push of branch harness/run-1: ")
    assert fix in message, message
