"""The reporting step (controller/forge_reports.py) against a real Gitea: the walk of
tests/unit/controller/test_forge_reports.py with a token of only the scopes the step needs (write:issue for
the comment, write:repository for the commit status, read:user to find a comment whose id a crash lost):
one comment on the issue while the run works, edited in place when it ends with its pull request, and the
status on the pull request's head; a follow-up on the pull request marks the head its event saw. The API
server is that test's fake."""

from __future__ import annotations

from harness_operator.core.forge.report import ANNOTATION_REPORTED
from harness_operator.core.forge.triggering import ANNOTATION_COMMENT_ID, LABEL_PULL_REQUEST
from tests.lib.gitea import Gitea, User
from tests.unit.controller.test_forge_reports import (
    NAME,
    NS,
    ForgeSide,
    context_of,
    finish,
    setup,
    state_of,
    triggered_run,
)


def test_a_run_is_reported_on_a_real_gitea(gitea: Gitea, owner: User) -> None:
    gitea.create_repo(owner.name, "widgets", {"README.md": "hello\n"})
    repository = f"{owner.name}/widgets"
    me = gitea.as_user(owner.name)
    issue = int(me.create_issue(repository, "Greet the world")["number"])
    head = me.update_file(
        repository, "README.md", "hello, world\n", "main", "Greet", new_branch="harness/fix-1"
    )
    pull = me.create_pull_request(repository, "harness/fix-1", "main", "Greet")
    token = gitea.create_token(owner, ["write:issue", "write:repository"])
    side = ForgeSide(
        "gitea",
        gitea.base_url,
        token,
        repository,
        lambda number: gitea.comments(repository, number),
        lambda sha: gitea.statuses(repository, sha),
    )
    api, reporter = setup(side)
    api.runs[NAME] = triggered_run(side, issue)

    assert reporter.report(NS, NAME) is None
    [comment] = side.comments(issue)
    assert comment["user"]["login"] == owner.name
    assert comment["body"].startswith(f"<!-- harness-run {NS}/{NAME} uid-1 -->\n")
    assert "is working on it" in comment["body"]
    assert api.runs[NAME]["metadata"]["annotations"][ANNOTATION_COMMENT_ID] == str(comment["id"])

    finish(api.runs[NAME], side, int(pull["number"]), head)
    assert reporter.report(NS, NAME) is None
    [edited] = side.comments(issue)
    assert edited["id"] == comment["id"]
    assert f"Pull request: {pull['html_url']}" in edited["body"]
    assert "```text\nRenamed the function.\n@everyone done\n```" in edited["body"]
    [status] = side.statuses(head)
    assert (state_of(status), context_of(status)) == ("success", "harness/fixer")
    meta = api.runs[NAME]["metadata"]
    assert meta["labels"][LABEL_PULL_REQUEST] == str(pull["number"])
    assert meta["annotations"][ANNOTATION_REPORTED] == "finished+pr"
    assert api.events == []

    # The operator stopped after Gitea made the comment, before the run kept its id: with read:user the
    # token says whose it is, and the run's own marked comment is found and edited, not made again.
    api.secrets[("report-token", "token")] = gitea.create_token(
        owner, ["write:issue", "write:repository", "read:user"]
    )
    del meta["annotations"][ANNOTATION_COMMENT_ID]
    meta["annotations"][ANNOTATION_REPORTED] = "working"
    assert reporter.report(NS, NAME) is None
    assert [c["id"] for c in side.comments(issue)] == [comment["id"]]

    # A follow-up asked for on the pull request: its comment goes on the pull request, and the head its
    # event saw is marked pending while it works.
    api.runs[NAME] = triggered_run(side, int(pull["number"]), "pull", **{"agentharness.dev/forge-head": head})
    api.runs[NAME]["metadata"]["uid"] = "uid-2"
    assert reporter.report(NS, NAME) is None
    assert len(side.comments(int(pull["number"]))) == 1
    assert gitea.combined_status(repository, head)["state"] == "pending"
    assert api.events == []
