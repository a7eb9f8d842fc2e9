"""HarnessRun: one run of an agent."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict

from harness_operator.api.common import (
    API_VERSION,
    FREE_FORM,
    NO_NUL,
    NUL,
    ConfigMapKeySelector,
    CredentialGrant,
    EnvVar,
    Model,
    SecretKeySelector,
    object_name,
    rule,
    validations,
)
from harness_operator.api.mcp import MCP_SERVERS_MAX, MCP_UNIQUE_RULE, McpServer
from harness_operator.api.run_status import HarnessRunStatus
from harness_operator.api.sandbox import Sandbox, Workspace
from harness_operator.api.session import ResumeFrom
from harness_operator.api.tools import ToolPolicy

# --- HarnessRun ----------------------------------------------------------------------------------

# `with` keeps any key; the two keys Dagu rejects are declared so the CEL rules below can name them
# (the API server types CEL only over declared fields).
WITH_MAX_KEYS = 64
WITH_SCHEMA: JsonDict = {
    **FREE_FORM,
    "maxProperties": WITH_MAX_KEYS,
    "properties": {
        "binary": {"type": "string", "description": "Not allowed: define a HarnessDefinition instead."},
        "prompt_args": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Not allowed: define a HarnessDefinition instead.",
        },
    },
}
WITH_RULES = validations(
    rule(
        "!has(self.binary)",
        "with.binary is not supported; define a HarnessDefinition and reference it via spec.provider",
        reason="FieldValueForbidden",
    ),
    rule(
        "!has(self.prompt_args)",
        "with.prompt_args is not supported; define a HarnessDefinition and reference it via spec.provider",
        reason="FieldValueForbidden",
    ),
)


# The CRD's CEL sees only declared fields, never the free-form keys and values of `with`, so this check
# runs in the chart's admission policy (on spec.with and each spec.fallback[].with) and in `harnessctl
# validate`, both from this one text with {m} standing for the map (tests/unit/chart/test_chart.py keeps the
# chart in step). The sizes bound the run object (CLI options are short; a long text belongs in a file
# of the workspace or an input).
WITH_KEY_MAX = 253
WITH_STRING_MAX = 8192
WITH_LIST_MAX = 64
WITH_VALUES_CHECK = (
    f"{{m}}.all(k, !k.contains('{NUL}') && size(k) <= {WITH_KEY_MAX} && (type({{m}}[k]) == string ? "
    f"!{{m}}[k].contains('{NUL}') && size({{m}}[k]) <= {WITH_STRING_MAX} : type({{m}}[k]) == list ? "
    f"size({{m}}[k]) <= {WITH_LIST_MAX} && {{m}}[k].all(v, type(v) != string || "
    f"(!v.contains('{NUL}') && size(v) <= {WITH_STRING_MAX})) : true))"
)
WITH_VALUES_MESSAGE = (
    "keys and values must not contain a NUL character (a command-line argument cannot carry one); a key is "
    f"at most {WITH_KEY_MAX} characters, a string at most {WITH_STRING_MAX}, a list at most {WITH_LIST_MAX} "
    "items"
)

# What `kubectl apply` can carry: it copies the object, JSON-escaped, into the last-applied-configuration
# annotation, and all annotations together may hold 262144 bytes. Measured with kubectl 1.34: an ASCII
# prompt passes up to 261924 characters, one of '"' or newlines up to 130962, one of '<' (escaped to six
# bytes) up to 43654. Half the limit for prompt and stdin together leaves the other half for escaping and
# the rest of the object; it is also the kernel's limit on one argument (MAX_ARG_STRLEN).
INLINE_INPUT_MAX_BYTES = 131072


class RunOutputRef(Model):
    """Another HarnessRun in the same namespace whose output is used once it has succeeded."""

    name: str = Field(
        min_length=1,
        max_length=253,
        description="Name of the HarnessRun.",
        json_schema_extra=object_name("HarnessRun"),
    )
    path: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        pattern=r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$",
        description="One field of that run's JSON output (it must have spec.outputSchema), as a dotted path "
        "such as verdict or findings.0.file: a string as it is, anything else as compact JSON.",
    )


class ValueSource(Model):
    """Where a prompt or stdin comes from; exactly one source."""

    config_map_key_ref: ConfigMapKeySelector | None = Field(default=None, description="A ConfigMap key.")
    secret_key_ref: SecretKeySelector | None = Field(default=None, description="A Secret key.")
    run_output: RunOutputRef | None = Field(
        default=None, description="The output of another run, once it has succeeded (chaining)."
    )

    model_config = ConfigDict(
        json_schema_extra=validations(
            rule(
                "[has(self.configMapKeyRef), has(self.secretKeyRef), has(self.runOutput)]"
                ".filter(x, x).size() == 1",
                "set exactly one of configMapKeyRef, secretKeyRef or runOutput",
            )
        )
    )


# An input's name, as `$(inputs.NAME)` spells it (Dagu's output variables, e.g. PLAN, are such names).
INPUT_NAME_RULE = r"^[A-Za-z_][A-Za-z0-9_-]*$"
# One `$(inputs.` and what follows it up to its `)`: a reference, well-formed or not. Character classes,
# not backslashes, so the one text reads the same in CEL (RE2) and in Python's re.
INPUT_REFERENCE_PATTERN = "[$][(]inputs[.][^)]{0,64}[)]?"
INPUT_VALUE_MAX_BYTES = 32768
INPUTS_MAX = 16


class RunInput(Model):
    """A named value for `$(inputs.NAME)` in spec.prompt and spec.stdin; exactly one source."""

    name: str = Field(
        min_length=1,
        max_length=63,
        description="Name referenced as $(inputs.NAME): letters, digits, '_' and '-', not starting with a "
        "digit or '-'.",
        json_schema_extra=validations(
            rule(
                f"self.matches('{INPUT_NAME_RULE}')",
                "must be an input name: letters, digits, '_' and '-', not starting with a digit or '-'",
            )
        ),
    )
    value: str | None = Field(
        default=None,
        max_length=INPUT_VALUE_MAX_BYTES,
        description="A literal value; put longer text in a ConfigMap.",
        json_schema_extra=validations(NO_NUL),
    )
    config_map_key_ref: ConfigMapKeySelector | None = Field(default=None, description="A ConfigMap key.")
    secret_key_ref: SecretKeySelector | None = Field(
        default=None, description="A Secret key: the value reaches the plan Secret, never status or Events."
    )
    run_output: RunOutputRef | None = Field(
        default=None,
        description="The output of another run in this namespace; this run waits until it has succeeded "
        "and fails if it does not.",
    )

    model_config = ConfigDict(
        json_schema_extra=validations(
            rule(
                "[has(self.value), has(self.configMapKeyRef), has(self.secretKeyRef), has(self.runOutput)]"
                ".filter(x, x).size() == 1",
                "set exactly one of value, configMapKeyRef, secretKeyRef or runOutput",
            )
        )
    )


def input_references_rule(field: str) -> JsonDict:
    """CEL: every `$(inputs.` in spec.<field> begins `$(inputs.NAME)` with NAME among spec.inputs.

    Within the API server's cost budget, which no loop over the text's matches fits: the rule counts
    (each declared reference holds one `$(inputs.` and none overlap, so the counts agree exactly when
    every reference is declared); the message deletes the declared references, one `replace` per
    possible input, and names the first reference left."""
    text = f"self.{field}"
    opening = f"({text}.split('$(inputs.').size() - 1)"
    per_input = f"{text}.split('$(inputs.' + i.name + ')').size() - 1"
    declared = f"(has(self.inputs) ? self.inputs.map(i, {per_input}).sum() : 0)"
    remaining = text + "".join(
        f".replace(has(self.inputs) && size(self.inputs) > {k} ? '$(inputs.' + self.inputs[{k}].name + ')' "
        f": '{NUL}', '')"
        for k in range(INPUTS_MAX)
    )
    return rule(
        f"has(self.{field}) ? {opening} == {declared} : true",
        f"spec.{field} references an input that spec.inputs does not declare; write $(inputs.NAME) "
        "with NAME one of spec.inputs[].name",
        field_path=f".{field}",
        message_expression=f"'spec.{field} references ' + {remaining}.find('{INPUT_REFERENCE_PATTERN}') + "
        "', which spec.inputs does not declare; add an input of that name or correct the reference'",
    )


class FallbackProvider(Model):
    """One fallback attempt: another provider and its options."""

    provider: str = Field(
        min_length=1,
        max_length=253,
        description="Provider of this attempt.",
        json_schema_extra=object_name("HarnessDefinition"),
    )
    with_: dict[str, Any] = Field(
        default_factory=dict,
        alias="with",
        description="Options for this attempt (not merged with the primary's).",
        json_schema_extra={**WITH_SCHEMA, **WITH_RULES},
    )
    fallback: list[dict[str, Any]] | None = Field(
        default=None,
        description="Not allowed: a fallback cannot have fallbacks of its own.",
        json_schema_extra={"items": {"type": "object", **FREE_FORM}},
    )

    model_config = ConfigDict(
        json_schema_extra=validations(
            rule(
                "!has(self.fallback)",
                "fallback is not supported inside fallback providers; list every provider in spec.fallback",
                field_path=".fallback",
                reason="FieldValueForbidden",
            )
        )
    )


class Limits(Model):
    """Limits enforced while the agent runs."""

    timeout_seconds: int | None = Field(
        default=None, ge=1, le=604800, description="Wall-clock limit per attempt; exit 124, reason Timeout."
    )
    max_cost_usd: float | None = Field(
        default=None,
        alias="maxCostUSD",
        gt=0,
        description="Stop the agent once reported or computed cost crosses this (reason CostLimitExceeded).",
    )
    max_turns: int | None = Field(default=None, ge=1, le=10000, description="Most agent turns.")
    max_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Most tokens (input, output and cache together) an attempt may use; held by the model "
        "gateway, so only for a routed CLI (reason CostLimitExceeded).",
    )
    max_output_bytes: int | None = Field(
        default=None,
        ge=1,
        le=1000000,
        description="Output kept; the rest is cut and flagged truncated. At most 1000000 (what the output "
        "ConfigMap holds), which is also the default in the cluster.",
    )
    grace_period_seconds: int | None = Field(
        default=None, ge=0, le=3600, description="SIGTERM to SIGKILL on timeout or cancel (default 30)."
    )


OUTPUT_REPROMPTS_MAX = 3
RETRY_LIMIT_MAX = 5


class RetryOn(StrEnum):
    transient = "Transient"
    any = "Any"


class RetryPolicy(Model):
    """Retries of a provider's attempt after a failed attempt, before fallback moves on."""

    limit: int = Field(
        ge=1,
        le=RETRY_LIMIT_MAX,
        description="Retries per provider (the primary and each fallback), each its own attempt, after a "
        "failure retryOn names. Other failures go to the fallback at once.",
    )
    # Not `on`: YAML 1.1 (kubectl's and PyYAML's) reads an unquoted `on:` key as `true`.
    retry_on: RetryOn = Field(
        default=RetryOn.transient,
        description="Which failures are retried. Transient: RateLimited, ProviderUnavailable, JobLost, "
        "PodFailed and Preempted. Any (Dagu's retry_policy): every failure after which a fallback may "
        "follow, so all but Timeout, Cancelled, CostLimitExceeded (a HarnessBudget's refusal too), "
        "NetworkNotConfined and QueueUnavailable, which end the run.",
    )
    exit_codes: list[Annotated[int, Field(ge=1, le=255)]] | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        description="Retry only an attempt whose exit code (status.attempts[].exitCode) is one of these, "
        "among the failures retryOn names (Dagu's retry_policy.exit_code).",
    )
    backoff_seconds: int = Field(
        default=10,
        ge=0,
        le=3600,
        description="Wait before a provider's first retry, doubled for each further one.",
    )
    max_backoff_seconds: int = Field(
        default=300, ge=0, le=86400, description="The longest wait between two attempts."
    )


