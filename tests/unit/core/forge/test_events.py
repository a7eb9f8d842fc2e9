"""Forge deliveries read into ForgeEvents (pure): payloads shaped as GitHub documents them, as Gitea v1.27.3
builds them (modules/structs/hook.go, services/webhook/notifier.go) and as GitLab documents them; the
events that start nothing; hostile bodies (odd types, missing fields, huge text) never raise."""

import hashlib
import json
from typing import Any

import pytest

from harness_operator.core.forge.events import (
    BODY_MAX,
    COMMENT_MAX,
    TITLE_MAX,
    ForgeEvent,
    Ignored,
    parse_event,
)

REPO = {"full_name": "acme/payments", "html_url": "http://gitea.test:3000/acme/payments"}


def encode(payload: Any) -> bytes:
    return json.dumps(payload).encode()


def parsed(forge: str, headers: dict[str, str], payload: Any) -> ForgeEvent:
    event = parse_event(forge, headers, encode(payload))
    assert isinstance(event, ForgeEvent), event
    return event


def ignored(forge: str, headers: dict[str, str], payload: Any) -> str:
    event = parse_event(forge, headers, encode(payload) if not isinstance(payload, bytes) else payload)
    assert isinstance(event, Ignored), event
    return event.reason


# --- GitHub ---------------------------------------------------------------------------------------

GH_ISSUE = {
    "number": 7,
    "title": "Rounding error in totals",
    "body": "Totals are off by one cent.",
    "html_url": "https://github.com/acme/payments/issues/7",
    "user": {"login": "stranger"},
    "author_association": "NONE",
    "labels": [{"name": "agent"}],
}
GH_PULL = {
    "number": 12,
    "title": "Fix rounding",
    "body": "Closes #7",
    "html_url": "https://github.com/acme/payments/pull/12",
    "head": {"ref": "agent/fix-rounding", "sha": "a" * 40},
    "base": {"ref": "main"},
}


def github(event: str, payload: dict[str, Any]) -> tuple[str, dict[str, str], dict[str, Any]]:
    return "github", {"X-GitHub-Event": event, "X-GitHub-Delivery": "d-1"}, payload


def test_github_issue_labeled_names_the_label_and_the_labeller() -> None:
    payload = {
        "action": "labeled",
        "issue": GH_ISSUE,
        "label": {"name": "agent"},
        "repository": REPO,
        "sender": {"login": "alice"},
    }
    event = parsed(*github("issues", payload))
    assert event == ForgeEvent(
        forge="github",
        kind="IssueLabeled",
        repository="acme/payments",
        number=7,
        is_pull_request=False,
        title="Rounding error in totals",
        body="Totals are off by one cent.",
        comment="",
        author="alice",  # who gave the label, not who wrote the issue
        association=None,
        label="agent",
        head_branch=None,
        head_sha=None,
        check=None,
        url="https://github.com/acme/payments/issues/7",
        delivery_key=hashlib.sha256(encode(payload)).hexdigest(),
        labels=("agent",),
    )


def test_github_issue_opened_is_not_read_its_labeled_deliveries_are() -> None:
    payload = {"action": "opened", "issue": GH_ISSUE, "repository": REPO, "sender": {"login": "alice"}}
    assert ignored(*github("issues", payload)) == "github issues opened is not a trigger event"


def test_github_issue_comment_on_an_issue_and_on_a_pull_request() -> None:
    comment = {"body": "/agent fix the totals", "user": {"login": "bob"}, "author_association": "MEMBER"}
    payload = {"action": "created", "issue": GH_ISSUE, "comment": comment, "repository": REPO}
    event = parsed(*github("issue_comment", payload))
    assert (event.kind, event.number, event.is_pull_request) == ("Command", 7, False)
    assert (event.comment, event.author, event.association) == ("/agent fix the totals", "bob", "MEMBER")
    on_pull = {**GH_ISSUE, "number": 12, "pull_request": {"url": "https://api.github.com/.../pulls/12"}}
    event = parsed(*github("issue_comment", {**payload, "issue": on_pull}))
    assert (event.kind, event.number, event.is_pull_request) == ("Command", 12, True)
    assert event.head_branch is None  # GitHub's issue_comment does not carry the head


