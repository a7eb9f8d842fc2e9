"""A routed attempt's plan names the model gateway's URL as its model destination, for every routed built-in,
whether its CLI reads that URL from env (Claude Code), options (Codex) or a file (Pi): the runner waits for
what the plan names before it starts the agent. An attempt that is not routed names none."""

import json
from datetime import UTC, datetime

import pytest

from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.catalog import load_builtin_catalog
from harness_operator.contract.plan import AttemptPlan, load_plan
from harness_operator.core.attempt import decide_attempts
from harness_operator.core.config import OperatorConfig
from harness_operator.core.plan.plans import build_plans
from harness_operator.core.resolve.resolution import AttemptTarget
from harness_operator.runner.network import Destination, find_destinations

GATEWAY = OperatorConfig(
    model_gateway_service="harness-operator-model.harness-system.svc",
    model_gateway_namespace="harness-system",
    model_gateway_vendors=("anthropic", "openai", "gemini"),
    model_gateway_key="m0del-k3y",
)
NOW = datetime(2026, 12, 1, tzinfo=UTC)
ROUTED = {e.metadata["name"]: e.spec for e in load_builtin_catalog() if e.spec.model_route is not None}


def plan_of(provider: str, config: OperatorConfig) -> AttemptPlan:
    run = HarnessRun.model_validate(
        {
            "metadata": {"name": "review", "namespace": "team-a", "uid": "uid-1"},
            "spec": {"provider": provider, "prompt": "Review."},
        }
    )
    attempts = decide_attempts(run, [AttemptTarget(1, provider, ROUTED[provider], 1)], config)
    return load_plan(json.dumps(build_plans(run, attempts, "Review.", None, NOW, config)[0]))


def test_every_routed_cli_of_the_catalog_is_covered() -> None:
    assert {"claude", "claude-acp", "codex", "codex-acp", "gemini", "gemini-acp", "opencode", "pi"} <= set(
        ROUTED
    )


@pytest.mark.parametrize("provider", sorted(ROUTED))
def test_a_routed_attempt_names_the_gateway_and_the_runner_waits_for_it(provider: str) -> None:
    route = ROUTED[provider].model_route
    assert route is not None
    vendor = route.vendor
    plan = plan_of(provider, GATEWAY)
    url = f"http://harness-operator-model.harness-system.svc:8080/{vendor}"
    assert plan.model_destinations == [url]
    found = find_destinations({e.name: e.value for e in plan.env}, plan.model_destinations)
    assert [(d.host, d.port) for d in found] == [("harness-operator-model.harness-system.svc", 8080)]


@pytest.mark.parametrize("provider", ["codex", "opencode", "pi"])
def test_without_the_plans_destination_the_runner_would_wait_for_nothing(provider: str) -> None:
    """These CLIs name the gateway in options, a JSON variable or a file: nothing in env ends in _BASE_URL."""
    plan = plan_of(provider, GATEWAY)
    assert find_destinations({e.name: e.value for e in plan.env}) == []
    assert find_destinations({e.name: e.value for e in plan.env}, plan.model_destinations) == [
        Destination("harness-operator-model.harness-system.svc", 8080, "model destination")
    ]


@pytest.mark.parametrize("provider", sorted(ROUTED))
def test_an_attempt_that_is_not_routed_names_no_model_destination(provider: str) -> None:
    assert plan_of(provider, OperatorConfig()).model_destinations == []
