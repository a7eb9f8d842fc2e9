"""The publisher against a real Gitea: a HarnessRun with `publish.pullRequest.forge: gitea`, the Job the
operator builds for it, its clone script run against Gitea with a read token, the agent's edit, and the
publisher (runner/publish.py) pushing the branch and opening the pull request with the run's write token.
What Gitea then holds is read back through its API. A follow-up run (its workspace the pull request's
branch, `publish.branch.ifExists: FastForward`) adds one commit to the same pull request, and is refused
BranchMoved when someone pushed to the branch after it cloned.

The tokens carry Gitea's scopes: pushing and opening a pull request need `write:repository`; a token
without it is refused by Gitea itself, and the publisher says which token to fix.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path
from typing import Any

import pytest

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import HarnessDefinitionSpec, HarnessRun
from harness_operator.contract.changes import (
    BASE_FILE,
    CLONE_TOKEN_ENV,
    PUBLISH_PLAN_ENV,
    PUBLISH_TOKEN_ENV,
    ChangesReport,
    PublishPlan,
    Verdict,
)
from harness_operator.core.attempt import decide_attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.objects.naming import PUBLISH_CONTAINER
from harness_operator.core.pod.job import build_job
from harness_operator.core.resolve.resolution import AttemptTarget
from harness_operator.runner.publish import publish
from tests.lib.gitea import Gitea, User
from tests.tools.gobuilds import gitleaks_binary

DEFINITION = HarnessDefinitionSpec.model_validate(
    {
        "binary": "claude",
        "image": "harness.local/claude:2.1",
        "credentials": [
            {"env": "ANTHROPIC_API_KEY", "secretKeyRef": {"name": "anthropic", "key": "api-key"}}
        ],
    }
)
TARGET = AttemptTarget(index=1, provider="claude", definition=DEFINITION, position=1)
VENDOR_KEY = "sk-ant-vendor-key-abcdefghijklmnop"
OUTPUT = "Greeted the world.\nThe README now says hello to everyone."
README = "hello\n"
EDITED = "hello, world\n"


class Pod:
    """One attempt's pod as the operator builds it for `run`: the git-clone init container's script and
    environment, run here against Gitea; the agent's edit and verdict; the publishing container's plan."""

    def __init__(self, tmp: Path, run: HarnessRun) -> None:
        self.tmp = tmp
        self.run = run
        pod = build_job(run, decide_attempt(run, TARGET, OperatorConfig()), OperatorConfig())["spec"][
            "template"
        ]
        self.containers = {c["name"]: c for c in [*pod["spec"]["initContainers"], *pod["spec"]["containers"]]}
        self.workdir = tmp / "volume" / "repo"
        tmp.mkdir(parents=True, exist_ok=True)
        self.base_file = tmp / "base"
        self.state = tmp / "state"
        self.state.mkdir()
        self.verdict = tmp / "verdict.json"

    def clone(self, read_token: str) -> str:
        """The git-clone init container's own script with the read token; the commit it recorded."""
        clone = self.containers["git-clone"]
        env = {e["name"]: e["value"] for e in clone["env"] if "value" in e}
        (self.tmp / "home").mkdir(exist_ok=True)
        env |= {
            "PATH": os.environ["PATH"],
            "WORKDIR": str(self.workdir),
            "HOME": str(self.tmp / "home"),
            CLONE_TOKEN_ENV: read_token,
            "GIT_CONFIG_NOSYSTEM": "1",
        }
        script = clone["command"][-1].replace(BASE_FILE, str(self.base_file))
        done = subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        return self.base_file.read_text().strip()

    def agent_edits(self, files: dict[str, str]) -> None:
        for path, text in files.items():
            (self.workdir / path).write_text(text)
        self.verdict.write_text(Verdict(succeeded=True, output=OUTPUT).model_dump_json())

    def plan(self) -> PublishPlan:
        """The publishing container's plan, as the kubelet hands it over (`$$` unescaped), in this
        machine's working directory."""
        env = {e["name"]: e.get("value") for e in self.containers[PUBLISH_CONTAINER]["env"]}
        plan = PublishPlan.model_validate_json(str(env[PUBLISH_PLAN_ENV]).replace("$$", "$"))
        return plan.model_copy(update={"working_dir": str(self.workdir)})

    def publish(self, read_token: str, write_token: str) -> ChangesReport:
        """The publisher with the container's credentials: every variable the container gets from a
        Secret holds its value."""
        values = {
            PUBLISH_TOKEN_ENV: write_token,
            CLONE_TOKEN_ENV: read_token,
            "ANTHROPIC_API_KEY": VENDOR_KEY,
        }
        env = [e["name"] for e in self.containers[PUBLISH_CONTAINER]["env"] if "valueFrom" in e]
        assert set(env) == set(values), env
        # The plan's secret scan (on, as the chart's default) runs the gitleaks the images hold.
        scanner = str(gitleaks_binary())
        return publish(self.plan(), values, str(self.verdict), str(self.base_file), self.state, scanner)