def test_github_edited_or_deleted_comments_start_nothing() -> None:
    comment = {"body": "/agent go", "user": {"login": "bob"}}
    for action in ("edited", "deleted"):
        payload = {"action": action, "issue": GH_ISSUE, "comment": comment, "repository": REPO}
        assert "is not a trigger event" in ignored(*github("issue_comment", payload))


def test_github_review_comment_and_review_carry_the_pull_request_head() -> None:
    comment = {"body": "rename this", "user": {"login": "carol"}, "author_association": "COLLABORATOR"}
    payload = {"action": "created", "comment": comment, "pull_request": GH_PULL, "repository": REPO}
    event = parsed(*github("pull_request_review_comment", payload))
    assert (event.kind, event.number, event.is_pull_request) == ("ReviewComment", 12, True)
    assert (event.head_branch, event.head_sha, event.comment) == (
        "agent/fix-rounding",
        "a" * 40,
        "rename this",
    )
    review = {"body": "please add a test", "state": "changes_requested", "user": {"login": "carol"}}
    payload = {"action": "submitted", "review": review, "pull_request": GH_PULL, "repository": REPO}
    event = parsed(*github("pull_request_review", payload))
    assert (event.kind, event.comment, event.author) == ("ReviewComment", "please add a test", "carol")


@pytest.mark.parametrize(
    "review", [{"body": "LGTM", "state": "approved"}, {"body": None, "state": "commented"}, {"body": "  "}]
)
def test_github_an_approval_or_an_empty_review_starts_nothing(review: dict[str, Any]) -> None:
    payload = {"action": "submitted", "review": review, "pull_request": GH_PULL, "repository": REPO}
    assert "review that approves or says nothing" in ignored(*github("pull_request_review", payload))


def test_github_failed_check_run_names_its_pull_request_and_check() -> None:
    check = {
        "name": "unit tests",
        "conclusion": "failure",
        "head_sha": "b" * 40,
        "html_url": "https://github.com/acme/payments/runs/1",
        "pull_requests": [{"number": 12, "head": {"ref": "agent/fix-rounding", "sha": "b" * 40}}],
    }
    payload = {"action": "completed", "check_run": check, "repository": REPO, "sender": {"login": "ci"}}
    event = parsed(*github("check_run", payload))
    assert (event.kind, event.number, event.check, event.head_sha) == (
        "CheckFailed",
        12,
        "unit tests",
        "b" * 40,
    )
    passed = {**payload, "check_run": {**check, "conclusion": "success"}}
    assert ignored(*github("check_run", passed)) == "a check that did not fail is not a trigger event"


def test_github_failed_status_names_the_commit_not_the_pull_request() -> None:
    payload = {
        "sha": "c" * 40,
        "state": "failure",
        "context": "ci/lint",
        "target_url": "https://ci.example/1",
        "branches": [{"name": "agent/fix-rounding"}],
        "repository": REPO,
        "sender": {"login": "ci"},
    }
    event = parsed(*github("status", payload))
    assert (event.kind, event.number, event.head_sha, event.check) == ("CheckFailed", 0, "c" * 40, "ci/lint")
    assert "did not fail" in ignored(*github("status", {**payload, "state": "pending"}))
    assert ignored(*github("status", {**payload, "sha": None})) == "the commit status names no commit"
    # The reporting step's own status (a failed run's) must not start the run again.
    own = {**payload, "context": "harness/payments-agent"}
    assert ignored(*github("status", own)) == "a harness report's own commit status starts nothing"


@pytest.mark.parametrize("event", ["push", "pull_request", "ping", "", "star"])
def test_github_other_events_start_nothing(event: str) -> None:
    payload = {"action": "opened", "repository": REPO, "zen": "Keep it logically awesome."}
    assert ignored(*github(event, payload)).endswith("is not a trigger event")


# --- Gitea ----------------------------------------------------------------------------------------

