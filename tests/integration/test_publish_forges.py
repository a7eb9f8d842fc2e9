"""The publisher (runner/publish.py) over the wire: it pushes to a real git HTTP server that demands a
token (tests/servers/git_http.py) and opens or finds the pull request on the forge stub
(tests/stubs/github.py): GitHub's and GitLab's APIs cannot run here, so their stubs stand in for them;
Gitea's real server is tests/forge's.

Needs no cluster: lighttpd, git and the stubs run on loopback. GitHub and GitLab stay on the stub because
no real GitHub or GitLab can run here; Gitea's path also runs against a real Gitea (tests/forge).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness_operator.api.reasons import Reason
from harness_operator.contract.changes import ChangesReport, PublishPlan, Verdict
from harness_operator.runner.publish import publish
from tests.servers.git_http import USER, GitHttpServer
from tests.stubs.github import GitHubStub

TOKEN = "ghp_publisher-write-token-0123456789"
REPO = "acme/widgets"


def git(*args: str, cwd: Path | None = None) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    identity = ["-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    done = subprocess.run(["git", *identity, *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


class Pod:
    """The attempt pod's side: the workspace cloned anonymously from the server, the base recorded, the
    agent's edit made and its verdict written."""

    def __init__(
        self, tmp: Path, server: GitHttpServer, ref: str | None = None, edit: str = "hello, world\n"
    ) -> None:
        """A new repository, or (`ref`) the existing one's branch, as a follow-up run clones it."""
        self.tmp, self.server = tmp, server
        self.url = server.url_for(REPO) if ref else server.create_repo(REPO, {"README.md": "hello\n"})
        self.workdir = tmp / "volume" / "repo"
        self.workdir.parent.mkdir(parents=True)
        git("clone", "-q", "--depth", "1", *(["--branch", ref] if ref else []), self.url, str(self.workdir))
        self.base = git("rev-parse", "HEAD", cwd=self.workdir)
        (tmp / "base").write_text(self.base + "\n")
        (tmp / "verdict.json").write_text(
            Verdict(succeeded=True, output="Greeted the world.\nDetails follow.").model_dump_json()
        )
        (self.workdir / "README.md").write_text(edit)
        self.state = tmp / "state"
        self.state.mkdir()

    def publish(self, token: str = TOKEN, **changes: Any) -> ChangesReport:
        fields: dict[str, Any] = {
            "url": self.url,
            "working_dir": str(self.workdir),
            "patch_limit": 1_000_000,
            "branch": "harness/run-1",
            "commit_message": "run-1",
            "secret_envs": ["HARNESS_PUBLISH_TOKEN"],
        }
        plan = PublishPlan.model_validate({**fields, **changes})
        environ = {"HARNESS_PUBLISH_TOKEN": token}
        return publish(plan, environ, str(self.tmp / "verdict.json"), str(self.tmp / "base"), self.state)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[GitHttpServer]:
    with GitHttpServer(tmp_path / "server", token=TOKEN) as srv:
        yield srv


@pytest.fixture
def pod(tmp_path: Path, server: GitHttpServer) -> Pod:
    return Pod(tmp_path / "pod", server)


def pull_request(forge: str, api_url: str, **extra: Any) -> dict[str, Any]:
    return {"forge": forge, "apiURL": api_url, "repository": REPO, "title": "run-1: $(output)",
            "body": "The agent said:\n$(output)", **extra}  # fmt: skip


def test_the_branch_is_pushed_with_the_token_and_the_pull_request_opened(
    pod: Pod, server: GitHttpServer
) -> None:
    with GitHubStub(web_url="https://github.example") as forge:
        report = pod.publish(pull_request=pull_request("github", forge.base_url))
        opened = forge.pull_requests()

    assert report.reason is None, report.message
    assert server.branches(REPO)["harness/run-1"] == report.commit
    assert server.read(REPO, "harness/run-1", "README.md") == b"hello, world\n"
    assert server.refs_pushed() == ["refs/heads/harness/run-1"]
    pushes = [r for r in server.requests() if r["path"].endswith("/git-receive-pack")]
    assert pushes and all(r["user"] == USER and r["status"] == 200 for r in pushes), pushes
    assert report.pull_request_url == f"https://github.example/{REPO}/pull/1"
    [call] = opened
    assert (call["forge"], call["repository"], call["auth_scheme"]) == ("github", REPO, "bearer")
    assert call["token_sha256"] == hashlib.sha256(TOKEN.encode()).hexdigest()
    # Title: the output's first line; body: all of it; head the run's branch; base the origin's HEAD.
    assert call["body"]["title"] == "run-1: Greeted the world."
    assert call["body"]["body"] == "The agent said:\nGreeted the world.\nDetails follow."
    assert (call["body"]["head"], call["body"]["base"]) == ("harness/run-1", "main")


@pytest.mark.parametrize(
    ("forge", "root", "scheme"), [("gitea", "/api/v1", "token"), ("gitlab", "/api/v4", "private-token")]
)
def test_gitea_and_gitlab_get_their_own_call(pod: Pod, forge: str, root: str, scheme: str) -> None:
    with GitHubStub(web_url=f"https://{forge}.example") as stub:
        report = pod.publish(pull_request=pull_request(forge, stub.base_url + root, base="main"))
        [call] = stub.pull_requests()
    assert report.reason is None, report.message
    assert (call["forge"], call["auth_scheme"], call["status"]) == (forge, scheme, 201)
    assert report.pull_request_url and report.pull_request_url.startswith(f"https://{forge}.example/")


