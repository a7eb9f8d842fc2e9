"""Every attempt's plan, by one path for the operator, `harnessctl render` and `harnessctl run` (pure):
the invocation (planning.py), the prices, the gateways' variables, the probe to wait on, what to redact.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.contract.plan import AttemptPlan
from harness_operator.core.access.egress import ROUTE_GATEWAY
from harness_operator.core.attempt import Attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.objects.traced import build_attempt_traceparent
from harness_operator.core.plan.planning import PlanError, build_plan, with_output_limit
from harness_operator.core.plan.pricing import with_pricing
from harness_operator.core.plan.resumption import Resumption, build_replay_prompt, compute_continuation
from harness_operator.core.pod.egress_grant import with_gateway
from harness_operator.core.pod.model_grant import merge_route_options, with_model_route

# ConfigMaps hold at most 1 MiB: without maxOutputBytes, a run's output is cut (and flagged) here.
OUTPUT_CONFIG_MAP_LIMIT = 1_000_000
# What the plan Secret's attempts may take of the 1 MiB a Secret holds (the rest: gateway credentials).
PLANS_LIMIT = 1_000_000


def build_attempt_plans(
    run: HarnessRun,
    attempts: Sequence[Attempt],
    prompt: str,
    stdin: str | None,
    now: datetime,
    config: OperatorConfig,
    resumption: Resumption | None = None,
    secret_values: Sequence[str] = (),
) -> list[AttemptPlan]:
    """Every attempt's plan, list prices of `now` from the pinned table. An attempt whose host rules go
    through the egress gateway gets its proxy variables, a routed one the model gateway's, one under a
    restricting policy the probe to wait on before its agent starts. With `resumption`, an attempt whose
    CLI can resume the earlier session does, any other gets it replayed in its prompt. `secret_values`
    (what the prompt and stdin took from Secrets) are redacted by every attempt's runner."""
    plans = []
    for a in attempts:
        resume = compute_continuation(resumption, a.provider, a.definition)
        text = prompt if resumption is None or resume else build_replay_prompt(resumption, prompt)
        given = a.options if a.model_route is None else merge_route_options(a.options, a.model_route, config)
        plan = build_plan(run, a, given, text, stdin, resume)
        plan = with_pricing(plan, a.definition, a.namespaced, now)
        if a.route == ROUTE_GATEWAY:
            plan = with_gateway(plan, a.egress)
        if a.model_route is not None:
            plan = with_model_route(plan, a.model_route, config)
        traceparent = build_attempt_traceparent(run.metadata.get("uid") or "", a.index, config)
        plan = plan.model_copy(update={"confinement": a.confinement, "trace_parent": traceparent})
        if secret_values:
            plan = plan.model_copy(update={"redacted_values": sorted(set(secret_values))})
        plans.append(plan)
    return plans


def build_plans(
    run: HarnessRun,
    attempts: Sequence[Attempt],
    prompt: str,
    stdin: str | None,
    now: datetime,
    config: OperatorConfig,
    resumption: Resumption | None = None,
    secret_values: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Every attempt's plan as the plan Secret holds it: output bounded by what a ConfigMap holds. Fields
    at their defaults are left out, so a sandbox image older than the operator (pinned by a definition)
    still reads every plan that uses nothing new."""
    plans = [
        with_output_limit(plan, OUTPUT_CONFIG_MAP_LIMIT).model_dump(
            by_alias=True, mode="json", exclude_defaults=True
        )
        for plan in build_attempt_plans(run, attempts, prompt, stdin, now, config, resumption, secret_values)
    ]
    size = sum(len(json.dumps(plan, sort_keys=True).encode()) for plan in plans)
    if size > PLANS_LIMIT:
        raise PlanError(
            Reason.PlanTooLarge,
            f"the plans of the run's {len(plans)} attempts are {size} bytes, more than the plan Secret "
            f"holds ({PLANS_LIMIT}): each attempt's plan carries the prompt and stdin (twice with "
            "spec.outputReprompts, for a CLI that cannot continue its session); lower spec.retry.limit or "
            "list fewer spec.fallback providers",
        )
    return plans
