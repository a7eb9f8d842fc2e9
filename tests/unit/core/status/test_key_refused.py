"""A routed attempt that ended AuthFailed says whose key the vendor refused and where it is fixed: the
platform's Secret (as the chart configures the operator), or the run's own; other results are left
alone, and neither is retried."""

from typing import Any

import pytest

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.catalog import load_builtin_catalog
from harness_operator.contract.result import ResultDocument
from harness_operator.core.access.model_route import compute_model_route
from harness_operator.core.config import OperatorConfig
from harness_operator.core.resolve.retry import compute_next_index
from harness_operator.core.status.key_refused import with_refused_key

# As the chart's deployment sets them (templates/deployment.yaml).
CHART_ENV = {
    "HARNESS_MODEL_GATEWAY_SERVICE": "harness-operator-model.harness-system.svc",
    "HARNESS_MODEL_GATEWAY_NAMESPACE": "harness-system",
    "HARNESS_MODEL_GATEWAY_KEY": "k" * 48,
    "HARNESS_MODEL_GATEWAY_VENDORS": "anthropic,openai",
    "HARNESS_MODEL_GATEWAY_KEY_SECRETS": "anthropic=anthropic-api-key,openai=openai-api-key",
}
CLAUDE = next(d for d in load_builtin_catalog() if d.metadata["name"] == "claude").spec
# What Claude Code reported behind the gateway before (docs/cli-facts.md): the team's key, it says.
CLI_SAID = "Invalid API key · Fix external API key"


def make_run(**spec: Any) -> HarnessRun:
    return HarnessRun.model_validate(
        {
            "metadata": {"name": "review", "namespace": "team-a"},
            "spec": {"provider": "claude", "prompt": "x", **spec},
        }
    )


def failed(reason: str = Reason.AuthFailed, message: str = CLI_SAID) -> ResultDocument:
    return ResultDocument.model_validate(
        {"attempt": 1, "provider": "claude", "exitCode": 1, "reason": reason, "message": message}
    )


def test_the_platforms_refused_key_is_named_by_its_secret_not_the_teams() -> None:
    config = OperatorConfig.from_env(CHART_ENV)
    run = make_run()
    route = compute_model_route(run, CLAUDE, config)
    assert route is not None and route.vendor == "anthropic"
    message = with_refused_key(failed(), run, route, config).message or ""
    assert "refused the platform's key" in message and "not this run's" in message
    assert "Secret harness-system/anthropic-api-key" in message
    assert "modelGateway.vendors.anthropic.secretName" in message and "Fix external API key" not in message


def test_without_the_secrets_name_it_still_says_whose_key_it_is() -> None:
    config = OperatorConfig.from_env({**CHART_ENV, "HARNESS_MODEL_GATEWAY_KEY_SECRETS": ""})
    run = make_run()
    route = compute_model_route(run, CLAUDE, config)
    assert route is not None
    message = with_refused_key(failed(), run, route, config).message or ""
    assert "refused the platform's key" in message and "in its Secret" in message


def test_a_runs_own_key_the_gateway_holds_is_named_as_the_runs() -> None:
    config = OperatorConfig.from_env(CHART_ENV)
    own = {"env": "ANTHROPIC_API_KEY", "secretKeyRef": {"name": "team-key", "key": "api-key"}}
    run = make_run(credentials=[own])
    route = compute_model_route(run, CLAUDE, config)
    assert route is not None  # the gateway holds the run's own key for it
    message = with_refused_key(failed(), run, route, config).message or ""
    assert "the run's own key, Secret team-a/team-key key api-key" in message
    assert "platform" not in message


@pytest.mark.parametrize("reason", [Reason.ProviderError, Reason.RateLimited, None])
def test_other_results_are_left_as_the_cli_said(reason: str | None) -> None:
    config = OperatorConfig.from_env(CHART_ENV)
    run = make_run()
    route = compute_model_route(run, CLAUDE, config)
    assert route is not None
    result = (
        failed(reason, "something else")
        if reason
        else ResultDocument(attempt=1, provider="claude", exit_code=0)
    )
    assert with_refused_key(result, run, route, config) == result


def test_a_refused_key_is_not_retried() -> None:
    # Two tries of claude, then codex: the refused key goes to the fallback, never to claude's retry.
    assert compute_next_index([1, 1, 2], 1, Reason.AuthFailed, fallback_allowed=True) == 3
    assert compute_next_index([1, 1], 1, Reason.AuthFailed, fallback_allowed=True) is None
