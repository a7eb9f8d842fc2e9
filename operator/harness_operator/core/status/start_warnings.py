"""The Warning Events of an attempt the operator has just created (pure): what it runs without that the
run asked for, and why it follows the attempt before it."""

from __future__ import annotations

from collections.abc import Sequence

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.core.access.egress import ROUTE_PUBLIC
from harness_operator.core.access.tool_policy import compute_tool_policy_warning
from harness_operator.core.attempt import Attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.plan.invocation import find_unknown_options
from harness_operator.core.plan.resumption import Resumption, describe_replays
from harness_operator.core.pod.model_grant import compute_key_warning
from harness_operator.core.status.decide import EventSpec
from harness_operator.core.status.observed import Observed, ObservedAttempt
from harness_operator.core.status.status import describe_next_attempt


def build_start_warnings(
    run: HarnessRun,
    attempts: Sequence[Attempt],
    index: int,
    observed: Sequence[ObservedAttempt],
    config: OperatorConfig,
    resumption: Resumption | None = None,
) -> list[EventSpec]:
    """In order: host rules not enforced by name, options its CLI does not know, a vendor key left in the
    sandbox, tool policy parts it cannot hold, providers told the earlier conversation again (with
    `resumption`), and, after the first, the retry or fallback line (`observed`: the attempts so far)."""
    attempt = attempts[index - 1]
    lines: list[tuple[str, str]] = []
    if attempt.route == ROUTE_PUBLIC:
        lines.append(
            (
                Reason.EgressNotEnforcedByName,
                f"attempt {index} ({attempt.provider}): host egress rules are not enforced by name: no "
                "egress gateway and no Cilium; the sandbox may reach their ports on every public address",
            )
        )
    for key, why in find_unknown_options(attempt.provider, attempt.definition, attempt.options):
        lines.append((Reason.UnknownOption, f"attempt {index}: {attempt.options_field}.{key}: {why}"))
    if (warning := compute_key_warning(run, attempt, config)) is not None:
        lines.append((Reason.ModelKeyInSandbox, warning))
    unheld = compute_tool_policy_warning(attempt.tool_policy, index, attempt.provider, attempt.definition)
    if unheld is not None:
        lines.append((Reason.ToolPolicyNotEnforced, unheld))
    if resumption is not None:
        lines += [(Reason.SessionReplayed, line) for line in describe_replays(resumption, attempts)]
    if index > 1:
        positions = [a.position for a in attempts]
        so_far = Observed([a.provider for a in attempts], list(observed), positions=positions)
        lines.append(describe_next_attempt(run, so_far, index))
    return [EventSpec("Warning", reason, message) for reason, message in lines]