GT_ISSUE = {
    "id": 31,
    "number": 3,
    "title": "Rename helper",
    "body": "The helper's name is misleading.",
    "html_url": "http://gitea.test:3000/acme/payments/issues/3",
    "user": {"login": "alice"},
    "labels": [{"id": 1, "name": "bug"}, {"id": 2, "name": "agent"}],
    "pull_request": None,
}
GT_PULL = {
    "number": 4,
    "title": "agent: rename helper",
    "body": "made by a run",
    "html_url": "http://gitea.test:3000/acme/payments/pulls/4",
    "head": {"label": "agent/x", "ref": "agent/x", "sha": "d" * 40, "repo_id": 1},
    "base": {"ref": "main"},
}


def gitea(event_type: str, payload: dict[str, Any]) -> tuple[str, dict[str, str], dict[str, Any]]:
    events = {"issue_label": "issues", "pull_request_comment": "issue_comment"}
    event = events.get(event_type, event_type)
    return "gitea", {"X-Gitea-Event": event, "X-Gitea-Event-Type": event_type}, payload


def test_gitea_label_updated_counts_every_label_of_the_issue() -> None:
    payload = {
        "action": "label_updated",
        "number": 3,
        "issue": GT_ISSUE,
        "repository": REPO,
        "sender": {"login": "alice"},
    }
    event = parsed(*gitea("issue_label", payload))
    assert (event.kind, event.number, event.author, event.labels) == (
        "IssueLabeled",
        3,
        "alice",
        ("bug", "agent"),
    )
    assert event.url == "http://gitea.test:3000/acme/payments/issues/3"
    opened = {**payload, "action": "opened"}
    assert "is not a trigger event" in ignored(*gitea("issues", opened))  # its label_updated follows


def test_gitea_comments_on_issues_and_pull_requests() -> None:
    comment = {"id": 9, "body": "/agent rename the function", "user": {"login": "bob"}}
    payload = {
        "action": "created",
        "issue": GT_ISSUE,
        "comment": comment,
        "repository": REPO,
        "sender": {"login": "bob"},
        "is_pull": False,
    }
    event = parsed(*gitea("issue_comment", payload))
    assert (event.kind, event.number, event.is_pull_request, event.author) == ("Command", 3, False, "bob")
    on_pull = {**payload, "issue": {**GT_ISSUE, "number": 4}, "pull_request": GT_PULL, "is_pull": True}
    event = parsed(*gitea("pull_request_comment", on_pull))
    assert (event.number, event.is_pull_request, event.head_branch, event.head_sha) == (
        4,
        True,
        "agent/x",
        "d" * 40,
    )
    assert event.comment == "/agent rename the function"


@pytest.mark.parametrize("event_type", ["pull_request_review_comment", "pull_request_review_rejected"])
def test_gitea_reviews_with_text_are_review_comments(event_type: str) -> None:
    payload = {
        "action": "reviewed",
        "number": 4,
        "pull_request": GT_PULL,
        "repository": REPO,
        "sender": {"login": "carol"},
        "review": {"type": event_type, "content": "add a test"},
    }
    event = parsed(*gitea(event_type, payload))
    assert (event.kind, event.number, event.comment, event.head_branch) == (
        "ReviewComment",
        4,
        "add a test",
        "agent/x",
    )
    empty = {**payload, "review": {"type": event_type, "content": ""}}
    assert "without text" in ignored(*gitea(event_type, empty))


def test_gitea_approvals_and_failed_statuses() -> None:
    payload = {"action": "reviewed", "pull_request": GT_PULL, "repository": REPO, "review": {"content": "ok"}}
    assert "is not a trigger event" in ignored(*gitea("pull_request_review_approved", payload))
    status = {
        "sha": "d" * 40,
        "state": "error",
        "context": "ci/build",
        "description": "build broke",
        "target_url": "http://ci.test/2",
        "repository": REPO,
        "sender": {"login": "ci"},
    }
    event = parsed(*gitea("status", status))
    assert (event.kind, event.number, event.head_sha, event.check) == ("CheckFailed", 0, "d" * 40, "ci/build")
    own = {**status, "state": "failure", "context": "harness/payments-agent"}
    assert ignored(*gitea("status", own)) == "a harness report's own commit status starts nothing"