def make_run(
    gitea: Gitea, repository: str, name: str, follow_up: str | None = None, **pull_request: Any
) -> HarnessRun:
    """A run on the Gitea repository that publishes a pull request with forge: gitea (the API root derived
    from the git URL, as a user who sets no apiURL gets it); a `follow_up` of branch B clones B and adds
    its commit onto it (ifExists: FastForward), as a trigger's follow-up run does."""
    publish: dict[str, Any] = {
        "pullRequest": {"forge": "gitea", "title": "$(run.name): $(output)", **pull_request},
        "credentialsSecretRef": {"name": "write", "key": "token"},
    }
    if follow_up:
        publish["branch"] = {"name": follow_up, "ifExists": "FastForward"}
    workspace = {
        "git": {
            "url": gitea.clone_url(repository),
            "ref": follow_up or "main",
            "credentialsSecretRef": {"name": "read", "key": "token"},
        },
        "publish": publish,
    }
    return HarnessRun.model_validate(
        {
            "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}"},
            "spec": {"provider": "claude", "prompt": "Greet the world.", "workspace": workspace},
        }
    )


@pytest.fixture
def repository(gitea: Gitea, owner: User) -> str:
    """A private repository (a clone needs the read token) with one file on main."""
    gitea.create_repo(
        owner.name, "widgets", {"README.md": README, "src/app.py": "print('hi')\n"}, private=True
    )
    return f"{owner.name}/widgets"


def run_name() -> str:
    return f"fix-{secrets.token_hex(3)}"


def test_the_branch_is_pushed_and_the_pull_request_opened_on_gitea(
    gitea: Gitea, owner: User, repository: str, tmp_path: Path
) -> None:
    read = gitea.create_token(owner, ["read:repository"])
    write = gitea.create_token(owner, ["write:repository"])
    name = run_name()
    pod = Pod(tmp_path, make_run(gitea, repository, name))
    assert pod.plan().pull_request is not None
    assert pod.plan().pull_request.api_url == f"{gitea.base_url}/api/v1"  # derived from the git URL
    base = pod.clone(read)
    assert base == gitea.branches(repository)["main"]
    pod.agent_edits({"README.md": EDITED})

    report = pod.publish(read, write)

    assert report.reason is None, report.message
    branch = f"harness/{name}"
    assert report.branch == branch and report.base == base
    assert gitea.branches(repository)[branch] == report.commit
    assert gitea.file(repository, branch, "README.md") == EDITED.encode()
    assert gitea.file(repository, branch, "src/app.py") == b"print('hi')\n"
    [commit, parent] = gitea.commits(repository, branch)[:2]
    assert parent["sha"] == base and [p["sha"] for p in commit["parents"]] == [base]
    assert commit["commit"]["message"].startswith(name)
    assert commit["commit"]["author"]["name"] == "harness-operator"
    [pull] = gitea.pull_requests(repository)
    assert report.pull_request_url == pull["html_url"]
    assert (pull["head"]["ref"], pull["head"]["sha"], pull["base"]["ref"]) == (branch, report.commit, "main")
    assert pull["title"] == f"{name}: Greeted the world."  # the output's first line
    assert OUTPUT in pull["body"]
    assert pull["user"]["login"] == owner.name  # opened with the write token, the owner's
    assert write not in report.render() and read not in report.render()


@pytest.mark.parametrize("scopes", [["read:repository"], ["write:issue", "read:repository"]])
def test_a_token_without_write_repository_pushes_nothing_and_says_which_token(
    gitea: Gitea, owner: User, repository: str, tmp_path: Path, scopes: list[str]
) -> None:
    read = gitea.create_token(owner, ["read:repository"])
    weak = gitea.create_token(owner, scopes)
    pod = Pod(tmp_path, make_run(gitea, repository, run_name()))
    pod.clone(read)
    pod.agent_edits({"README.md": EDITED})

    report = pod.publish(read, weak)

    assert report.reason == Reason.PushRejected, report.message
    assert "the token in publish.credentialsSecretRef may not push to the repository" in (
        report.message or ""
    )
    assert list(gitea.branches(repository)) == ["main"]
    assert gitea.pull_requests(repository) == []
    assert report.patch_sha256  # the patch is kept all the same
    assert weak not in report.render()


def test_a_user_who_may_not_write_the_repository_pushes_nothing(
    gitea: Gitea, owner: User, repository: str, tmp_path: Path
) -> None:
    """A token with write:repository, of a user who may only read the repository: Gitea's pre-receive
    hook refuses the push, and the message must say the token may not push (not that the branch exists)."""
    reader = gitea.create_user(f"reader-{secrets.token_hex(4)}")
    gitea.add_collaborator(repository, reader.name, "read")
    read = gitea.create_token(reader, ["read:repository"])
    write = gitea.create_token(reader, ["write:repository"])
    pod = Pod(tmp_path, make_run(gitea, repository, run_name()))
    pod.clone(read)
    pod.agent_edits({"README.md": EDITED})

    report = pod.publish(read, write)

    assert report.reason == Reason.PushRejected, report.message
    assert "may not push to the repository: give it write access" in (report.message or ""), report.message
    assert "User permission denied for writing" in (report.message or ""), "the origin's own reason"
    assert list(gitea.branches(repository)) == ["main"]


