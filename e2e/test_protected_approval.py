"""A change to a protected path that the platform lets through with a person's approval, on the cluster:
the chart installed with `publishing.protectedPaths` saying `.github/workflows/` RequireApproval (instead
of the default's `.github/` Refuse, which e2e/test_publish.py shows refusing the same change); the real
Claude Code adds `.github/workflows/x.yml`, the run (which asks for no approval itself) waits
AwaitingApproval naming the path, and `harnessctl approve`, run as the test's user, publishes it: the
branch holds the workflow file and the pull request is open on the forge stub.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from tests.servers.git_http import GitHttpServer
from tests.stubs.github import GitHubStub

from .conftest import CHART, Runs, install_chart, kubectl
from .test_approval import wait_awaiting, whoami
from .test_publish import OWNER_REPO, Publishing, forge, git_server  # noqa: F401 (the stubs' fixtures)

HARNESSCTL = str(Path(sys.executable).parent / "harnessctl")
WORKFLOW = ".github/workflows/x.yml"


def workflows_need_approval() -> list[dict[str, Any]]:
    """The chart's default rules with `.github/` (Refuse) replaced by `.github/workflows/` RequireApproval:
    a Refuse rule over the same path would win over it."""
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())["publishing"]["protectedPaths"]
    assert {"path": ".github/", "action": "Refuse"} in defaults, "the default no longer refuses .github/"
    rules = [rule for rule in defaults if rule["path"] != ".github/"]
    return [*rules, {"path": ".github/workflows/", "action": "RequireApproval"}]


@pytest.fixture(scope="module")
def approval_policy(release: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The release with workflows allowed through approval (the operator's Deployment rolls out with the
    new rules); the chart's defaults again afterwards."""
    values = tmp_path_factory.mktemp("values") / "protected-paths.yaml"
    values.write_text(yaml.safe_dump({"publishing": {"protectedPaths": workflows_need_approval()}}))
    install_chart("-f", str(values))
    yield
    install_chart()


@pytest.fixture
def publishing(
    approval_policy: None,
    runs: Runs,
    git_server: GitHttpServer,  # noqa: F811
    forge: GitHubStub,  # noqa: F811
) -> Iterator[Publishing]:
    env = Publishing(runs, git_server, forge)
    yield env
    env.stop()


def harnessctl(*args: str) -> subprocess.CompletedProcess[str]:
    """harnessctl as the user types it, with the test's kubeconfig."""
    return subprocess.run(
        [HARNESSCTL, *args], capture_output=True, text=True, check=False, env={**os.environ}, timeout=60
    )


def test_a_workflow_change_waits_for_approval_and_is_published_once_approved(
    publishing: Publishing, runs: Runs, kube: client.ApiClient
) -> None:
    publishing.create("workflow", f"mkdir -p .github/workflows && printf 'on: push\\n' > {WORKFLOW}")

    status = wait_awaiting(runs, "workflow")

    assert status["changes"]["approvalPaths"] == [WORKFLOW], publishing.describe("workflow")
    assert WORKFLOW in status["message"] and "harnessctl approve workflow" in status["message"], status
    assert "harness/workflow" not in publishing.server.branches(OWNER_REPO)
    assert not publishing.forge.pull_requests()
    shown = kubectl("get", "hrun", "workflow", "-n", runs.ns).stdout
    assert "AwaitingApproval" in shown, shown

    approved = harnessctl("approve", "workflow", "-n", runs.ns, "--reason", "the workflow is reviewed")
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.strip().endswith("/workflow approved"), approved.stdout
    status = runs.wait_finished("workflow")

    assert status["phase"] == "Succeeded", publishing.describe("workflow")
    approval = status["approval"]
    assert (approval["decision"], approval["user"], approval["reason"]) == (
        "Approved",
        whoami(kube),
        "the workflow is reviewed",
    )
    changes = status["changes"]
    assert changes["branch"] == "harness/workflow" and changes["pullRequestURL"], changes
    assert publishing.server.branches(OWNER_REPO)["harness/workflow"] == changes["commit"]
    assert publishing.server.read(OWNER_REPO, "harness/workflow", WORKFLOW) == b"on: push\n"
    [opened] = publishing.forge.pull_requests()
    assert opened["body"]["head"] == "harness/workflow"
    wide = kubectl("get", "hrun", "workflow", "-n", runs.ns, "-o", "wide").stdout.splitlines()[1]
    assert wide.split()[-2:] == ["Approved", whoami(kube)], wide
    # A decision never changes: a second approve is refused and says by whom it was taken.
    again = harnessctl("approve", "workflow", "-n", runs.ns)
    assert again.returncode != 0 and "Approved already" in again.stderr, (again.stdout, again.stderr)