def test_a_token_that_may_not_push_is_named_and_pushes_nothing(pod: Pod, server: GitHttpServer) -> None:
    report = pod.publish(token="ghp_wrong-token-for-this-repository")
    assert report.reason == Reason.PushRejected
    assert "publish.credentialsSecretRef may not push" in (report.message or ""), report.message
    assert "harness/run-1" not in server.branches(REPO)
    assert report.patch_sha256  # the patch is kept all the same
    assert "ghp_wrong-token" not in report.render()


def test_a_forge_that_refuses_the_pull_request_fails_the_step_after_the_push(
    pod: Pod, server: GitHttpServer
) -> None:
    with GitHubStub(mode="unprocessable") as forge:
        report = pod.publish(pull_request=pull_request("github", forge.base_url, base="main"))
    assert report.reason == Reason.PullRequestFailed
    assert "publish.pullRequest" in (report.message or "") and TOKEN not in report.render()
    assert server.branches(REPO)["harness/run-1"] == report.commit  # the branch stays for a manual PR


def test_a_forge_that_cannot_be_reached_is_named(pod: Pod) -> None:
    with GitHubStub() as forge:
        gone = forge.base_url
    report = pod.publish(pull_request=pull_request("github", gone, base="main"))
    assert report.reason == Reason.PullRequestFailed
    assert "publish.pullRequest.apiURL" in (report.message or ""), report.message


FORGES = [("github", "", "bearer"), ("gitea", "/api/v1", "token"), ("gitlab", "/api/v4", "private-token")]


@pytest.mark.parametrize(("forge", "root", "scheme"), FORGES)
def test_a_follow_up_adds_a_commit_to_the_open_pull_requests_branch(
    tmp_path: Path, server: GitHttpServer, forge: str, root: str, scheme: str
) -> None:
    """The first run opens the pull request; the follow-up clones its branch, pushes one commit onto it
    and reports the same pull request, found open, not opened twice."""
    first = Pod(tmp_path / "first", server)
    with GitHubStub(web_url=f"https://{forge}.example") as stub:
        request = pull_request(forge, stub.base_url + root, base="main")
        opened = first.publish(pull_request=request)
        follow_up = Pod(tmp_path / "second", server, ref="harness/run-1", edit="hello, renamed world\n")
        report = follow_up.publish(pull_request=request, if_exists="FastForward")
        creates, listings = stub.pull_requests(), stub.listings()

    assert opened.reason is None and report.reason is None, (opened.message, report.message)
    assert follow_up.base == opened.commit
    assert (report.pull_request_url, report.pull_request_number) == (opened.pull_request_url, 1)
    assert opened.pull_request_number == 1 and len(creates) == 1
    assert [(c["status"], c["found"], c["auth_scheme"]) for c in listings] == [(200, [1], scheme)]
    assert server.branches(REPO)["harness/run-1"] == report.commit
    assert server.read(REPO, "harness/run-1", "README.md") == b"hello, renamed world\n"
    parent = server._git(server.path_for(REPO), "rev-parse", f"{report.commit}^").decode().strip()
    assert parent == opened.commit
    pushes = [(p["ref"], p["old"], p["new"]) for p in server.pushes()]
    assert pushes == [
        ("refs/heads/harness/run-1", "0" * 40, opened.commit),
        ("refs/heads/harness/run-1", opened.commit, report.commit),
    ]


def test_a_follow_up_whose_branch_has_no_open_pull_request_opens_one_into_the_default_branch(
    tmp_path: Path, server: GitHttpServer
) -> None:
    first = Pod(tmp_path / "first", server)
    assert first.publish().reason is None  # a branch, no pull request
    follow_up = Pod(tmp_path / "second", server, ref="harness/run-1", edit="again\n")
    with GitHubStub(web_url="https://github.example") as stub:
        report = follow_up.publish(
            pull_request=pull_request("github", stub.base_url), if_exists="FastForward"
        )
        [create], [listing] = stub.pull_requests(), stub.listings()
    assert report.reason is None, report.message
    assert listing["query"]["head"] == "acme:harness/run-1" and listing["found"] == []
    assert (create["body"]["head"], create["body"]["base"]) == ("harness/run-1", "main")
    assert report.pull_request_number == 1


def test_a_push_that_slips_in_before_the_follow_ups_is_refused_as_branch_moved(
    tmp_path: Path, server: GitHttpServer
) -> None:
    """The branch is still at the cloned commit when the publisher looks, and moves before its push
    lands (the origin's pre-receive hook moves it, as a concurrent push would): the plain push is
    refused, and the reason names the commit found."""
    first = Pod(tmp_path / "first", server).publish()
    assert first.reason is None
    follow_up = Pod(tmp_path / "second", server, ref="harness/run-1", edit="again\n")
    main = server.branches(REPO)["main"]
    hook = server.path_for(REPO) / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\nenv -u GIT_QUARANTINE_PATH git update-ref refs/heads/harness/run-1 {main}\n")
    hook.chmod(0o755)

    report = follow_up.publish(if_exists="FastForward")

    assert report.reason == Reason.BranchMoved, report
    assert f"it was at {first.commit} and is now at {main}" in (report.message or "")
    assert server.branches(REPO)["harness/run-1"] == main  # the other push's, not overwritten
