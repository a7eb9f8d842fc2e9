"""The Warning Events of an attempt just created (core/status/start_warnings.py): which, in which order, naming
the attempt and the field."""

from typing import Any

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import HarnessDefinitionSpec, HarnessRun
from harness_operator.contract.result import ResultDocument
from harness_operator.core.attempt import decide_attempts
from harness_operator.core.config import OperatorConfig
from harness_operator.core.resolve.resolution import AttemptTarget
from harness_operator.core.status.observed import ObservedAttempt
from harness_operator.core.status.start_warnings import build_start_warnings

PLAIN = OperatorConfig(fqdn_policy="none", await_network_policy="off")
MODELS = OperatorConfig(
    fqdn_policy="none",
    await_network_policy="off",
    model_gateway_service="models.harness-system.svc",
    model_gateway_namespace="harness-system",
    model_gateway_vendors=("openai",),
    model_gateway_key="k",
)
CLAUDE = HarnessDefinitionSpec.model_validate(
    {
        "binary": "claude",
        "knownOptions": ["model"],
        "credentials": [{"env": "ANTHROPIC_API_KEY", "secretKeyRef": {"name": "a", "key": "k"}}],
        "egress": [{"host": "api.anthropic.com", "ports": [443]}],
    }
)
CODEX = HarnessDefinitionSpec.model_validate({"binary": "codex", "egress": [{"cidr": "10.20.0.0/16"}]})


def make_run(**spec: Any) -> HarnessRun:
    return HarnessRun.model_validate(
        {
            "metadata": {"name": "review", "namespace": "team-a", "uid": "uid-1"},
            "spec": {"provider": "claude", "prompt": "Review.", **spec},
        }
    )


def reasons(run: HarnessRun, config: OperatorConfig, index: int = 1, **kwargs: Any) -> list[tuple[str, str]]:
    targets = [AttemptTarget(1, "claude", CLAUDE, 1), AttemptTarget(2, "codex", CODEX, 2)]
    attempts = decide_attempts(run, targets[: len(run.spec.fallback) + 1], config)
    events = build_start_warnings(run, attempts, index, kwargs.get("observed", []), config)
    assert all(e.type == "Warning" and e.name is None for e in events)
    return [(e.reason, e.message) for e in events]


def test_a_first_attempt_with_nothing_to_warn_of_gets_none() -> None:
    assert reasons(make_run(sandbox={"networkPolicy": "none"}), PLAIN) == []


def test_unenforced_host_rules_then_unknown_options_then_the_key_in_the_sandbox() -> None:
    run = make_run(**{"with": {"modle": "x", "model": "y"}})
    found = reasons(run, MODELS)
    assert [reason for reason, _ in found] == [
        Reason.EgressNotEnforcedByName,
        Reason.UnknownOption,
        Reason.ModelKeyInSandbox,
    ]
    assert found[0][1].startswith("attempt 1 (claude): host egress rules are not enforced by name")
    assert found[1][1].startswith("attempt 1: spec.with.modle: ")
    assert "attempt 1 (claude) is not routed through the model gateway" in found[2][1]


def test_a_fallback_is_told_after_its_own_warnings_naming_its_options_field() -> None:
    run = make_run(fallback=[{"provider": "codex", "with": {"effort": "low"}}])
    failed = ResultDocument.model_validate({"attempt": 1, "provider": "claude", "exitCode": 1})
    observed = [ObservedAttempt(1, "claude", "review-1", result=failed)]
    found = reasons(run, PLAIN, 2, observed=observed)
    assert [reason for reason, _ in found] == [Reason.FallingBack]
    assert "codex" in found[0][1]
