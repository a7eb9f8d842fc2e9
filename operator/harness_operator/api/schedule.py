"""HarnessSchedule: runs created on a cron schedule, as a CronJob creates Jobs."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import ConfigDict, Field

from harness_operator.api.common import API_VERSION, Condition, Model, rule, validations
from harness_operator.api.pipeline import HarnessPipelineSpec
from harness_operator.api.run import RunTemplate, RunTemplateMetadata

HISTORY_LIMIT_MAX = 100


class ConcurrencyPolicy(StrEnum):
    Allow = "Allow"
    Forbid = "Forbid"
    Replace = "Replace"


class PipelineTemplate(Model):
    """The pipeline each scheduled time creates."""

    metadata: RunTemplateMetadata | None = Field(default=None, description="Labels and annotations.")
    spec: HarnessPipelineSpec = Field(description="The pipeline's spec, as a HarnessPipeline's.")


class HarnessScheduleSpec(Model):
    """When to create a run, what run, and what to do with the runs before it (CronJob's semantics)."""

    schedule: str = Field(
        min_length=1,
        max_length=128,
        description="Cron schedule: minute hour day-of-month month day-of-week (e.g. '0 2 * * 1-5'), or "
        "@yearly, @monthly, @weekly, @daily, @hourly.",
        json_schema_extra=validations(
            rule(
                "!self.startsWith('TZ=') && !self.startsWith('CRON_TZ=')",
                "spec.schedule: set the time zone in spec.timeZone, not with TZ= or CRON_TZ=",
            )
        ),
    )
    time_zone: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="IANA time zone of the schedule, e.g. Europe/Berlin; unset: UTC.",
    )
    run_template: RunTemplate | None = Field(
        default=None, description="The run created at each scheduled time (or pipelineTemplate)."
    )
    pipeline_template: PipelineTemplate | None = Field(
        default=None,
        description="The HarnessPipeline created at each scheduled time, instead of a run; the history "
        "limits and the concurrency policy then count pipelines.",
    )
    concurrency_policy: ConcurrencyPolicy = Field(
        default=ConcurrencyPolicy.Allow,
        description="Allow: runs may overlap; Forbid: a scheduled time is skipped while a run of this "
        "schedule is unfinished; Replace: the unfinished runs are deleted and the new one created.",
    )
    starting_deadline_seconds: int | None = Field(
        default=None,
        ge=0,
        description="A scheduled time missed by more than this is skipped (operator down, Forbid); unset: "
        "no deadline.",
    )
    suspend: bool = Field(default=False, description="Create no runs while true; runs already made go on.")
    successful_runs_history_limit: int = Field(
        default=3, ge=0, le=HISTORY_LIMIT_MAX, description="Succeeded runs kept; older ones are deleted."
    )
    failed_runs_history_limit: int = Field(
        default=1,
        ge=0,
        le=HISTORY_LIMIT_MAX,
        description="Failed and cancelled runs kept; older ones are deleted.",
    )

    model_config = ConfigDict(
        json_schema_extra=validations(
            rule(
                "has(self.runTemplate) != has(self.pipelineTemplate)",
                "set exactly one of spec.runTemplate and spec.pipelineTemplate",
            )
        )
    )


class ScheduledRunRef(Model):
    """A run this schedule created."""

    name: str = Field(description="The HarnessRun's name.")
    scheduled_time: str | None = Field(default=None, description="The scheduled time it was created for.")


class HarnessScheduleStatus(Model):
    """What the schedule did: its last and next times, its unfinished runs, and whether it is valid."""

    last_schedule_time: str | None = Field(default=None, description="The last time a run was created for.")
    last_successful_time: str | None = Field(
        default=None, description="When the newest succeeded run of this schedule finished."
    )
    next_schedule_time: str | None = Field(default=None, description="The next scheduled time (unsuspended).")
    active: list[ScheduledRunRef] = Field(
        default_factory=list, description="Its runs (or pipelines) not finished yet."
    )
    conditions: list[Condition] = Field(
        default_factory=list, description="Ready: the schedule is valid and its runs can be created."
    )
    observed_generation: int | None = Field(default=None, description="Generation last reconciled.")


class HarnessSchedule(Model):
    """Runs on a cron schedule, with a concurrency policy and history limits."""

    api_version: str = Field(default=API_VERSION, description="agentharness.dev/v1alpha1")
    kind: str = Field(default="HarnessSchedule", description="HarnessSchedule")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Standard object metadata.")
    spec: HarnessScheduleSpec = Field(description="When and what to run.")
    status: HarnessScheduleStatus | None = Field(default=None, description="What the schedule did.")
