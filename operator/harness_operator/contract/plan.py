"""AttemptPlan: everything one attempt needs, the document the operator writes and the runner reads.

The operator serialises one plan per attempt into the attempt's plan Secret (it may hold the prompt;
core/plan/planning.py builds it); `harnessctl run` walks the list for the primary and every fallback. Secrets
never enter a plan: only the names of the credential variables, whose values are passed to the agent
and redacted.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field, model_validator

from harness_operator.api.v1alpha1 import (
    AcpPermission,
    AcpTransport,
    EnvVar,
    Limits,
    Model,
    ModelPricing,
    OutputFormat,
    ToolPolicy,
)

DEFAULT_GRACE_SECONDS = 30
# An argument naming a file of the agent's home (one of the plan's home files): the runner makes it the
# file's absolute path, the home being known only in the pod.
HOME_PATH_ARG_PREFIX = "$(HARNESS_HOME)/"


def home_path_arg(relative: str) -> str:
    """The argument that names `relative`, a file of the agent's home."""
    return HOME_PATH_ARG_PREFIX + relative


# A CLI that takes its JSON Schema as a file (outputSchemaOption form file): the file, in the agent's home.
OUTPUT_SCHEMA_HOME_FILE = ".harness/output-schema.json"
# Where a re-prompt's arguments (or stdin) carry the correction, which only the runner knows.
REPROMPT_TEXT = "$(HARNESS_REPROMPT)"
PLAN_VERSION = 1
# Where a continuing attempt's runner finds the earlier session's archive, base64 (a Secret of its run,
# mounted; text, so the operator's content hash of its children covers it as any other).
SESSION_DIR = "/run/harness/session"
SESSION_KEY = "session.tar.gz.base64"
SESSION_ARCHIVE_PATH = f"{SESSION_DIR}/{SESSION_KEY}"

# The variables through which an ACP connection's secrets (header values, the CA bundle) reach the
# runner: granted like any credential, so they are passed as environment and redacted everywhere.
ACP_HEADER_ENV = "HARNESS_ACP_HEADER_{index}"
ACP_CA_BUNDLE_ENV = "HARNESS_ACP_CA_BUNDLE"


class AcpHeaderPlan(Model):
    """One header for a remote ACP agent: a literal value, or the credential variable holding it."""

    name: str = Field(min_length=1, description="Header name.")
    value: str | None = Field(default=None, description="Literal value (not secret).")
    credential_env: str | None = Field(default=None, description="Credential variable with the value.")


class AcpMcpServerPlan(Model):
    """An MCP server an ACP agent is given: started by the agent as its gate (runner/mcp_gate.py), which
    lets through only the listed tools."""

    name: str = Field(min_length=1, description="The server's name.")
    gate_args: list[str] = Field(description="The gate's arguments: its tools, then the server.")
    env: list[str] = Field(
        default_factory=list, description="Variables of the attempt the gate reads (its headers' secrets)."
    )


class AcpSessionPlan(Model):
    """An ACP session: how to reach the agent and what to send it."""

    transport: AcpTransport = Field(default=AcpTransport.stdio, description="stdio, websocket or http.")
    prompt: str = Field(description="The prompt, a blank line, then the run's stdin.")
    url: str | None = Field(default=None, description="Endpoint for websocket or http.")
    cwd: str | None = Field(default=None, description="Session working directory on the agent host.")
    headers: list[AcpHeaderPlan] = Field(default_factory=list, description="Headers for websocket/http.")
    ca_bundle_env: str | None = Field(default=None, description="Credential variable with extra CA roots.")
    bearer_subprotocol: bool = Field(default=False, description="Bearer token as a websocket subprotocol.")
    permission: AcpPermission = Field(default=AcpPermission.deny, description="spec.acpPermission.")
    tools: ToolPolicy | None = Field(
        default=None, description="The tool policy that answers permission requests (before `permission`)."
    )
    mcp_servers: list[AcpMcpServerPlan] = Field(
        default_factory=list, description="MCP servers given in session/new (or session/load)."
    )
    mcp_tools: list[str] = Field(
        default_factory=list,
        description="The servers' gated tools as the agent names them asking permission: allowed.",
    )
    load_session: str | None = Field(
        default=None,
        description="The earlier session to continue with session/load (its files restored in the home) "
        "instead of session/new.",
    )


# The workspace's clone waits too (runner/confinement.py's main): the probe as JSON in this variable,
# and its exit code when a required wait failed (the operator then reports NetworkNotConfined).
CONFINEMENT_ENV = "HARNESS_CONFINEMENT"
EXIT_NOT_CONFINED = 86


class ConfinementProbe(Model):
    """Before the agent starts, wait until this address (one its network policy denies) is refused."""

    host: str = Field(min_length=1, description="An address the attempt's policy denies: the API server.")
    port: int = Field(ge=1, le=65535, description="Its TCP port.")
    timeout_seconds: int = Field(default=30, ge=1, description="How long to wait for the policy.")
    required: bool = Field(default=True, description="Fail the attempt when never refused (else warn).")


