"""core/forge/report_calls.py: each forge's API root, the comment, find and status requests (GitHub and
GitLab as their REST docs give them; Gitea as v1.27.3's routers/api/v1/api.go), and reading the answers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness_operator.api.v1alpha1 import HarnessTrigger
from harness_operator.core.forge.report import CommitStatus, build_reported_run
from harness_operator.core.forge.report_calls import (
    ForgeTarget,
    build_comment_call,
    build_find_comment_call,
    build_forge_target,
    build_status_call,
    build_whoami_call,
    compute_api_root,
    describe_failure,
    find_marked_comment,
    read_comment_id,
    read_login,
)

TOKEN = "s3cret-token"


def trigger(forge: str, url: str, token: bool = True, **spec: Any) -> HarnessTrigger:
    """A valid HarnessTrigger of `forge` at `url`."""
    refs = {"webhookSecretRef": {"name": "hook", "key": "secret"}}
    if token:
        refs["tokenSecretRef"] = {"name": "report-token", "key": "token"}
    base = {
        "forge": {"type": forge, "url": url, **refs},
        "repositories": ["acme/app"],
        "serviceAccountName": "agent-trigger",
        "events": [{"type": "Command", "command": "/agent"}],
        "authors": {"users": ["alice"]},
        "runTemplate": {"spec": {"provider": "claude", "prompt": "Fix #$(event.number)"}},
    }
    return HarnessTrigger.model_validate({"metadata": {"name": "t", "namespace": "ns"}, "spec": base | spec})


def reported(kind: str = "issue", repository: str = "acme/app", number: int = 7):
    found = build_reported_run(
        {
            "metadata": {
                "name": "r",
                "namespace": "ns",
                "uid": "u",
                "labels": {"agentharness.dev/trigger": "t", "agentharness.dev/forge-thread": str(number)},
                "annotations": {
                    "agentharness.dev/forge-repository": repository,
                    "agentharness.dev/forge-thread-kind": kind,
                },
            }
        }
    )
    assert found is not None
    return found


@pytest.mark.parametrize(
    ("forge", "url", "api_url", "root"),
    [
        ("github", "https://github.com", None, "https://api.github.com"),
        ("github", "https://GitHub.com/", None, "https://api.github.com"),
        ("github", "https://ghe.example", None, "https://ghe.example/api/v3"),
        ("gitea", "http://gitea.test:3000/", None, "http://gitea.test:3000/api/v1"),
        ("gitea", "https://host.example/git", None, "https://host.example/git/api/v1"),
        ("gitlab", "https://gitlab.example", None, "https://gitlab.example/api/v4"),
        ("gitea", "http://gitea.test:3000", "http://api.test/api/v1/", "http://api.test/api/v1"),
    ],
)
def test_the_api_root(forge: str, url: str, api_url: str | None, root: str) -> None:
    assert compute_api_root(forge, url, api_url) == root


def test_the_target_reads_the_triggers_forge_and_report() -> None:
    target = build_forge_target(trigger("gitea", "http://g:3000", report={"commitStatus": False}))
    assert target == ForgeTarget("gitea", "http://g:3000/api/v1", True, False, ("report-token", "token"))
    bare = build_forge_target(trigger("github", "https://github.com", token=False))
    assert bare.token_secret is None and bare.comment and bare.commit_status


def gitea() -> ForgeTarget:
    return build_forge_target(trigger("gitea", "http://g:3000"))


def github() -> ForgeTarget:
    return build_forge_target(trigger("github", "https://github.com"))


def gitlab() -> ForgeTarget:
    return build_forge_target(trigger("gitlab", "https://gl.example"))


@pytest.mark.parametrize(
    ("target", "kind", "create", "edit", "auth"),
    [
        (
            github(),
            "issue",
            "https://api.github.com/repos/acme/app/issues/7/comments",
            ("PATCH", "https://api.github.com/repos/acme/app/issues/comments/301"),
            ("Authorization", f"Bearer {TOKEN}"),
        ),
        (
            gitea(),
            "pull",  # a pull request is an issue: its conversation is the issue's comments
            "http://g:3000/api/v1/repos/acme/app/issues/7/comments",
            ("PATCH", "http://g:3000/api/v1/repos/acme/app/issues/comments/301"),
            ("Authorization", f"token {TOKEN}"),
        ),
        (
            gitlab(),
            "issue",
            "https://gl.example/api/v4/projects/acme%2Fapp/issues/7/notes",
            ("PUT", "https://gl.example/api/v4/projects/acme%2Fapp/issues/7/notes/301"),
            ("PRIVATE-TOKEN", TOKEN),
        ),
        (
            gitlab(),
            "pull",
            "https://gl.example/api/v4/projects/acme%2Fapp/merge_requests/7/notes",
            ("PUT", "https://gl.example/api/v4/projects/acme%2Fapp/merge_requests/7/notes/301"),
            ("PRIVATE-TOKEN", TOKEN),
        ),
    ],
)
def test_the_comment_is_created_once_then_edited(
    target: ForgeTarget, kind: str, create: str, edit: tuple[str, str], auth: tuple[str, str]
) -> None:
    report = reported(kind)
    first = build_comment_call(target, report, "hello", TOKEN, None)
    assert (first.method, first.url, json.loads(first.body or b"")) == ("POST", create, {"body": "hello"})
    assert first.headers[auth[0]] == auth[1]
    again = build_comment_call(target, report, "hello", TOKEN, "301")
    assert (again.method, again.url) == edit
    assert TOKEN not in repr(again) and TOKEN not in again.url


def test_an_owner_or_name_cannot_change_the_path() -> None:
    call = build_comment_call(gitea(), reported(repository="acme/../../admin"), "x", TOKEN, None)
    assert call.url == "http://g:3000/api/v1/repos/acme/..%2F..%2Fadmin/issues/7/comments"


@pytest.mark.parametrize(
    ("target", "url"),
    [
        (
            github(),
            "https://api.github.com/repos/acme/app/issues/7/comments?since=2026-01-01T00%3A00%3A00Z&per_page=100",
        ),
        (
            gitea(),
            "http://g:3000/api/v1/repos/acme/app/issues/7/comments?since=2026-01-01T00%3A00%3A00Z&per_page=100",
        ),
        (
            gitlab(),
            "https://gl.example/api/v4/projects/acme%2Fapp/issues/7/notes?sort=desc&order_by=created_at&per_page=100",
        ),
    ],
)
def test_the_find_call_lists_the_threads_recent_comments(target: ForgeTarget, url: str) -> None:
    call = build_find_comment_call(target, reported(), "2026-01-01T00:00:00Z", TOKEN)
    assert (call.method, call.url, call.body) == ("GET", url, None)


MARKER = "<!-- harness-run ns/r u -->"


def comment(
    id_: int, body: str, second: int, login: str = "harness-bot", gitlab: bool = False
) -> dict[str, Any]:
    author = {"author": {"username": login}} if gitlab else {"user": {"login": login}}
    return {"id": id_, "body": body, "created_at": f"2026-01-01T00:00:{second:02}Z", **author}


def test_the_runs_comment_is_the_oldest_of_the_tokens_user_starting_with_the_marker() -> None:
    listed = [
        comment(2, f"{MARKER}\nforged by someone who read ours", 1, login="mallory"),
        comment(5, "a human's comment", 1, login="alice"),
        comment(9, f"{MARKER}\nours again", 9),
        comment(7, f"{MARKER}\nours", 7, login="Harness-Bot"),
        comment(3, f"quoting: {MARKER}", 0),
    ]
    assert find_marked_comment(json.dumps(listed).encode(), MARKER, "harness-bot") == "7"
    gitlab = [comment(4, f"{MARKER}\nnote", 4, gitlab=True)]
    assert find_marked_comment(json.dumps(gitlab).encode(), MARKER, "harness-bot") == "4"
    assert find_marked_comment(json.dumps(listed).encode(), MARKER, "nobody") is None
    assert find_marked_comment(b"[]", MARKER, "harness-bot") is None
    assert find_marked_comment(b"not json", MARKER, "harness-bot") is None
    assert find_marked_comment(b'{"message": "x"}', MARKER, "harness-bot") is None


@pytest.mark.parametrize(
    ("answer", "login"),
    [
        (b'{"login": "bot", "id": 1}', "bot"),
        (b'{"username": "bot"}', "bot"),
        (b'{"login": ""}', None),
        (b"[]", None),
    ],
)
def test_the_tokens_user(answer: bytes, login: str | None) -> None:
    assert read_login(answer) == login
    call = build_whoami_call(gitea(), TOKEN)
    assert (call.method, call.url) == ("GET", "http://g:3000/api/v1/user")


@pytest.mark.parametrize(
    ("answer", "found"),
    [(b'{"id": 301}', "301"), (b'{"id": "301"}', None), (b'{"id": true}', None), (b"<html>", None)],
)
def test_the_created_comments_id(answer: bytes, found: str | None) -> None:
    assert read_comment_id(answer) == found


STATUS = CommitStatus("c" * 40, "failure", "harness/t", "HarnessRun r failed")


@pytest.mark.parametrize(
    ("target", "url", "payload"),
    [
        (
            github(),
            f"https://api.github.com/repos/acme/app/statuses/{'c' * 40}",
            {"state": "failure", "context": "harness/t", "description": "HarnessRun r failed"},
        ),
        (
            gitea(),
            f"http://g:3000/api/v1/repos/acme/app/statuses/{'c' * 40}",
            {"state": "failure", "context": "harness/t", "description": "HarnessRun r failed"},
        ),
        (
            gitlab(),
            f"https://gl.example/api/v4/projects/acme%2Fapp/statuses/{'c' * 40}",
            {"state": "failed", "name": "harness/t", "description": "HarnessRun r failed"},
        ),
    ],
)
def test_the_status_call(target: ForgeTarget, url: str, payload: dict[str, str]) -> None:
    call = build_status_call(target, "acme/app", STATUS, TOKEN)
    assert (call.method, call.url, json.loads(call.body or b"")) == ("POST", url, payload)


@pytest.mark.parametrize(
    ("state", "gitlab_state"), [("pending", "running"), ("success", "success"), ("error", "canceled")]
)
def test_gitlabs_states(state: str, gitlab_state: str) -> None:
    call = build_status_call(gitlab(), "acme/app", CommitStatus("c" * 40, state, "harness/t", ""), TOKEN)
    assert json.loads(call.body or b"")["state"] == gitlab_state


def test_a_failure_names_the_call_and_the_forges_words_never_the_token() -> None:
    call = build_comment_call(gitea(), reported(), "x", TOKEN, None)
    said = describe_failure(
        call, 403, b'{"message": "token does not have at least one of required scope(s)"}'
    )
    assert said == (
        "POST /api/v1/repos/acme/app/issues/7/comments: HTTP 403: token does not have at least one of required "
        "scope(s)"
    )
    assert describe_failure(call, 502, b"x" * 5000).endswith("x" * 300)
    assert TOKEN not in said
