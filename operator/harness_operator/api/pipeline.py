"""HarnessPipeline: a DAG of agent runs as one object: named steps, each a run template, with
dependencies, a matrix that fans a step out, and references to earlier steps' outputs."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import ConfigDict, Field

from harness_operator.api.common import (
    API_VERSION,
    FREE_FORM,
    WITHOUT_SCANS,
    Condition,
    Model,
    object_name,
    rule,
    validations,
)
from harness_operator.api.run import RunTemplate, immutable_except

STEPS_MAX = 32
# A fan-in step reads each run of a fanned-out step as one of its inputs, and a run takes at most 16
# (api/run.py INPUTS_MAX): so a step fans out to at most 16 runs.
MATRIX_MAX = 16
STEP_NAME_RULE = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
STEP_NAME_MAX = 40
MATRIX_PARAM_RULE = r"^[A-Za-z_][A-Za-z0-9_]*$"

StepName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=STEP_NAME_MAX,
        json_schema_extra=validations(
            rule(
                f"self.matches('{STEP_NAME_RULE}')",
                "must be a step name: lowercase letters, digits and '-', starting and ending with a letter "
                "or digit",
            )
        ),
    ),
]


class MatrixParam(Model):
    """One axis of a step's matrix: `$(matrix.NAME)` in the step's prompt and stdin takes each value."""

    name: str = Field(
        min_length=1,
        max_length=63,
        description="Referenced as $(matrix.NAME): letters, digits and '_', not starting with a digit.",
        json_schema_extra=validations(
            rule(f"self.matches('{MATRIX_PARAM_RULE}')", "must be letters, digits and '_', not a digit first")
        ),
    )
    values: list[Annotated[str, Field(max_length=1024)]] = Field(
        min_length=1, max_length=MATRIX_MAX, description="The values, in order."
    )


class StepMatrix(Model):
    """A step fanned out: one run per combination of the axes given (providers x models x params), in
    order; at most 16 combinations."""

    providers: list[
        Annotated[str, Field(min_length=1, max_length=253, json_schema_extra=object_name("provider"))]
    ] = Field(
        default_factory=list,
        max_length=MATRIX_MAX,
        description="Each run's spec.provider, in turn; $(matrix.provider) in the prompt names it.",
    )
    models: list[Annotated[str, Field(min_length=1, max_length=253)]] = Field(
        default_factory=list,
        max_length=MATRIX_MAX,
        description="Each run's with.model, in turn; $(matrix.model) in the prompt names it.",
    )
    provider_options: dict[str, Annotated[dict[str, Any], Field(json_schema_extra=FREE_FORM)]] = Field(
        default_factory=dict,
        description="Options added to `with` of the run of each provider named (its own CLI's flags: a "
        "matrix over several CLIs cannot share them), e.g. claude: {permission-mode: acceptEdits}.",
        json_schema_extra={"maxProperties": MATRIX_MAX},
    )
    params: list[MatrixParam] = Field(
        default_factory=list,
        max_length=4,
        description="Further axes, each substituted for $(matrix.NAME) in the step's prompt and stdin.",
        json_schema_extra=validations(
            rule(
                "self.all(a, self.filter(b, b.name == a.name).size() == 1)",
                "matrix.params names must be unique",
            ),
            rule(
                "self.all(a, a.name != 'provider' && a.name != 'model')",
                "matrix.params: provider and model are axes of their own (matrix.providers, matrix.models)",
            ),
        ),
    )

    model_config = ConfigDict(
        json_schema_extra=validations(
            rule(
                # An empty list is not stored (the CRD defaults no container): absent counts as empty.
                "(has(self.providers) ? size(self.providers) : 0) + "
                "(has(self.models) ? size(self.models) : 0) + (has(self.params) ? size(self.params) : 0) > 0",
                "a matrix needs at least one axis: providers, models or params",
            )
        )
    )


class ContinueOn(Model):
    """When the steps after this one run although it did not succeed (Dagu's continue_on)."""

    failure: bool = Field(
        default=False,
        description="A failed run of this step does not stop the steps after it; they read the outputs of "
        "its runs that succeeded. The pipeline still ends Failed.",
    )


class StepWorkspace(Model):
    """One run of an earlier step, whose published change a step starts from."""

    step: StepName = Field(description="The earlier step (this step must run after it).")
    where: dict[str, Annotated[str, Field(max_length=1024)]] = Field(
        default_factory=dict,
        description="Of a fanned-out step, the run whose matrix values these are: each a literal or one "
        "reference such as $(steps.judge.output.winner) (best of N: provider: $(steps.judge.output.winner)).",
        json_schema_extra={"maxProperties": 8},
    )


class PipelineStep(Model):
    """One step: a run template, run once or once per matrix combination, after the steps it names."""

    name: StepName = Field(
        description="The step's name, unique in the pipeline; its runs are named after it."
    )
    after: list[StepName] = Field(
        default_factory=list,
        max_length=STEPS_MAX,
        description="Steps that must end (succeed, or fail with continueOn.failure) before this one starts.",
    )
    matrix: StepMatrix | None = Field(default=None, description="Fan the step out: one run per combination.")
    continue_on: ContinueOn | None = Field(default=None, description="Let later steps run after a failure.")
    workspace_from: StepWorkspace | None = Field(
        default=None,
        description="Start from the published change of one run of an earlier step (its "
        "spec.workspace.from): the step's run, or of a fanned-out step the run whose matrix values `where` "
        "names.",
    )
    run: RunTemplate = Field(
        description="The run this step creates. Its prompt and stdin may say $(steps.NAME.output) (the "
        "output of an earlier step; of a fanned-out step, every succeeded run's output, each under a "
        "heading), $(steps.NAME.output.PATH) (one field of a structured output) and $(matrix.NAME). The "
        "HarnessRun's rules that scan text or lists (NUL characters, $(inputs.NAME) counts, unique names, "
        "env against credentials) are checked when the run is created: a refusal fails the step.",
        # 32 steps' worth of those scans exceed the API server's CEL cost budget for one CRD.
        json_schema_extra=WITHOUT_SCANS,
    )


class HarnessPipelineSpec(Model):
    """The steps, and the ServiceAccount as which the pipeline's runs are created."""

    service_account_name: str = Field(
        min_length=1,
        max_length=253,
        description="The runs are created as this ServiceAccount of the namespace, so admission judges each "
        "as any run it creates; the operator must be granted `impersonate` on it (README: Pipelines).",
        json_schema_extra=object_name("ServiceAccount"),
    )
    steps: list[PipelineStep] = Field(
        min_length=1,
        max_length=STEPS_MAX,
        description="The steps; a step starts when the steps it is after have ended.",
        json_schema_extra=validations(
            rule("self.all(a, self.filter(b, b.name == a.name).size() == 1)", "step names must be unique"),
            rule(
                "self.all(s, !has(s.after) || s.after.all(a, self.exists(t, t.name == a)))",
                "every step's after names a step of this pipeline",
            ),
        ),
    )
    cancel: bool = Field(
        default=False, description="Set to true to cancel every unfinished run and start no further step."
    )


class StepPhase(StrEnum):
    Waiting = "Waiting"
    Running = "Running"
    Succeeded = "Succeeded"
    Failed = "Failed"
    Skipped = "Skipped"
    Cancelled = "Cancelled"


class PipelineRunRef(Model):
    """One run of a step."""

    name: str = Field(description="The HarnessRun's name.")
    phase: str | None = Field(default=None, description="Its phase.")
    provider: str | None = Field(default=None, description="Its provider.")
    matrix: dict[str, str] = Field(default_factory=dict, description="Its matrix combination.")
    cost_usd: float | None = Field(default=None, alias="costUSD", description="Its cost so far, where known.")


class StepStatus(Model):
    """One step: its phase and its runs."""

    name: str = Field(description="The step's name.")
    phase: StepPhase = Field(description="Waiting, Running, Succeeded, Failed, Skipped or Cancelled.")
    message: str | None = Field(default=None, description="Why it waits, was skipped or failed.")
    runs: list[PipelineRunRef] = Field(default_factory=list, description="Its runs.")


class HarnessPipelineStatus(Model):
    """The steps' runs, phases and costs, and the pipeline's outcome."""

    phase: str | None = Field(
        default=None, description="Pending, Running, Succeeded, Failed or Cancelled (from the conditions)."
    )
    steps: list[StepStatus] = Field(default_factory=list, description="Each step, in the spec's order.")
    step_phases: str | None = Field(
        default=None,
        description="Each step's phase in the spec's order, space-separated: kubectl's Steps column (a "
        "column shows one value, not a list's).",
    )
    cost_usd: float | None = Field(
        default=None, alias="costUSD", description="The runs' cost so far, where known."
    )
    start_time: str | None = Field(default=None, description="When the first run was created.")
    completion_time: str | None = Field(default=None, description="When the pipeline ended.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Succeeded (Unknown while running), Ready (True once succeeded), Reconciling, Stalled.",
    )
    observed_generation: int | None = Field(default=None, description="Generation last reconciled.")


class HarnessPipeline(Model):
    """A DAG of agent runs as one object; its runs are ordinary HarnessRuns it owns."""

    api_version: str = Field(default=API_VERSION, description="agentharness.dev/v1alpha1")
    kind: str = Field(default="HarnessPipeline", description="HarnessPipeline")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Standard object metadata.")
    spec: HarnessPipelineSpec = Field(
        description="The steps.",
        json_schema_extra=validations(
            rule(
                immutable_except(HarnessPipelineSpec, {"cancel"}) + " && (!oldSelf.cancel || self.cancel)",
                "spec is immutable after creation except spec.cancel, which cannot be unset; create a new "
                "HarnessPipeline instead",
                reason="FieldValueForbidden",
            )
        ),
    )
    status: HarnessPipelineStatus | None = Field(default=None, description="What the pipeline did.")
