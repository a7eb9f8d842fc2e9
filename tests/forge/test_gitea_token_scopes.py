"""Which of Gitea's token scopes each of the loop's writes needs, asked of a real Gitea: the publisher's
push and pull request need `write:repository`; the reporting step's comment (made once, then edited) needs
`write:issue` and its commit status `write:repository`. A token with the other scope is refused (403).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.lib.gitea import Gitea, GiteaError, User


@pytest.fixture
def pull(gitea: Gitea, owner: User) -> tuple[str, int, str]:
    """(repository, pull request number, its head commit) of a repository of owner's."""
    gitea.create_repo(owner.name, "widgets", {"README.md": "hello\n"})
    repository = f"{owner.name}/widgets"
    me = gitea.as_user(owner.name)
    me.update_file(repository, "README.md", "hello, world\n", "main", "Greet", new_branch="harness/fix-1")
    opened = me.create_pull_request(repository, "harness/fix-1", "main", "Greet")
    return repository, int(opened["number"]), str(opened["head"]["sha"])


def as_token(gitea: Gitea, token: str) -> Gitea:
    """A client holding only `token` (no admin, no Sudo)."""
    return replace(gitea, token=token, sudo=None)


def test_the_report_comment_and_its_edit_need_write_issue(
    gitea: Gitea, owner: User, pull: tuple[str, int, str]
) -> None:
    repository, number, _ = pull
    issues = as_token(gitea, gitea.create_token(owner, ["write:issue"]))
    made = issues.comment(repository, number, "Working on it.")
    issues.call(
        "PATCH", f"/repos/{repository}/issues/comments/{made['id']}", {"body": "Done: 1 file changed."}
    )
    assert [c["body"] for c in gitea.comments(repository, number)] == ["Done: 1 file changed."]

    repo_only = as_token(gitea, gitea.create_token(owner, ["write:repository"]))
    with pytest.raises(GiteaError) as refused:
        repo_only.comment(repository, number, "Not with this token.")
    assert refused.value.status == 403, refused.value


def test_the_commit_status_needs_write_repository(
    gitea: Gitea, owner: User, pull: tuple[str, int, str]
) -> None:
    repository, _, head = pull
    repo = as_token(gitea, gitea.create_token(owner, ["write:repository"]))
    repo.set_status(repository, head, "pending", "harness/fix-issues", "The agent is working")
    repo.set_status(repository, head, "success", "harness/fix-issues", "Done")
    combined = gitea.combined_status(repository, head)
    assert combined["state"] == "success"
    # One context, its newest state: a status per update does not pile up as separate checks.
    assert [(s["context"], s["status"]) for s in combined["statuses"]] == [("harness/fix-issues", "success")]

    issues_only = as_token(gitea, gitea.create_token(owner, ["write:issue", "read:repository"]))
    with pytest.raises(GiteaError) as refused:
        issues_only.set_status(repository, head, "failure", "harness/fix-issues")
    assert refused.value.status == 403, refused.value