# --- GitLab ---------------------------------------------------------------------------------------

GL_PROJECT = {
    "path_with_namespace": "acme/platform/payments",
    "web_url": "https://gitlab.test/acme/platform/payments",
}
GL_ISSUE = {
    "iid": 5,
    "title": "Slow report",
    "description": "It takes a minute.",
    "url": "https://gitlab.test/acme/platform/payments/-/issues/5",
}
GL_MR = {
    "iid": 6,
    "title": "agent: faster report",
    "description": "made by a run",
    "url": "https://gitlab.test/acme/platform/payments/-/merge_requests/6",
    "source_branch": "agent/fast",
    "last_commit": {"id": "e" * 40},
}


def gitlab(event: str, payload: dict[str, Any]) -> tuple[str, dict[str, str], dict[str, Any]]:
    return "gitlab", {"X-Gitlab-Event": event, "X-Gitlab-Token": "t"}, payload


def test_gitlab_issue_opened_with_a_label_or_given_one() -> None:
    payload = {
        "object_kind": "issue",
        "user": {"username": "alice"},
        "project": GL_PROJECT,
        "object_attributes": {**GL_ISSUE, "action": "open"},
        "labels": [{"title": "agent"}],
    }
    event = parsed(*gitlab("Issue Hook", payload))
    assert (event.kind, event.repository, event.number, event.labels) == (
        "IssueLabeled",
        "acme/platform/payments",
        5,
        ("agent",),
    )
    assert event.body == "It takes a minute."
    update = {
        **payload,
        "object_attributes": {**GL_ISSUE, "action": "update"},
        "changes": {
            "labels": {"previous": [{"title": "bug"}], "current": [{"title": "bug"}, {"title": "agent"}]}
        },
    }
    assert parsed(*gitlab("Issue Hook", update)).labels == ("agent",)  # only the label added
    unchanged = {**update, "changes": {"title": {"previous": "a", "current": "b"}}}
    assert ignored(*gitlab("Issue Hook", unchanged)) == "the issue was given no label"
    closed = {**payload, "object_attributes": {**GL_ISSUE, "action": "close"}}
    assert ignored(*gitlab("Issue Hook", closed)) == "gitlab Issue Hook close is not a trigger event"


def test_gitlab_notes_on_issues_merge_requests_and_diffs() -> None:
    base = {"object_kind": "note", "user": {"username": "bob"}, "project": GL_PROJECT}
    note = {
        **base,
        "object_attributes": {"note": "/agent speed it up", "noteable_type": "Issue"},
        "issue": GL_ISSUE,
    }
    event = parsed(*gitlab("Note Hook", note))
    assert (event.kind, event.number, event.is_pull_request, event.author) == ("Command", 5, False, "bob")
    on_mr = {
        **base,
        "object_attributes": {"note": "/agent again", "noteable_type": "MergeRequest"},
        "merge_request": GL_MR,
    }
    event = parsed(*gitlab("Note Hook", on_mr))
    assert (event.kind, event.number, event.is_pull_request, event.head_branch) == (
        "Command",
        6,
        True,
        "agent/fast",
    )
    diff = {
        **on_mr,
        "object_attributes": {"note": "use a set", "noteable_type": "MergeRequest", "type": "DiffNote"},
    }
    assert parsed(*gitlab("Note Hook", diff)).kind == "ReviewComment"
    commit = {**base, "object_attributes": {"note": "/agent x", "noteable_type": "Commit"}}
    assert ignored(*gitlab("Note Hook", commit)) == "a note on a Commit is not a trigger event"


