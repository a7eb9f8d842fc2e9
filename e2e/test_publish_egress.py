"""A published pull request from an ordinary git URL with no hand-written egress (issue 57): the git host
and the forge's API, named as a user names them, are opened through the chart's egress gateway for the
clone and the publishing container only, on a credential the agent's containers never hold. The agent
tries the git host itself, directly and through the gateway, and is refused both ways; the forge (a Gitea
API) gets the repository without the git server's `/git/` prefix. The forge is a stub because no real GitHub
or GitLab can run here (the publisher meets a real Gitea in tests/forge).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator

import pytest
from kubernetes import client
from tests.servers.git_http import GitHttpServer
from tests.stubs.anthropic import AnthropicStub
from tests.stubs.github import GitHubStub

from .conftest import RELEASE, RELEASE_NAMESPACE, STUB_HOST, Runs
from .test_agents import REPO, ROUTES, agent_run
from .test_publish import WRITE_TOKEN, git_server  # noqa: F401  (the token-guarded git server fixture)

# A name the test cluster's CoreDNS answers with the node's address, where the servers listen.
STUB_NAME = "node.harness.test"
OWNER_REPO = "acme/widgets"
GATEWAY = f"http://{RELEASE}-egress.{RELEASE_NAMESPACE}.svc:3128"


@pytest.fixture
def forge() -> Iterator[GitHubStub]:
    with GitHubStub(host=STUB_HOST, web_url="https://gitea.example") as stub:
        yield stub


def test_a_pull_request_from_an_ordinary_git_url_with_no_hand_written_egress(
    runs: Runs,
    git_server: GitHttpServer,  # noqa: F811
    forge: GitHubStub,
    kube: client.ApiClient,
) -> None:
    git_server.create_repo(OWNER_REPO, {"README.md": "hello\n"})
    url = f"http://{STUB_NAME}:{git_server.port}/git/{OWNER_REPO}.git"
    # As the agent would: directly, then through the gateway without a credential of its own.
    proxied = f"git -c http.proxy={GATEWAY}"
    command = " && ".join(
        [
            "printf 'hello, world\\n' > README.md",
            f"(GIT_TERMINAL_PROMPT=0 timeout 30 git ls-remote {url} 2>&1 || true) | tail -n 1"
            " > agent-direct.txt",
            f"(GIT_TERMINAL_PROMPT=0 timeout 30 {proxied} ls-remote {url} 2>&1 || true) | tail -n 1"
            " > agent-proxied.txt",
        ]
    )
    model = AnthropicStub(mode="bash", host=STUB_HOST, command=command).start()
    try:
        runs.secret("forge-write-token", "token", WRITE_TOKEN)
        # The agent's own egress is its model (the stub) only; nothing names the git host or the forge.
        spec = agent_run(runs, "claude", ROUTES["claude"](model.base_url), model.port)
        spec["with"] = {"permission-mode": "bypassPermissions"}  # the sandbox user is not root
        spec["workspace"] = {
            "workingDir": REPO,
            "git": {"url": url, "ref": "main"},
            "publish": {
                "credentialsSecretRef": {"name": "forge-write-token", "key": "token"},
                "pullRequest": {"forge": "gitea", "apiURL": f"http://{STUB_NAME}:{forge.port}/api/v1"},
            },
        }
        runs.create("ordinary", spec)
        status = runs.wait_finished("ordinary")
    finally:
        model.stop()

    assert status["phase"] == "Succeeded" and "changes" in status, runs.describe("ordinary")
    changes = status["changes"]
    assert changes.get("branch") == "harness/ordinary" and changes["files"] == 3, (
        changes,
        runs.describe("ordinary"),
    )
    assert git_server.branches(OWNER_REPO)["harness/ordinary"] == changes["commit"]
    assert git_server.read(OWNER_REPO, "harness/ordinary", "README.md") == b"hello, world\n"
    # The pull request reached Gitea's endpoint for acme/widgets (not git/acme/widgets), with the token.
    [opened] = forge.pull_requests()
    assert (opened["forge"], opened["repository"], opened["status"]) == ("gitea", OWNER_REPO, 201), opened
    assert opened["token_sha256"] == hashlib.sha256(WRITE_TOKEN.encode()).hexdigest()
    assert changes["pullRequestURL"] == f"https://gitea.example/{OWNER_REPO}/pulls/1"
    # The agent could reach the git host neither directly (the policy) nor through the gateway (no
    # credential: 407); only the publisher pushed.
    direct = git_server.read(OWNER_REPO, "harness/ordinary", "agent-direct.txt").decode()
    proxied = git_server.read(OWNER_REPO, "harness/ordinary", "agent-proxied.txt").decode()
    assert "refs/heads/main" not in direct and "fatal" in direct, direct
    assert "407" in proxied and "refs/heads/main" not in proxied, proxied
    assert git_server.refs_pushed() == ["refs/heads/harness/ordinary"]
    # Its pod: the clone and the publisher hold the git credential, the runner and the agent do not;
    # the policy opens the gateway, never the git server's or the forge's port.
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
    policy = client.NetworkingV1Api(kube).read_namespaced_network_policy("ordinary-a1", runs.ns).to_dict()
    ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule.get("ports") or []}
    assert git_server.port not in ports and forge.port not in ports, json.dumps(policy, default=str)
    assert WRITE_TOKEN not in str(status)