def test_a_second_run_on_the_same_branch_is_refused_and_the_branch_kept(
    gitea: Gitea, owner: User, repository: str, tmp_path: Path
) -> None:
    """The default publish (no ifExists): an existing branch is never pushed onto."""
    read = gitea.create_token(owner, ["read:repository"])
    write = gitea.create_token(owner, ["write:repository"])
    first = Pod(tmp_path / "first", make_run(gitea, repository, "fix-same"))
    first.clone(read)
    first.agent_edits({"README.md": EDITED})
    assert first.publish(read, write).reason is None
    head = gitea.branches(repository)["harness/fix-same"]

    second = Pod(tmp_path / "second", make_run(gitea, repository, "fix-same"))
    second.clone(read)
    second.agent_edits({"README.md": "something else\n"})
    report = second.publish(read, write)

    assert report.reason == Reason.PushRejected, report.message
    assert "branch harness/fix-same exists on the origin" in (report.message or ""), report.message
    assert gitea.branches(repository)["harness/fix-same"] == head
    assert len(gitea.pull_requests(repository)) == 1


def test_a_pull_request_into_a_missing_base_is_refused_after_the_push(
    gitea: Gitea, owner: User, repository: str, tmp_path: Path
) -> None:
    """Gitea's own refusal reaches the run's message; the pushed branch stays for a manual PR."""
    read = gitea.create_token(owner, ["read:repository"])
    write = gitea.create_token(owner, ["write:repository"])
    pod = Pod(tmp_path, make_run(gitea, repository, run_name(), base="no-such-branch"))
    pod.clone(read)
    pod.agent_edits({"README.md": EDITED})

    report = pod.publish(read, write)

    assert report.reason == Reason.PullRequestFailed, report.message
    assert "HTTP 404" in (report.message or "") and "check publish.pullRequest" in (report.message or "")
    assert gitea.branches(repository)[report.branch or ""] == report.commit
    assert gitea.pull_requests(repository) == []


def test_a_follow_up_adds_one_commit_to_the_open_pull_request(
    gitea: Gitea, owner: User, repository: str, tmp_path: Path
) -> None:
    """A first run opens the pull request; a follow-up clones its branch and pushes one more commit onto it
    (plain push, its parent the first run's commit) and reports the same pull request, not a second."""
    read = gitea.create_token(owner, ["read:repository"])
    write = gitea.create_token(owner, ["write:repository"])
    first = Pod(tmp_path / "first", make_run(gitea, repository, "fix-1"))
    first.clone(read)
    first.agent_edits({"README.md": EDITED})
    opened = first.publish(read, write)
    assert opened.reason is None, opened.message

    second = Pod(tmp_path / "second", make_run(gitea, repository, "fix-2", follow_up="harness/fix-1"))
    assert second.clone(read) == opened.commit
    second.agent_edits({"src/app.py": "print('hello')\n"})
    report = second.publish(read, write)

    assert report.reason is None, report.message
    assert report.branch == "harness/fix-1" and report.base == opened.commit
    [pull] = gitea.pull_requests(repository)
    assert (report.pull_request_url, report.pull_request_number) == (pull["html_url"], pull["number"])
    assert (opened.pull_request_url, opened.pull_request_number) == (pull["html_url"], pull["number"])
    assert pull["head"]["sha"] == report.commit  # Gitea moved the pull request's head
    commits = gitea.commits(repository, "harness/fix-1")
    assert [c["sha"] for c in commits[:2]] == [report.commit, opened.commit]
    assert gitea.file(repository, "harness/fix-1", "README.md") == EDITED.encode()  # the first change kept
    assert gitea.file(repository, "harness/fix-1", "src/app.py") == b"print('hello')\n"


def test_a_follow_up_whose_branch_a_reviewer_moved_pushes_nothing(
    gitea: Gitea, owner: User, repository: str, tmp_path: Path
) -> None:
    """Someone pushes to the pull request's branch after the follow-up cloned it: the follow-up's push is
    refused (BranchMoved, naming both commits) and the reviewer's commit stays the branch's head."""
    read = gitea.create_token(owner, ["read:repository"])
    write = gitea.create_token(owner, ["write:repository"])
    first = Pod(tmp_path / "first", make_run(gitea, repository, "fix-1"))
    first.clone(read)
    first.agent_edits({"README.md": EDITED})
    opened = first.publish(read, write)
    assert opened.reason is None, opened.message
    second = Pod(tmp_path / "second", make_run(gitea, repository, "fix-2", follow_up="harness/fix-1"))
    second.clone(read)
    second.agent_edits({"src/app.py": "print('hello')\n"})

    moved = gitea.as_user(owner.name).update_file(
        repository, "README.md", "a reviewer's words\n", "harness/fix-1", "Reviewer's fix"
    )
    report = second.publish(read, write)

    assert report.reason == Reason.BranchMoved, report.message
    assert f"it was at {opened.commit} and is now at {moved}" in (report.message or ""), report.message
    assert gitea.branches(repository)["harness/fix-1"] == moved
    assert gitea.pull_request(repository, opened.pull_request_number or 0)["head"]["sha"] == moved
