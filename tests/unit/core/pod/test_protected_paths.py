"""The protected paths' merge (core/pod/protected_paths.py): platform, namespace and run, where only the
platform may loosen; the namespace's annotation read or refused with its fix; the merged rules in the
publisher's plan."""

from __future__ import annotations

import itertools
import json

import pytest
from tests.unit.core.pod.test_publish import TARGET, URL, make_run

from harness_operator.api.v1alpha1 import ProtectedPathAction, ProtectedPathRule
from harness_operator.contract.changes import PUBLISH_PLAN_ENV, PublishPlan
from harness_operator.core.attempt import decide_attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.pod.job import build_job
from harness_operator.core.pod.protected_paths import (
    NAMESPACE_ANNOTATION,
    merge_protected_paths,
    parse_namespace_rules,
)
from harness_operator.runner.protected_paths import strictest_rule

REFUSE, APPROVE = ProtectedPathAction.refuse, ProtectedPathAction.require_approval


def rule(path: str, action: ProtectedPathAction = REFUSE) -> ProtectedPathRule:
    return ProtectedPathRule(path=path, action=action)


def test_layers_add_rules_in_order() -> None:
    merged = merge_protected_paths([rule(".github/")], [rule("deploy/", APPROVE)], [rule("Makefile")])
    assert merged == [rule(".github/"), rule("deploy/", APPROVE), rule("Makefile")]


@pytest.mark.parametrize(
    ("platform", "namespace", "run", "expected"),
    [
        (a, b, c, max(a, b, c, key=lambda x: x == REFUSE))
        for a, b, c in itertools.product([REFUSE, APPROVE], repeat=3)
    ],
)
def test_one_path_takes_the_strictest_action_of_any_layer(
    platform: ProtectedPathAction,
    namespace: ProtectedPathAction,
    run: ProtectedPathAction,
    expected: ProtectedPathAction,
) -> None:
    merged = merge_protected_paths([rule("ci/", platform)], [rule("ci/", namespace)], [rule("CI/", run)])
    assert merged == [rule("ci/", expected)]  # one rule, the platform's spelling (case is ignored)


@pytest.mark.parametrize("path", [".github/workflows/x.yml", "CLAUDE.md", "a/AGENTS.md"])
def test_a_run_cannot_loosen_the_platform(path: str) -> None:
    """Whatever rules a run writes (RequireApproval for the very path, a broader folder, a glob), a path
    the platform refuses stays refused."""
    platform = list(OperatorConfig().protected_paths)
    loosening = [
        rule(".github/", APPROVE),
        rule(path, APPROVE),
        rule("*", APPROVE),
        rule("CLAUDE.md", APPROVE),
    ]
    merged = merge_protected_paths(platform, [], loosening)
    found = strictest_rule(path, merged)
    assert found is not None and found.action == REFUSE
    assert {r.path.casefold() for r in platform} <= {r.path.casefold() for r in merged}


def test_a_run_may_tighten_an_approval_to_a_refusal() -> None:
    merged = merge_protected_paths([rule(".github/", APPROVE)], [], [rule(".github/")])
    assert strictest_rule(".github/workflows/x.yml", merged) == rule(".github/")


def test_the_namespace_annotation_is_read() -> None:
    text = json.dumps([{"path": "deploy/", "action": "RequireApproval"}, {"path": "*.tf"}])
    assert parse_namespace_rules({NAMESPACE_ANNOTATION: text}) == [rule("deploy/", APPROVE), rule("*.tf")]
    assert parse_namespace_rules(None) == [] and parse_namespace_rules({"other": "x"}) == []


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("deploy/", "not a JSON list of rules"),
        ('{"path": "deploy/"}', "not a JSON list of rules"),
        ('[{"path": "deploy/", "action": "Allow"}]', "not a JSON list of rules"),
        ('[{"action": "Refuse"}]', "not a JSON list of rules"),
        ('[{"path": "/etc"}]', 'drop the leading "/"'),
    ],
)
def test_a_malformed_annotation_names_itself_and_the_fix(text: str, said: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_namespace_rules({NAMESPACE_ANNOTATION: text})
    message = str(raised.value)
    assert NAMESPACE_ANNOTATION in message and said in message
    if "JSON" in said:
        assert '[{"path": "deploy/", "action": "Refuse"}]' in message


def plan_of(job: dict[str, object]) -> PublishPlan:
    spec = job["spec"]["template"]["spec"]  # type: ignore[index]
    [publisher] = [c for c in spec["initContainers"] if c["name"] == "publish"]
    [env] = [e["value"] for e in publisher["env"] if e["name"] == PUBLISH_PLAN_ENV]
    return PublishPlan.model_validate_json(env.replace("$$", "$"))


def test_the_publisher_s_plan_holds_the_merged_rules() -> None:
    rules = [
        {"path": "deploy/", "action": "RequireApproval"},
        {"path": ".github/", "action": "RequireApproval"},
    ]
    publish = {
        "branch": {},
        "credentialsSecretRef": {"name": "write", "key": "token"},
        "protectedPaths": rules,
    }
    run = make_run({"git": {"url": URL}, "publish": publish})
    config = OperatorConfig(protected_paths=(rule(".github/"), rule("CODEOWNERS", APPROVE)))
    job = build_job(run, decide_attempt(run, TARGET, config), config, namespace_rules=[rule("CODEOWNERS")])
    assert plan_of(job).protected_paths == [rule(".github/"), rule("CODEOWNERS"), rule("deploy/", APPROVE)]


def test_the_chart_default_is_the_operator_s_default() -> None:
    assert OperatorConfig.from_env({}).protected_paths == OperatorConfig().protected_paths
    loosened = OperatorConfig.from_env(
        {"HARNESS_PROTECTED_PATHS": '[{"path": ".github/workflows/", "action": "RequireApproval"}]'}
    )
    assert loosened.protected_paths == (rule(".github/workflows/", APPROVE),)
    with pytest.raises(ValueError, match="HARNESS_PROTECTED_PATHS"):
        OperatorConfig.from_env({"HARNESS_PROTECTED_PATHS": '[{"path": "x", "action": "Maybe"}]'})
