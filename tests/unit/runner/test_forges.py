"""The forges' pull request calls (runner/forges.py): the requests built to open and to find the open one
from a branch, and what each forge's answer says (its URL and number, or why it failed)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from harness_operator.contract.changes import PullRequestPlan
from harness_operator.runner.forges import (
    PAGE_SIZE,
    PullRequestRef,
    build_find_pull_request,
    build_pull_request,
    read_found_pull_request,
    read_pull_request,
)

TOKEN = "t0ken"
BRANCH = "harness/fix-1"


def plan(
    forge: str, api: str = "https://forge.example/api", repository: str = "acme/widgets"
) -> PullRequestPlan:
    return PullRequestPlan(forge=forge, apiURL=api, repository=repository, title="T", body="B")


def pull(
    number: int, ref: str = BRANCH, repo: str = "acme/widgets", web: str = "https://w"
) -> dict[str, Any]:
    """A pull request as GitHub and Gitea list it."""
    return {
        "number": number,
        "html_url": f"{web}/{number}",
        "head": {"ref": ref, "repo": {"full_name": repo}},
    }


def merge_request(iid: int, branch: str = BRANCH, source: int = 7) -> dict[str, Any]:
    return {"iid": iid, "web_url": f"https://w/{iid}", "source_branch": branch, "source_project_id": source,
            "project_id": 7}  # fmt: skip


@pytest.mark.parametrize(
    ("forge", "path", "query", "auth"),
    [
        ("github", "/api/repos/acme/widgets/pulls",
         {"head": ["acme:harness/fix-1"], "state": ["open"], "per_page": [str(PAGE_SIZE)]},
         ("Authorization", f"Bearer {TOKEN}")),
        ("gitea", "/api/repos/acme/widgets/pulls",
         {"state": ["open"], "sort": ["recentupdate"], "limit": [str(PAGE_SIZE)], "page": ["3"]},
         ("Authorization", f"token {TOKEN}")),
        ("gitlab", "/api/projects/acme%2Fwidgets/merge_requests",
         {"source_branch": ["harness/fix-1"], "state": ["opened"], "per_page": [str(PAGE_SIZE)]},
         ("PRIVATE-TOKEN", TOKEN)),
    ],
)  # fmt: skip
def test_the_find_call_of_each_forge(forge: str, path: str, query: dict[str, list[str]], auth: Any) -> None:
    call = build_find_pull_request(plan(forge, "https://forge.example/api/"), BRANCH, TOKEN, page=3)
    url = urlsplit(call.url)
    assert (call.method, call.body, url.netloc, url.path) == ("GET", b"", "forge.example", path)
    assert parse_qs(url.query) == query
    assert call.headers[auth[0]] == auth[1]
    assert TOKEN not in call.url


@pytest.mark.parametrize(
    ("forge", "answer", "found"),
    [
        ("github", [pull(4)], PullRequestRef("https://w/4", 4)),
        ("github", [], None),
        # A fork's branch of the same name is not the run's.
        ("gitea", [pull(9, repo="mallory/widgets"), pull(8, ref="other"), pull(3)], PullRequestRef("https://w/3", 3)),
        ("gitea", [pull(9, repo="ACME/Widgets")], PullRequestRef("https://w/9", 9)),
        ("gitea", [{"number": 2, "html_url": "https://w/2", "head": {"ref": BRANCH, "repo": None}}], None),
        ("gitlab", [merge_request(5, source=8), merge_request(6)], PullRequestRef("https://w/6", 6)),
        ("gitlab", [{"iid": 2, "web_url": "https://w/2", "source_branch": BRANCH}], PullRequestRef("https://w/2", 2)),
        ("gitlab", [merge_request(5, branch="other")], None),
    ],
)  # fmt: skip
def test_the_open_pull_request_from_the_branch_is_found(
    forge: str, answer: list[dict[str, Any]], found: PullRequestRef | None
) -> None:
    assert read_found_pull_request(plan(forge), BRANCH, 200, json.dumps(answer).encode()) == (
        found,
        False,
        None,
    )


def test_only_gitea_reads_on_while_a_page_is_full() -> None:
    full = json.dumps([pull(n, ref=f"other-{n}") for n in range(PAGE_SIZE)]).encode()
    assert read_found_pull_request(plan("gitea"), BRANCH, 200, full) == (None, True, None)
    assert read_found_pull_request(plan("github"), BRANCH, 200, full) == (None, False, None)
    short = json.dumps([pull(1, ref="other")]).encode()
    assert read_found_pull_request(plan("gitea"), BRANCH, 200, short) == (None, False, None)


@pytest.mark.parametrize(
    ("status", "body", "said"),
    [
        (401, b'{"message": "Bad credentials"}', "HTTP 401: Bad credentials"),
        (404, b"<html>gone</html>", "HTTP 404: <html>gone</html>"),
        (200, b'{"message": "not a list"}', "HTTP 200: not a list"),
    ],
)
def test_a_failed_listing_says_why(status: int, body: bytes, said: str) -> None:
    assert read_found_pull_request(plan("github"), BRANCH, status, body) == (None, False, said)


@pytest.mark.parametrize(
    ("forge", "answer", "opened"),
    [
        ("github", {"html_url": "https://w/pull/7", "number": 7}, PullRequestRef("https://w/pull/7", 7)),
        ("gitea", {"html_url": "https://w/pulls/2", "number": 2}, PullRequestRef("https://w/pulls/2", 2)),
        ("gitlab", {"web_url": "https://w/-/merge_requests/3", "iid": 3, "id": 1003},
         PullRequestRef("https://w/-/merge_requests/3", 3)),
        ("github", {"html_url": "https://w/pull/7", "number": True}, PullRequestRef("https://w/pull/7", None)),
    ],
)  # fmt: skip
def test_the_opened_pull_request_is_its_url_and_number(
    forge: str, answer: dict[str, Any], opened: PullRequestRef
) -> None:
    assert read_pull_request(forge, 201, json.dumps(answer).encode()) == (opened, None)


def test_a_refused_or_empty_open_answer_says_why() -> None:
    gitlab = json.dumps({"message": ["Another open merge request already exists"]}).encode()
    assert read_pull_request("gitlab", 409, gitlab) == (
        None,
        "HTTP 409: ['Another open merge request already exists']",
    )
    github = {
        "message": "Validation Failed",
        "errors": [{"message": "A pull request already exists for acme:x."}],
    }
    assert read_pull_request("github", 422, json.dumps(github).encode()) == (
        None,
        "HTTP 422: Validation Failed; A pull request already exists for acme:x.",
    )
    assert read_pull_request("github", 201, b"{}") == (
        None,
        "HTTP 201 without a pull request URL in the answer",
    )


@pytest.mark.parametrize("forge", ["github", "gitea", "gitlab"])
def test_the_open_call_sends_json_with_the_forges_credential(forge: str) -> None:
    call = build_pull_request(plan(forge), BRANCH, "main", TOKEN)
    assert call.method == "POST" and call.headers["Content-Type"] == "application/json"
    body = json.loads(call.body)
    if forge == "gitlab":
        assert (body["source_branch"], body["target_branch"]) == (BRANCH, "main")
        assert call.headers["PRIVATE-TOKEN"] == TOKEN
    else:
        assert (body["head"], body["base"]) == (BRANCH, "main")
        assert ("draft" in body) == (forge == "github")
