"""An approval that opens a real pull request (issue 52's approval against a real Gitea): the real Claude
Code (the Anthropic stub's bash mode) edits a Gitea repository's clone, the run asks for approval
(publish.approval.required) and waits AwaitingApproval with nothing pushed; `harnessctl approve`, run as
the test's user, publishes the kept change from a pod of its own: the branch and a pull request with the
change appear in Gitea, and the run's status.approval names the approver.

The forge tier (needs a running Gitea: tests/cluster/gitea start, or `make forge-test`; skipped without
one). It installs nothing more than the e2e release: the agent reaches the stub, git and the forge are
Gitea's.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from tests.stubs.anthropic import AnthropicStub

from .conftest import STUB_HOST, Runs, kubectl
from .test_agents import REPO, ROUTES, agent_run
from .test_approval import wait_awaiting, whoami
from .test_forge_loop import running_gitea

pytestmark = pytest.mark.forge
HARNESSCTL = str(Path(sys.executable).parent / "harnessctl")
README = "# widgets\n"
EDITED = "# widgets\n\nApproved by a person before it was pushed.\n"
EDIT = "printf '# widgets\\n\\nApproved by a person before it was pushed.\\n' > README.md"


@pytest.fixture
def model() -> Iterator[AnthropicStub]:
    """The vendor as Claude Code meets it: each model call answers with a bash call making the edit."""
    stub = AnthropicStub(mode="bash", host=STUB_HOST, command=EDIT).start()
    yield stub
    stub.stop()


def test_an_approval_opens_the_pull_request_in_gitea(
    runs: Runs, model: AnthropicStub, kube: client.ApiClient
) -> None:
    gitea = running_gitea()
    owner = gitea.create_user(f"owner-{secrets.token_hex(4)}")
    repository = f"{owner.name}/widgets"
    gitea.create_repo(owner.name, "widgets", {"README.md": README})
    runs.secret("gitea-write", "token", gitea.create_token(owner, ["write:repository"]))
    spec = agent_run(runs, "claude", ROUTES["claude"](model.base_url), model.port)
    spec["with"] = {"permission-mode": "bypassPermissions"}  # the sandbox user is not root
    spec["workspace"] = {
        "workingDir": REPO,
        "git": {"url": gitea.clone_url(repository), "ref": "main"},
        "publish": {
            "credentialsSecretRef": {"name": "gitea-write", "key": "token"},
            "pullRequest": {"forge": "gitea"},
            "approval": {"required": True},
        },
    }
    forge = urllib.parse.urlsplit(gitea.base_url)
    spec["sandbox"]["egress"].append({"cidr": f"{forge.hostname}/32", "ports": [forge.port]})
    runs.create("reviewed", spec)

    status = wait_awaiting(runs, "reviewed")

    assert status["changes"]["files"] == 1 and "approvalPaths" not in status["changes"], status
    assert "harness/reviewed" not in gitea.branches(repository)
    assert gitea.pull_requests(repository) == []

    approved = subprocess.run(
        [HARNESSCTL, "approve", "reviewed", "-n", runs.ns],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ},
        timeout=60,
    )
    assert approved.returncode == 0, approved.stderr
    status = runs.wait_finished("reviewed")

    assert status["phase"] == "Succeeded", runs.describe("reviewed")
    approver = whoami(kube)
    assert (status["approval"]["decision"], status["approval"]["user"]) == ("Approved", approver)
    assert status["approval"]["time"]
    changes = status["changes"]
    [pull] = gitea.pull_requests(repository)
    assert changes["pullRequestURL"] == pull["html_url"] and changes["pullRequestNumber"] == pull["number"]
    assert pull["head"]["ref"] == "harness/reviewed" == changes["branch"], pull
    assert pull["head"]["sha"] == changes["commit"] and pull["base"]["ref"] == "main", pull
    assert gitea.file(repository, changes["branch"], "README.md") == EDITED.encode()
    # `kubectl get -o wide` shows the decision and who took it.
    header, row = kubectl("get", "hrun", "reviewed", "-n", runs.ns, "-o", "wide").stdout.splitlines()[:2]
    assert header.split()[-2:] == ["APPROVAL", "APPROVER"], header
    assert row.split()[-2:] == ["Approved", approver], row
