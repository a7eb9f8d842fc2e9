"""HarnessBudget: a spending limit per team."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import ConfigDict, Field

from harness_operator.api.common import (
    API_VERSION,
    Model,
    rule,
    validations,
)

# --- HarnessBudget -------------------------------------------------------------------------------


class BudgetPeriod(StrEnum):
    daily = "daily"
    weekly = "weekly"
    monthly = "monthly"
    rolling = "rolling"


class WhenExhausted(StrEnum):
    wait = "Wait"
    fail = "Fail"


class LabelSelector(Model):
    """Runs whose labels all match."""

    match_labels: dict[str, str] = Field(
        default_factory=dict, description="Label key -> value; every pair must match."
    )


class BudgetLimits(Model):
    """What the runs of one period may spend together; unset: no limit on that figure."""

    max_cost_usd: float | None = Field(
        default=None, alias="maxCostUSD", gt=0, description="USD per period (reported or computed cost)."
    )
    max_tokens: int | None = Field(
        default=None, ge=1, description="Input + output + cache tokens per period."
    )
    max_runs: int | None = Field(default=None, ge=1, description="Runs started per period.")

    model_config = ConfigDict(
        json_schema_extra=validations(
            rule(
                "has(self.maxCostUSD) || has(self.maxTokens) || has(self.maxRuns)",
                "set at least one of maxCostUSD, maxTokens or maxRuns",
            )
        ),
    )


class HarnessBudgetSpec(Model):
    """A spending limit for the runs of a namespace (or of a label selector in it), per period."""

    period: BudgetPeriod = Field(
        description="daily, weekly (from Monday), monthly (calendar months, UTC), or rolling "
        "(the last windowSeconds)."
    )
    window_seconds: int | None = Field(
        default=None, ge=10, le=31_622_400, description="The rolling window; only and always for rolling."
    )
    limits: BudgetLimits = Field(description="The period's limits.")
    selector: LabelSelector | None = Field(
        default=None, description="The runs it covers; unset: every run of the namespace."
    )
    when_exhausted: WhenExhausted = Field(
        default=WhenExhausted.wait,
        description="Wait: a run waits Queued (BudgetExhausted) until the period rolls over; Fail: it fails.",
    )
    default_reservation_usd: float | None = Field(
        default=None,
        alias="defaultReservationUSD",
        gt=0,
        description="USD reserved for a starting run without its own maxCostUSD; unset: what is left.",
    )

    model_config = ConfigDict(
        json_schema_extra=validations(
            rule(
                "(self.period == 'rolling') == has(self.windowSeconds)",
                "spec.windowSeconds is required for period rolling, and only then",
                field_path=".windowSeconds",
            )
        ),
    )


class HarnessBudgetStatus(Model):
    """The current period's spend: a view of the budget's ledger, which only grows (a run's deletion,
    relabelling or an operator restart gives nothing back)."""

    period_start: str | None = Field(default=None, description="Start of the current period.")
    period_end: str | None = Field(default=None, description="When the current period rolls over.")
    spent_usd: float | None = Field(
        default=None,
        alias="spentUSD",
        description="Cost of the runs settled this period (finished or deleted).",
    )
    reserved_usd: float | None = Field(
        default=None, alias="reservedUSD", description="Caps reserved by runs in flight."
    )
    remaining_usd: float | None = Field(
        default=None, alias="remainingUSD", description="maxCostUSD minus spent and reserved."
    )
    tokens: int | None = Field(default=None, description="Tokens of the period's runs.")
    runs: int | None = Field(default=None, description="Runs started in the period.")
    unknown_cost_runs: int | None = Field(
        default=None, description="Finished runs of the period whose cost is unknown (counted at their cap)."
    )
    observed_generation: int | None = Field(default=None, description="Generation last reconciled.")


class HarnessBudget(Model):
    """A spending limit per team: USD, tokens and runs per period for the runs it covers."""

    api_version: str = Field(default=API_VERSION, description="agentharness.dev/v1alpha1")
    kind: str = Field(default="HarnessBudget", description="HarnessBudget")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Standard object metadata.")
    spec: HarnessBudgetSpec = Field(description="The limits and what they cover.")
    status: HarnessBudgetStatus | None = Field(default=None, description="The current period's spend.")