def test_gitlab_failed_pipeline_of_a_merge_request() -> None:
    payload = {
        "object_kind": "pipeline",
        "object_attributes": {"id": 77, "status": "failed", "ref": "agent/fast", "sha": "f" * 40},
        "merge_request": GL_MR,
        "project": GL_PROJECT,
        "user": {"username": "ci"},
    }
    event = parsed(*gitlab("Pipeline Hook", payload))
    assert (event.kind, event.number, event.check, event.head_sha) == (
        "CheckFailed",
        6,
        "pipeline 77",
        "f" * 40,
    )
    running = {**payload, "object_attributes": {"status": "running"}}
    assert "did not fail" in ignored(*gitlab("Pipeline Hook", running))


# --- hostile bodies -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [b"", b"not json", b"[1, 2]", b'"text"', b"null", b"{" * 100_000, b'{"a": 1e999999}', b"\xff\xfe"],
)
@pytest.mark.parametrize("forge", ["github", "gitea", "gitlab"])
def test_an_unreadable_body_is_ignored_never_raised(forge: str, body: bytes) -> None:
    headers = {
        "X-GitHub-Event": "issues",
        "X-Gitea-Event-Type": "issue_label",
        "X-Gitlab-Event": "Issue Hook",
    }
    event = parse_event(forge, headers, body)
    assert isinstance(event, Ignored)


@pytest.mark.parametrize(
    "payload",
    [
        {"action": "labeled"},
        {"action": "labeled", "issue": "seven", "repository": REPO, "label": {"name": "agent"}},
        {"action": "labeled", "issue": {"number": "7"}, "repository": REPO, "label": {"name": "agent"}},
        {"action": "labeled", "issue": {"number": True}, "repository": REPO, "label": {"name": "agent"}},
        {"action": "labeled", "issue": {"number": -3}, "repository": REPO, "label": {"name": "agent"}},
        {"action": "labeled", "issue": {"number": 7}, "repository": {"full_name": ["x"]}},
        {"action": ["labeled"], "issue": GH_ISSUE, "repository": REPO},
    ],
)
def test_odd_shapes_are_ignored_with_a_reason(payload: dict[str, Any]) -> None:
    reason = ignored(*github("issues", payload))
    assert reason in (
        "the delivery names no repository",
        "the delivery names no issue or pull request number",
        "github issues is not a trigger event",
    )


def test_wrong_types_in_optional_fields_read_as_absent() -> None:
    payload = {
        "action": "labeled",
        "issue": {**GH_ISSUE, "title": 5, "body": {"x": 1}, "html_url": None},
        "label": ["agent"],
        "repository": REPO,
        "sender": "alice",
    }
    event = parsed(*github("issues", payload))
    assert (event.title, event.body, event.url, event.label, event.author) == ("", "", "", None, "")


def test_huge_text_is_cut_and_control_characters_dropped() -> None:
    comment = {"body": "/agent " + "x" * (10 * COMMENT_MAX), "user": {"login": "bob\x00\x1b"}}
    issue = {**GH_ISSUE, "title": "t" * 10_000, "body": "b\x00" * (4 * BODY_MAX)}
    payload = {"action": "created", "issue": issue, "comment": comment, "repository": REPO}
    event = parsed(*github("issue_comment", payload))
    assert len(event.comment) == COMMENT_MAX and len(event.title) == TITLE_MAX
    assert event.body == "b" * BODY_MAX and event.author == "bob"
    assert "\n" in parsed(*github("issue_comment", {**payload, "comment": {"body": "/agent a\nb"}})).comment


def test_the_delivery_key_is_the_bodys_sha256_so_a_replay_has_the_same_key() -> None:
    comment = {"body": "/agent go", "user": {"login": "bob"}}
    payload = {"action": "created", "issue": GH_ISSUE, "comment": comment, "repository": REPO}
    first = parsed(*github("issue_comment", payload))
    replay = parsed(*github("issue_comment", payload))
    other = parsed(*github("issue_comment", {**payload, "comment": {**comment, "id": 2}}))
    assert first.delivery_key == replay.delivery_key == hashlib.sha256(encode(payload)).hexdigest()
    assert other.delivery_key != first.delivery_key


def test_an_unknown_forge_is_ignored() -> None:
    assert ignored("bitbucket", {}, {"a": 1}) == "bitbucket is not a forge (github, gitea or gitlab)"
