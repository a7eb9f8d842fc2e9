"""One attempt's plan for the tests of Dagu's rules: core/plan/planning.build_plan, the attempt decided as the
operator decides it (core/attempt.py), with no gateway."""

from typing import Any

from harness_operator.api.v1alpha1 import HarnessDefinitionSpec, HarnessRun
from harness_operator.contract.plan import AttemptPlan
from harness_operator.core.attempt import decide_attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.plan.planning import build_plan
from harness_operator.core.plan.resumption import Continuation
from harness_operator.core.resolve.resolution import AttemptTarget


def plan_of(
    run: HarnessRun,
    definition: HarnessDefinitionSpec,
    index: int,
    provider: str,
    options: dict[str, Any],
    prompt: str,
    stdin: str | None,
    position: int | None = None,
    resume: Continuation | None = None,
) -> AttemptPlan:
    """The plan of attempt `index` with `provider`'s `definition`, the provider at `position` of the run's
    chain (default: the attempt's index), invoked with `options`."""
    attempt = decide_attempt(
        run, AttemptTarget(index, provider, definition, position or index), OperatorConfig()
    )
    return build_plan(run, attempt, options, prompt, stdin, resume)
