"""The README's path after the first run, as the README writes it (issue 57's done-when): "### 4. A pull
request" and "### 5. A budget", their manifests and commands taken from the README's own blocks, with only
the substitutions a test cannot avoid, each named in its test's docstring and asserted to find its target
(a README edit that drops one fails here). The release's model gateway holds the vendors' keys, its
Anthropic the stub (test_model_gateway's `vendors`): the runs are routed as the README's are.

The pull request: an ordinary git URL, no hand-written egress at all (the run names none); the git host
and the forge's API are opened for the clone and the publishing container only, on a credential the
agent's containers never hold. The budget: one request's worst case above what it leaves, and the run's
status names the cap that bound and what it was charged.

The forge is a stub of GitHub Enterprise's API: no real GitHub can run here (tests/forge/ runs the
publisher against a real Gitea).
"""

from __future__ import annotations

import hashlib
import json
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

from harness_operator.api.v1alpha1 import GROUP, VERSION

from .conftest import ROOT, STUB_HOST, Runs, readme_blocks, readme_commands, tool, wait_until
from .test_model_gateway import vendors  # noqa: F401  (the release with the gateway holding the keys)
from .test_publish import WRITE_TOKEN, git_server  # noqa: F401  (the token-guarded git server fixture)

# A name the test cluster's CoreDNS answers with the node's address, where the servers listen.
STUB_NAME = "node.harness.test"
PULL_REQUEST, BUDGET = "### 4. A pull request", "### 5. A budget"
README_GIT_URL = "https://github.com/acme/payments.git"
OWNER_REPO = "acme/payments"
WRITTEN = "src/http/FIX.md"  # what the agent writes (acceptEdits lets Write through)


def substitute(text: str, target: str, replacement: str) -> str:
    """`text` with `target` replaced; the README must still hold `target`."""
    assert target in text, f"the README's block no longer holds {target!r}:\n{text}"
    return text.replace(target, replacement)