class AttemptPlan(Model):
    """One attempt, fully resolved: a CLI invocation (argv, stdin, parser) or an ACP session (`acp`;
    argv then starts a stdio adapter), with environment names, pricing and limits."""

    version: int = Field(default=PLAN_VERSION, description="Plan format version.")
    run_name: str = Field(default="", description="The HarnessRun's name.")
    run_namespace: str = Field(default="default", description="The HarnessRun's namespace.")
    attempt: int = Field(ge=1, description="1-based attempt number.")
    total_attempts: int = Field(ge=1, description="Primary plus fallbacks, each with its retries.")
    retry: int = Field(
        default=0, ge=0, description="Which retry of its provider this attempt is (0: the provider's first)."
    )
    provider: str = Field(description="Provider name of this attempt.")
    binary: str = Field(
        default="",
        description="argv[0]: a name looked up in PATH, or a path with '/' (empty for a remote ACP agent).",
    )
    args: list[str] = Field(default_factory=list, description="Arguments after argv[0].")
    stdin: str | None = Field(default=None, description="Piped to the agent; None closes stdin.")
    env: list[EnvVar] = Field(default_factory=list, description="Plain (non-secret) environment.")
    credential_envs: list[str] = Field(
        default_factory=list, description="Variables granted from Secrets: passed through and redacted."
    )
    redacted_values: list[str] = Field(
        default_factory=list,
        description="Values the prompt and stdin took from Secrets (promptFrom, stdinFrom, inputs): redacted "
        "from the output, the log and the session archive, as credentials are.",
    )
    optional_credential_envs: list[str] = Field(
        default_factory=list, description="The subset of credential_envs that may be absent."
    )
    raw_json_envs: list[str] = Field(
        default_factory=list,
        description="Credentials the CLI pastes unescaped into JSON text (OpenCode's {env:NAME}): one whose "
        "value holds a quote, a backslash or a control character is refused before the agent starts.",
    )
    output_format: OutputFormat = Field(default=OutputFormat.text, description="Parser for stdout.")
    pricing: dict[str, ModelPricing] = Field(
        default_factory=dict,
        description="A namespaced HarnessDefinition's prices (USD per million tokens): they only raise the "
        "trusted price of a model (contract/pricing.py).",
    )
    platform_pricing: dict[str, ModelPricing] = Field(
        default_factory=dict,
        description="A ClusterHarnessDefinition's prices (USD per million tokens): trusted, they win over "
        "the table.",
    )
    table_pricing: dict[str, ModelPricing] = Field(
        default_factory=dict,
        description="List prices per model id from the pinned price table (operator-filled).",
    )
    price_table: str | None = Field(default=None, description="The price table and its version.")
    cli_version: str | None = Field(
        default=None, description="The definition's pinned CLI version, for when the CLI prints none."
    )
    model_hint: str | None = Field(default=None, description="The model requested with the `model` option.")
    limits: Limits = Field(default_factory=Limits, description="Time, cost, turn and output limits.")
    working_dir: str | None = Field(default=None, description="Working directory (created if missing).")
    home_files: dict[str, str] = Field(
        default_factory=dict,
        description="Files written into the agent's home before it starts (relative path -> content).",
    )
    output_schema: dict[str, Any] | None = Field(
        default=None, description="spec.outputSchema, when the runner re-prompts (output_reprompts > 0)."
    )
    output_reprompts: int = Field(
        default=0, ge=0, description="spec.outputReprompts: how often a mismatching answer is asked again."
    )
    reprompt_args: list[str] = Field(
        default_factory=list,
        description="Arguments of a re-prompt, REPROMPT_TEXT standing for the correction (see "
        "structured_output.build_correction).",
    )
    reprompt_stdin: str | None = Field(default=None, description="A re-prompt's stdin, with REPROMPT_TEXT.")
    acp: AcpSessionPlan | None = Field(default=None, description="Set for protocol acp: the session.")
    session_paths: list[str] = Field(
        default_factory=list,
        description="The definition's session paths: the agent's session files, packed after it exits.",
    )
    session_sha256: str | None = Field(
        default=None,
        description="The earlier session this attempt continues: the SHA-256 of the archive mounted at "
        "SESSION_ARCHIVE_PATH, restored into the agent's home before it starts.",
    )
    session_usage_cumulative: bool = Field(
        default=False,
        description="A continuing attempt's CLI reports the session's tokens, not the attempt's: none kept.",
    )
    confinement: ConfinementProbe | None = Field(
        default=None, description="Wait for the network policy before starting the agent (operator-set)."
    )
    model_destinations: list[str] = Field(
        default_factory=list,
        description="Where the agent's model calls go, whether its CLI reads them from env, options or a "
        "file: the model gateway's base URL of a routed attempt (operator-set). The runner waits until "
        "each accepts a connection before it starts the agent.",
    )
    trace_parent: str | None = Field(
        default=None,
        description="The attempt's span as a W3C traceparent when its run is traced (operator-set): the "
        "parent of the runner's spans (contract/tracing.py).",
    )

    @model_validator(mode="after")
    def _has_something_to_start(self) -> AttemptPlan:
        remote = self.acp is not None and self.acp.transport != AcpTransport.stdio
        if not self.binary and not remote:
            raise ValueError("binary is required, except for a remote ACP agent")
        return self

    @property
    def argv(self) -> list[str]:
        return [self.binary, *self.args]

    @property
    def grace_seconds(self) -> int:
        grace = self.limits.grace_period_seconds
        return DEFAULT_GRACE_SECONDS if grace is None else grace

    def to_json(self) -> str:
        return json.dumps(self.model_dump(by_alias=True, mode="json"), sort_keys=True)


def load_plan(text: str) -> AttemptPlan:
    """A plan from its JSON (the pod's /etc/harness/plan.json)."""
    return AttemptPlan.model_validate_json(text)
