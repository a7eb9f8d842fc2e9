"""The chart's side of approvals: the ClusterRole <release>-approver (the verb the policy asks the
authorizer for, aggregated into admin unless switched off) and the values the policy <release>-approvals
renders from."""

from __future__ import annotations

import subprocess
from typing import Any

import yaml
from tests.unit.chart.test_chart import CHART, helm_binary, render_policies, variable


def approver_role(*settings: str) -> dict[str, Any]:
    out = subprocess.run(
        [helm_binary(), "template", "r", str(CHART), *(a for s in settings for a in ("--set", s))],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (role,) = [
        d
        for d in yaml.safe_load_all(out)
        if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == "r-harness-operator-approver"
    ]
    return role


def test_the_approver_role_grants_the_verb_the_policy_asks_for_and_joins_admin() -> None:
    role = approver_role()
    assert role["rules"] == [
        {
            "apiGroups": ["agentharness.dev"],
            "resources": ["harnessruns"],
            "verbs": ["approve", "get", "list", "watch", "patch"],
        }
    ]
    assert role["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    policy = render_policies()["ValidatingAdmissionPolicy/approvals"]
    checks = [v["expression"] for v in policy["spec"]["validations"]]
    asked = [c for c in checks if "authorizer." in c]
    assert len(asked) == 1 and ".resource('harnessruns')" in asked[0] and ".check('approve')" in asked[0]
    assert "r-harness-operator-approver" in variable(policy, "fix")


def test_the_aggregation_into_admin_can_be_switched_off() -> None:
    role = approver_role("approvals.aggregateToAdmin=false")
    assert "rbac.authorization.k8s.io/aggregate-to-admin" not in role["metadata"]["labels"]
    assert role["rules"][0]["verbs"][0] == "approve"


def test_self_approval_and_the_exempt_groups_come_from_the_values() -> None:
    policy = render_policies()["ValidatingAdmissionPolicy/approvals"]
    assert variable(policy, "selfApproval") == "false"
    assert '["system:masters"]' in variable(policy, "exempt")
    allowing = render_policies("approvals.allowSelfApproval=true", "approvals.exemptGroups=null")
    policy = allowing["ValidatingAdmissionPolicy/approvals"]
    assert variable(policy, "selfApproval") == "true"
    assert "g in []" in variable(policy, "exempt")


def test_the_policy_judges_creates_and_updates_of_runs_only() -> None:
    spec = render_policies()["ValidatingAdmissionPolicy/approvals"]["spec"]
    assert spec["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": ["agentharness.dev"],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["harnessruns"],
        }
    ]