def as_user(command: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """A command of the README run by bash as a user types it: kubectl and harnessctl on PATH."""
    path = [Path(tool("kubectl")).parent, Path(sys.executable).parent]
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env={**os.environ, **env, "PATH": ":".join([*map(str, path), os.environ["PATH"]])},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture
def forge() -> Iterator[GitHubStub]:
    with GitHubStub(host=STUB_HOST, web_url="https://github.example") as stub:
        yield stub


def test_a_pull_request_from_an_ordinary_git_url_as_the_readme_writes_it(
    vendors: dict[str, Any],  # noqa: F811
    runs: Runs,
    git_server: GitHttpServer,  # noqa: F811
    forge: GitHubStub,
    kube: client.ApiClient,
    tmp_path: Path,
) -> None:
    """The README's manifest and its three commands, with three substitutions: the namespace `team-a` is
    the test's (in the manifest and in `-n team-a`); the git URL `https://github.com/acme/payments.git`
    is the test git server's, `http://node.harness.test:PORT/git/acme/payments.git` (a forge under a
    sub-path); the pull request gets `apiURL`, the forge stub's GitHub Enterprise API
    (`http://node.harness.test:PORT/api/v3`), since api.github.com is not reachable here. The Secret's
    name and key are the README's. The gateway's Anthropic stub answers the agent's first turn with a
    Write of one file."""
    [manifest] = readme_blocks(PULL_REQUEST, "yaml")
    [commands] = readme_blocks(PULL_REQUEST, "sh")
    git_server.create_repo(OWNER_REPO, {"README.md": "payments\n", "src/http/client.py": "TIMEOUT = 1\n"})
    url = f"http://{STUB_NAME}:{git_server.port}/git/{OWNER_REPO}.git"
    manifest = substitute(manifest, "namespace: team-a", f"namespace: {runs.ns}")
    run = yaml.safe_load(substitute(manifest, README_GIT_URL, url))
    pull_request = run["spec"]["workspace"]["publish"]["pullRequest"]
    assert "apiURL" not in pull_request and "forge" not in pull_request, pull_request  # GitHub's defaults
    api_url = f"http://{STUB_NAME}:{forge.port}/api/v3"
    pull_request["apiURL"] = api_url
    (tmp_path / "fix-flaky-test.yaml").write_text(yaml.safe_dump(run))
    create_secret, validate_and_apply, get_wide = readme_commands(
        substitute(commands, "-n team-a", f"-n {runs.ns}")
    )
    as_user(create_secret, cwd=tmp_path, PUSH_TOKEN=WRITE_TOKEN)
    model = vendors["anthropic"]
    write = {"file_path": f"{run['spec']['workspace']['workingDir']}/{WRITTEN}", "content": "Fixed.\n"}
    model.mode, model.call = "call", ("Write", write)
    try:
        validated = as_user(validate_and_apply, cwd=tmp_path)
        status = runs.wait_finished("fix-flaky-test")
    finally:
        model.mode, model.call = "ok", None
    # validate said where the pull request goes, before the run was applied.
    assert f"opens a pull request on github repository {OWNER_REPO} through {api_url}" in (
        validated.stdout + validated.stderr
    ), validated
    assert status["phase"] == "Succeeded" and "changes" in status, runs.describe("fix-flaky-test")
    changes = status["changes"]
    assert changes.get("branch") == "harness/fix-flaky-test" and changes["files"] == 1, changes
    assert git_server.branches(OWNER_REPO)["harness/fix-flaky-test"] == changes["commit"]
    assert git_server.read(OWNER_REPO, "harness/fix-flaky-test", WRITTEN) == b"Fixed.\n"
    assert git_server.refs_pushed() == ["refs/heads/harness/fix-flaky-test"]  # the publisher alone
    # The pull request: GitHub's endpoint for acme/payments (not git/acme/payments), the README's title
    # and body templates filled in, the write token.
    [opened] = forge.pull_requests()
    assert (opened["forge"], opened["repository"], opened["status"]) == ("github", OWNER_REPO, 201), opened
    assert opened["body"]["title"] == "fix-flaky-test: fix the flaky test", opened
    assert opened["body"]["body"].strip() == runs.output("fix-flaky-test").strip(), opened
    assert opened["token_sha256"] == hashlib.sha256(WRITE_TOKEN.encode()).hexdigest()
    assert changes["pullRequestURL"] == f"https://github.example/{OWNER_REPO}/pull/1"
    wide = as_user(get_wide, cwd=tmp_path).stdout
    assert "harness/fix-flaky-test" in wide and changes["pullRequestURL"] in wide, wide
    # Its pod: the clone and the publisher hold the egress gateway's credential, the runner and the agent
    # do not; the policy opens neither the git server's port nor the forge's.
    pod = runs.core.read_namespaced_pod(status["attempts"][0]["podName"], runs.ns)
    keys = {
        c.name: {
            e.value_from.secret_key_ref.key
            for e in c.env or []
            if e.value_from and e.value_from.secret_key_ref
        }
        for c in [*pod.spec.init_containers, *pod.spec.containers]
    }
    assert "proxy-url-1-git" in keys["git-clone"] and "proxy-url-1-git" in keys["publish"], keys
    assert not [k for name in ("runner", "agent") for k in keys[name] if k.startswith("proxy-url")], keys
    policy = client.NetworkingV1Api(kube).read_namespaced_network_policy("fix-flaky-test-a1", runs.ns)
    ports = {p["port"] for rule in policy.to_dict()["spec"]["egress"] for p in rule.get("ports") or []}
    assert git_server.port not in ports and forge.port not in ports, json.dumps(policy.to_dict(), default=str)
    assert WRITE_TOKEN not in str(status)


def test_a_budget_as_the_readme_writes_it_says_what_bound(
    vendors: dict[str, Any],  # noqa: F811
    runs: Runs,
    tmp_path: Path,
) -> None:
    """The issue's trial: a 0.03 USD budget stopped a run with nothing spent, and nothing said why. The
    README's budget applied with kubectl, the run the quick start's `examples/quickstart/hello.yaml`, with
    three substitutions: the budget's namespace `team-a` is the test's; its `limits.maxCostUSD` 50 is 0.03
    (below one request's worst case, so the cap binds: what the test is about); the run gets the label
    the budget's selector names (`team: a`)."""
    [manifest] = readme_blocks(BUDGET, "yaml")
    manifest = substitute(manifest, "namespace: team-a", f"namespace: {runs.ns}")
    manifest = substitute(manifest, "limits: {maxCostUSD: 50,", "limits: {maxCostUSD: 0.03,")
    budget = yaml.safe_load(manifest)
    name = budget["metadata"]["name"]
    assert budget["spec"]["selector"] == {"matchLabels": {"team": "a"}}, budget
    (tmp_path / "budget.yaml").write_text(manifest)
    hello = yaml.safe_load((ROOT / "examples/quickstart/hello.yaml").read_text())
    hello["metadata"]["labels"] = {"team": "a"}
    (tmp_path / "hello.yaml").write_text(yaml.safe_dump(hello))
    as_user("kubectl apply -f budget.yaml", cwd=tmp_path)
    as_user(f"kubectl apply -n {runs.ns} -f hello.yaml", cwd=tmp_path)
    status = runs.wait_finished("hello")
    assert (status["phase"], status["reason"]) == ("Failed", "CostLimitExceeded"), runs.describe("hello")
    message = status["message"]
    assert (
        f"at the 0.03 USD the run reserved from HarnessBudget {name} (status.budget.reservedUSD)" in message
    ), message
    assert "below one request's worst case in USD" in message, message
    assert f"raise HarnessBudget {name}'s limits.maxCostUSD" in message, message
    charge = status["budget"]["charge"]
    assert charge["basis"] == "Metered" and charge["amountUSD"] == status["usage"]["costUSD"], status
    assert charge["amountUSD"] < 0.03, charge

    def settled() -> dict[str, Any] | None:
        """The budget's status once the run is counted and its reservation given back (its spend may be 0:
        a falsy figure is no answer to wait on)."""
        got = runs.custom.get_namespaced_custom_object(GROUP, VERSION, runs.ns, "harnessbudgets", name)
        budget_status = got.get("status") or {}
        return budget_status if budget_status.get("runs") and not budget_status.get("reservedUSD") else None

    spent = wait_until(settled, 60, "the budget to settle the run").get("spentUSD", 0.0)
    assert spent == pytest.approx(charge["amountUSD"])
    print(f"\nthe run's message: {message}\nits charge: {charge}")