class AcpPermission(StrEnum):
    deny = "deny"
    allow = "allow"


TTL_MAX_SECONDS = 10 * 365 * 24 * 3600  # ten years: bounded, so an expiry is always a valid datetime


class HarnessRunSpec(Model):
    """One run of an agent CLI. Immutable after creation, except `cancel`."""

    provider: str = Field(
        min_length=1,
        max_length=253,
        description="Provider name: a HarnessDefinition in this namespace, else a ClusterHarnessDefinition.",
        json_schema_extra=object_name("HarnessDefinition"),
    )
    prompt: str | None = Field(
        default=None,
        min_length=1,
        max_length=INLINE_INPUT_MAX_BYTES,
        description=f"The prompt; required unless promptFrom. With stdin, at most {INLINE_INPUT_MAX_BYTES} "
        "bytes (what kubectl apply can carry); use promptFrom for more.",
        json_schema_extra=validations(NO_NUL),
    )
    prompt_from: ValueSource | None = Field(default=None, description="Read the prompt from elsewhere.")
    stdin: str | None = Field(
        default=None,
        max_length=INLINE_INPUT_MAX_BYTES,
        description="Text piped to the CLI's stdin; counts toward the prompt's size limit. Use stdinFrom for "
        "more.",
        json_schema_extra=validations(NO_NUL),
    )
    stdin_from: ValueSource | None = Field(default=None, description="Read stdin from elsewhere.")
    inputs: list[RunInput] = Field(
        default_factory=list,
        max_length=INPUTS_MAX,
        description="Named values substituted for $(inputs.NAME) in spec.prompt and spec.stdin, once, when "
        "the first attempt starts.",
        json_schema_extra=validations(
            rule(
                "self.all(a, self.filter(b, b.name == a.name).size() == 1)",
                "spec.inputs names must be unique",
            )
        ),
    )
    after: list[
        Annotated[str, Field(min_length=1, max_length=253, json_schema_extra=object_name("HarnessRun"))]
    ] = Field(
        default_factory=list,
        max_length=16,
        description="HarnessRuns in this namespace that must succeed before this run starts; the run "
        "fails when one of them does not (as with runOutput).",
    )
    with_: dict[str, Any] = Field(
        default_factory=dict,
        alias="with",
        description="Options that become CLI flags (Dagu rules): keys sorted, true a bare flag, false and "
        "empty omitted, numbers printed plainly, lists repeat the flag.",
        json_schema_extra={**WITH_SCHEMA, **WITH_RULES},
    )
    fallback: list[FallbackProvider] = Field(
        default_factory=list, max_length=16, description="Providers tried in order after a non-zero exit."
    )
    retry: RetryPolicy | None = Field(
        default=None,
        description="Retry a provider's failed attempt before falling back (none: no retries).",
    )
    workspace: Workspace | None = Field(default=None, description="Working directory and its volume.")
    sandbox: Sandbox | None = Field(default=None, description="Isolation and placement.")
    credentials: list[CredentialGrant] = Field(
        default_factory=list, max_length=32, description="Grants added to the definition's."
    )
    env: list[EnvVar] = Field(
        default_factory=list, max_length=64, description="Plain environment for the agent."
    )
    limits: Limits | None = Field(default=None, description="Time, cost, turn and output limits.")
    mcp_servers: list[McpServer] = Field(
        default_factory=list,
        max_length=MCP_SERVERS_MAX,
        description="MCP servers the agent may use, after its provider's; a provider whose CLI takes none "
        "refuses the run (McpUnsupported).",
        json_schema_extra=validations(MCP_UNIQUE_RULE),
    )
    resume_from: ResumeFrom | None = Field(
        default=None, description="Continue the conversation of an earlier run of this namespace."
    )
    tools: ToolPolicy | None = Field(
        default=None,
        description="Which tools the agent may use, within its provider's spec.tools: enforced by the CLI's "
        "own options (its definition's toolControls) or, for ACP, by the runner's answers to permission "
        "requests.",
    )
    acp_permission: AcpPermission = Field(
        default=AcpPermission.deny,
        description="ACP permission requests when spec.tools is unset: deny, or allow (allow-once only).",
    )
    cancel: bool = Field(default=False, description="Set to true to stop the run gracefully; skips fallback.")
    output_schema: dict[str, Any] | None = Field(
        default=None,
        description="JSON Schema (2020-12) the output must match: the output is read as one JSON value (a "
        "single ```json fence allowed) and validated when the agent succeeded; a mismatch fails the run "
        "with reason OutputInvalid, naming the failing path. The valid value is kept as JSON (key "
        "output.json of the output ConfigMap) and a later run's runOutput.path can take one field of it.",
        json_schema_extra={"type": "object", **FREE_FORM},
    )
    output_reprompts: int = Field(
        default=0,
        ge=0,
        le=OUTPUT_REPROMPTS_MAX,
        description="How many times, within one attempt, a CLI whose output does not match spec.outputSchema "
        "is asked again with the validation error, continuing its session where its definition says how "
        "(continueArgs); the operator's check of the last answer decides. 0: never.",
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None,
        ge=0,
        le=TTL_MAX_SECONDS,
        description="Seconds to keep the run once it has finished (status.completionTime); then the "
        "operator deletes it, and its Jobs, pods, Secrets, ConfigMaps and NetworkPolicy go with it. Unset: "
        "the operator's default (chart value runs.ttlSecondsAfterFinished; none: kept until deleted).",
    )

    model_config = ConfigDict(
        json_schema_extra=validations(
            rule(
                "has(self.prompt) || has(self.promptFrom)",
                "spec.prompt is required (or set spec.promptFrom)",
                field_path=".prompt",
                reason="FieldValueRequired",
            ),
            rule(
                "!has(self.outputReprompts) || self.outputReprompts == 0 || has(self.outputSchema)",
                "spec.outputReprompts needs spec.outputSchema: only an answer to a schema is asked again",
                field_path=".outputReprompts",
            ),
            rule(
                "!(has(self.prompt) && has(self.promptFrom))",
                "set spec.prompt or spec.promptFrom, not both",
                field_path=".promptFrom",
            ),
            rule(
                "!(has(self.stdin) && has(self.stdinFrom))",
                "set spec.stdin or spec.stdinFrom, not both",
                field_path=".stdinFrom",
            ),
            rule(
                "(has(self.prompt) ? size(bytes(self.prompt)) : 0) "
                f"+ (has(self.stdin) ? size(bytes(self.stdin)) : 0) <= {INLINE_INPUT_MAX_BYTES}",
                f"spec.prompt and spec.stdin together must be at most {INLINE_INPUT_MAX_BYTES} bytes, what "
                "kubectl apply can carry; put larger input in a ConfigMap and use spec.promptFrom or "
                "spec.stdinFrom",
                field_path=".prompt",
            ),
            input_references_rule("prompt"),
            input_references_rule("stdin"),
            rule(
                "!has(self.env) || !has(self.credentials) || "
                "self.env.all(e, !self.credentials.exists(c, c.env == e.name))",
                "spec.env names must not collide with spec.credentials[].env; a secret is granted only "
                "through credentials",
                field_path=".env",
            ),
        )
    )


