"""The stubs publishing is tested with: the forges' pull request API, and the Anthropic stub's bash mode.
The forge stub stands in for GitHub and GitLab because no real GitHub or GitLab can run here (a real Gitea
does: tests/forge)."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from tests.lib import processes
from tests.stubs.anthropic import TEXT, AnthropicStub
from tests.stubs.github import GitHubStub

TOKEN = "ghp_stubtoken"
GITHUB = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/vnd.github+json"}
GITEA = {"Authorization": f"token {TOKEN}"}
GITLAB = {"PRIVATE-TOKEN": TOKEN}
PULL = {"title": "Fix it", "head": "harness/run-1", "base": "main", "body": "Done.", "draft": True}


def _post(url: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, Any], Any]:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **headers},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.load(resp), resp.headers
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.load(err), err.headers


def test_github_create_answers_201_with_the_pull_request_and_records_it():
    with GitHubStub(web_url="https://github.example/") as stub:
        status, pr, headers = _post(f"{stub.base_url}/repos/acme/widgets/pulls", PULL, GITHUB)
        assert status == 201, pr
        assert pr["number"] == 1 and pr["state"] == "open" and pr["draft"] is True
        assert pr["html_url"] == "https://github.example/acme/widgets/pull/1"
        assert pr["url"] == f"{stub.base_url}/repos/acme/widgets/pulls/1" == headers["location"]
        assert pr["head"]["ref"] == "harness/run-1" and pr["head"]["label"] == "acme:harness/run-1"
        assert pr["base"]["ref"] == "main" and pr["title"] == "Fix it" and pr["body"] == "Done."
        # The `token` scheme is GitHub's too; numbers count up per repository.
        status, second, _ = _post(
            f"{stub.base_url}/repos/acme/widgets/pulls", {**PULL, "head": "fork:b"}, GITEA
        )
        assert status == 201 and second["number"] == 2 and second["head"]["label"] == "fork:b"
        _, other, _ = _post(f"{stub.base_url}/repos/acme/gadgets/pulls", PULL, GITHUB)
        assert other["number"] == 1
        recorded = stub.pull_requests()
    sha = hashlib.sha256(TOKEN.encode()).hexdigest()
    assert [(r["forge"], r["repository"], r["auth_scheme"], r["status"]) for r in recorded] == [
        ("github", "acme/widgets", "bearer", 201),
        ("github", "acme/widgets", "token", 201),
        ("github", "acme/gadgets", "bearer", 201),
    ]
    assert recorded[0]["body"] == PULL
    assert all(r["token_sha256"] == sha for r in recorded)
    assert recorded[0]["auth_sha256"] == [sha]  # the base's record: the bearer token's sha256
    assert TOKEN not in json.dumps(recorded)


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer "}, {"Authorization": f"Basic {TOKEN}"}, GITLAB],
    ids=["none", "empty", "basic", "gitlab-header"],
)
def test_github_without_its_credential_answers_401(headers):
    with GitHubStub() as stub:
        status, answer, _ = _post(f"{stub.base_url}/repos/acme/widgets/pulls", PULL, headers)
        assert (status, answer["message"]) == (401, "Bad credentials")
        assert [r["status"] for r in stub.pull_requests()] == [401]


def test_unauthorized_mode_refuses_a_good_credential():
    with GitHubStub(mode="unauthorized") as stub:
        status, answer, _ = _post(f"{stub.base_url}/repos/acme/widgets/pulls", PULL, GITHUB)
    assert status == 401 and answer["message"] == "Bad credentials" and "documentation_url" in answer


def test_unprocessable_mode_refuses_a_duplicate_in_each_forges_shape():
    with GitHubStub(mode="unprocessable") as stub:
        status, github, _ = _post(f"{stub.base_url}/repos/acme/widgets/pulls", PULL, GITHUB)
        assert status == 422 and github["message"] == "Validation Failed"
        assert github["errors"] == [
            {
                "resource": "PullRequest",
                "code": "custom",
                "message": "A pull request already exists for acme:harness/run-1.",
            }
        ]
        status, gitea, _ = _post(f"{stub.base_url}/api/v1/repos/acme/widgets/pulls", PULL, GITEA)
        assert status == 409 and gitea["message"].startswith("pull request already exists")
        mr = {"source_branch": "harness/run-1", "target_branch": "main", "title": "t"}
        status, gitlab, _ = _post(
            f"{stub.base_url}/api/v4/projects/acme%2Fwidgets/merge_requests", mr, GITLAB
        )
        assert status == 409 and "already exists" in gitlab["message"][0]


def test_github_missing_fields_answer_422_validation_failed():
    with GitHubStub() as stub:
        status, answer, _ = _post(f"{stub.base_url}/repos/acme/widgets/pulls", {"title": "t"}, GITHUB)
    assert status == 422
    assert {e["field"] for e in answer["errors"]} == {"head", "base"}


def test_gitea_create_and_its_token_scheme():
    with GitHubStub(web_url="https://gitea.example") as stub:
        url = f"{stub.base_url}/api/v1/repos/acme/widgets/pulls"
        status, pr, _ = _post(url, PULL, GITEA)
        assert status == 201 and pr["number"] == 1
        assert pr["html_url"] == "https://gitea.example/acme/widgets/pulls/1"
        status, _, _ = _post(url, PULL, GITHUB)  # Bearer is not what the publisher sends Gitea
        assert status == 401
        assert [(r["forge"], r["auth_scheme"], r["status"]) for r in stub.pull_requests()] == [
            ("gitea", "token", 201),
            ("gitea", "bearer", 401),
        ]


def test_gitlab_merge_request_with_private_token():
    body = {
        "source_branch": "harness/run-1",
        "target_branch": "main",
        "title": "Draft: t",
        "description": "d",
    }
    with GitHubStub(web_url="https://gitlab.example") as stub:
        url = f"{stub.base_url}/api/v4/projects/group%2Fsub%2Fwidgets/merge_requests"
        status, mr, _ = _post(url, body, GITLAB)
        assert status == 201, mr
        assert mr["iid"] == 1 and mr["state"] == "opened" and mr["draft"] is True
        assert mr["web_url"] == "https://gitlab.example/group/sub/widgets/-/merge_requests/1"
        assert (mr["source_branch"], mr["target_branch"], mr["description"]) == ("harness/run-1", "main", "d")
        status, answer, _ = _post(url, body, GITHUB)
        assert (status, answer) == (401, {"message": "401 Unauthorized"})
        recorded = stub.pull_requests()
        assert recorded[0]["repository"] == "group/sub/widgets" and recorded[0]["body"] == body
        assert recorded[0]["token_sha256"] == hashlib.sha256(TOKEN.encode()).hexdigest()
        # PRIVATE-TOKEN is a credential to the base class too: present, hashed, never logged.
        assert stub.requests[0].auth_present and "private-token" not in stub.requests[0].headers


def test_other_paths_answer_404_and_are_logged():
    with GitHubStub() as stub:
        status, answer, _ = _post(f"{stub.base_url}/repos/acme/widgets/issues", PULL, GITHUB)
        assert (status, answer["message"]) == (404, "Not Found")
        assert stub.unknown_paths() == ["POST /repos/acme/widgets/issues"]
        assert stub.pull_requests() == []


def test_hang_mode_holds_create_calls():
    with (
        GitHubStub(mode="hang") as stub,
        pytest.raises((socket.timeout, TimeoutError, urllib.error.URLError)),
    ):
        req = urllib.request.Request(
            f"{stub.base_url}/repos/a/b/pulls", data=b"{}", headers=GITHUB, method="POST"
        )
        urllib.request.urlopen(req, timeout=0.5)


def _messages(base_url: str, tools: list[str]) -> dict[str, Any]:
    body = {"model": "m", "max_tokens": 100, "messages": [], "tools": [{"name": t} for t in tools]}
    req = urllib.request.Request(
        base_url + "/v1/messages",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "x-api-key": "sk-test-unit"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.load(resp)


def test_anthropic_bash_mode_runs_its_command_once_when_bash_is_offered():
    with AnthropicStub(mode="bash", command="echo hi > f") as stub:
        assert _messages(stub.base_url, [])["content"][0]["text"] == TEXT  # no tools offered: text
        assert _messages(stub.base_url, ["Read"])["content"][0]["text"] == TEXT  # Bash not offered: text
        first = _messages(stub.base_url, ["Read", "Bash"])
        assert first["stop_reason"] == "tool_use"
        assert [(b["type"], b["name"], b["input"]) for b in first["content"]] == [
            ("tool_use", "Bash", {"command": "echo hi > f", "description": "harness stub edit"})
        ]
        later = _messages(stub.base_url, ["Bash"])
        assert later["stop_reason"] == "end_turn" and later["content"][0]["text"] == TEXT


def test_anthropic_command_line_takes_the_bash_command():
    argv = [
        sys.executable,
        "-m",
        "tests.stubs.anthropic",
        "--mode",
        "bash",
        "--command",
        "touch x",
        "--quiet",
    ]
    with processes.running(
        argv, grace=10, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2]
    ) as proc:
        assert proc.stdout is not None
        answer = _messages(proc.stdout.readline().strip(), ["Bash"])
        assert answer["content"][0]["input"]["command"] == "touch x"


def _get(url: str, headers: dict[str, str]) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.load(err)


def test_open_pull_requests_are_listed_as_each_forge_filters_them():
    with GitHubStub() as stub:
        api = stub.base_url
        _post(f"{api}/repos/acme/widgets/pulls", PULL, GITHUB)
        _post(f"{api}/repos/acme/widgets/pulls", {**PULL, "head": "fork:harness/run-1"}, GITHUB)
        _post(f"{api}/api/v1/repos/acme/widgets/pulls", PULL, GITEA)
        _post(f"{api}/api/v1/repos/acme/widgets/pulls", {**PULL, "head": "other"}, GITEA)
        mr = {"source_branch": "harness/run-1", "target_branch": "main", "title": "T"}
        _post(f"{api}/api/v4/projects/acme%2Fwidgets/merge_requests", mr, GITLAB)
        _post(f"{api}/api/v4/projects/acme%2Fwidgets/merge_requests", {**mr, "source_branch": "x"}, GITLAB)

        status, github = _get(f"{api}/repos/acme/widgets/pulls?head=acme:harness/run-1&state=open", GITHUB)
        assert status == 200 and [p["number"] for p in github] == [1]
        assert github[0]["head"]["repo"]["full_name"] == "acme/widgets"
        _, gitea = _get(f"{api}/api/v1/repos/acme/widgets/pulls?state=open&limit=1&page=2", GITEA)
        assert [p["number"] for p in gitea] == [1]  # newest first: page 2 of 1 holds the first
        _, gitlab = _get(f"{api}/api/v4/projects/acme%2Fwidgets/merge_requests?source_branch=x", GITLAB)
        assert [m["iid"] for m in gitlab] == [2] and gitlab[0]["source_project_id"] == gitlab[0]["project_id"]
        status, _ = _get(f"{api}/api/v1/repos/acme/widgets/pulls", GITHUB)
        assert status == 401  # Gitea's own scheme only
        listed = stub.listings()
    assert [(c["forge"], c["status"], c["found"]) for c in listed] == [
        ("github", 200, [1]),
        ("gitea", 200, [1]),
        ("gitlab", 200, [2]),
        ("gitea", 401, []),
    ]
    assert len(stub.pull_requests()) == 6  # listings are not create calls