def immutable_except(model: type[Model], mutable: set[str]) -> str:
    """CEL transition rule: every field of `model` but `mutable` keeps its presence and value."""
    clauses = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        if key in mutable:
            continue
        clauses.append(
            f"has(self.{key}) == has(oldSelf.{key}) && (!has(self.{key}) || self.{key} == oldSelf.{key})"
        )
    return " && ".join(clauses)


SPEC_IMMUTABLE_RULE = rule(
    immutable_except(HarnessRunSpec, {"cancel"}),
    "spec is immutable after creation except spec.cancel; create a new HarnessRun instead",
    reason="FieldValueForbidden",
)


class HarnessRun(Model):
    """One run of an agent CLI."""

    api_version: str = Field(default=API_VERSION, description="agentharness.dev/v1alpha1")
    kind: str = Field(default="HarnessRun", description="HarnessRun")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Standard object metadata.")
    spec: HarnessRunSpec = Field(
        description="What to run.", json_schema_extra=validations(SPEC_IMMUTABLE_RULE)
    )
    status: HarnessRunStatus | None = Field(default=None, description="What happened.")


class RunTemplateMetadata(Model):
    """What a templated run's metadata carries besides what the operator sets."""

    labels: dict[str, str] = Field(
        default_factory=dict, description="Labels of each run (budgets select them)."
    )
    annotations: dict[str, str] = Field(default_factory=dict, description="Annotations of each run.")


class RunTemplate(Model):
    """A run a schedule, a trigger or a pipeline's step creates."""

    metadata: RunTemplateMetadata | None = Field(default=None, description="Labels and annotations.")
    spec: HarnessRunSpec = Field(description="The run's spec, as a HarnessRun's.")
