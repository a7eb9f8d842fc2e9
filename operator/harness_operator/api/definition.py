"""HarnessDefinition and ClusterHarnessDefinition: how to invoke one agent CLI."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import ConfigDict, Field

from harness_operator.api.common import (
    API_VERSION,
    FREE_FORM,
    Condition,
    CredentialGrant,
    EgressRule,
    EnvVar,
    Model,
    SecretKeySelector,
    rule,
    validations,
)
from harness_operator.api.mcp import MCP_SERVERS_MAX, MCP_UNIQUE_RULE, McpServer, McpSupport
from harness_operator.api.session import SessionSpec
from harness_operator.api.tools import ToolControls, ToolPolicy

# --- HarnessDefinition ---------------------------------------------------------------------------


class Protocol(StrEnum):
    cli = "cli"
    acp = "acp"


class PromptMode(StrEnum):
    arg = "arg"
    flag = "flag"
    stdin = "stdin"


class PromptPosition(StrEnum):
    before_flags = "beforeFlags"
    after_flags = "afterFlags"


class FlagStyle(StrEnum):
    double_dash = "doubleDash"
    single_dash = "singleDash"


class StdinMode(StrEnum):
    pipe = "pipe"
    fold = "fold"


class AcpTransport(StrEnum):
    stdio = "stdio"
    websocket = "websocket"
    http = "http"


class OutputFormat(StrEnum):
    text = "text"
    claude_stream_json = "claude-stream-json"
    codex_jsonl = "codex-jsonl"
    gemini_json = "gemini-json"
    opencode_jsonl = "opencode-jsonl"
    pi_jsonl = "pi-jsonl"
    copilot_json = "copilot-json"
    aider_text = "aider-text"


class SchemaForm(StrEnum):
    inline = "inline"
    file = "file"


class OutputSchemaOption(Model):
    """The CLI's own option for a JSON Schema its answer must match (Claude Code's `--json-schema`,
    Codex's `--output-schema`)."""

    flag: str = Field(
        min_length=1,
        max_length=256,
        pattern=r"^-",
        description="The flag token, used verbatim (flagStyle does not apply), e.g. --json-schema.",
    )
    form: SchemaForm = Field(
        default=SchemaForm.inline,
        description="inline: the flag's value is the schema's JSON; file: the path of a file in the agent's "
        "home that holds it.",
    )


class AcpHeader(Model):
    """An HTTP header sent to an ACP agent over websocket or http."""

    name: str = Field(min_length=1, max_length=256, description="Header name.")
    value: str | None = Field(default=None, description="Literal value (not secret).")
    value_from: HeaderValueSource | None = Field(default=None, description="Value read from a Secret.")

    model_config = ConfigDict(
        json_schema_extra=validations(
            rule("has(self.value) != has(self.valueFrom)", "set exactly one of value or valueFrom")
        )
    )


class HeaderValueSource(Model):
    """Where a header's value comes from."""

    secret_key_ref: SecretKeySelector = Field(description="The Secret key holding the header value.")


class OutputSpec(Model):
    """How the CLI's stdout is read."""

    format: OutputFormat = Field(
        default=OutputFormat.text,
        description="Parser for stdout: text (stdout is the output; usage unknown), claude-stream-json, "
        "codex-jsonl, gemini-json, opencode-jsonl, pi-jsonl, copilot-json or aider-text.",
    )


class Capabilities(Model):
    """What the adapter really implements; each is false unless declared."""

    usage_reporting: bool = Field(default=False, description="Token usage is read from the output.")
    cost_reporting: bool = Field(default=False, description="The CLI reports its own cost in USD.")
    session_resume: bool = Field(
        default=False,
        description="A session id is reported and the CLI continues that session by id (spec.session says "
        "how); set exactly when spec.session is.",
    )
    model_selection: bool = Field(default=False, description="The model can be chosen with an option.")
    structured_output: bool = Field(
        default=False,
        description="The CLI holds its model to a run's spec.outputSchema (outputSchemaOption passes it); "
        "the operator validates the output either way.",
    )
    permission_hooks: bool = Field(
        default=False,
        description="An ACP agent asks permission before every tool that edits, runs commands or "
        "fetches, so the runner's answers from spec.tools enforce the policy.",
    )
    proxy_env: bool = Field(
        default=False,
        description="The CLI sends its API traffic through HTTPS_PROXY/HTTP_PROXY, as runs whose egress "
        "names hosts need (the egress gateway).",
    )


class ModelPricing(Model):
    """USD per million tokens of one model."""

    input: float = Field(default=0, ge=0, description="USD per million input tokens.")
    output: float = Field(default=0, ge=0, description="USD per million output tokens.")
    cache_read: float = Field(default=0, ge=0, description="USD per million cache-read tokens.")
    cache_write: float = Field(default=0, ge=0, description="USD per million cache-write tokens.")


class ModelVendor(StrEnum):
    anthropic = "anthropic"
    openai = "openai"
    gemini = "gemini"


# The label of the built-in catalog's ClusterHarnessDefinitions.
LABEL_CATALOG = "agentharness.dev/catalog"
BUILTIN = "builtin"
MODEL_GATEWAY_URL = "$(HARNESS_MODEL_GATEWAY_URL)"
MODEL_GATEWAY_TOKEN = "$(HARNESS_MODEL_GATEWAY_TOKEN)"


class ModelRoute(Model):
    """How the CLI reaches its vendor through the model gateway, which holds the vendor's key: the
    variables that point it there. In their values `$(HARNESS_MODEL_GATEWAY_URL)` is the gateway's base
    URL for the vendor and `$(HARNESS_MODEL_GATEWAY_TOKEN)` the attempt's own gateway token."""

    vendor: ModelVendor = Field(description="The vendor API the CLI speaks: anthropic, openai or gemini.")
    env: list[EnvVar] = Field(
        min_length=1,
        max_length=16,
        description="Variables set on the CLI for a routed attempt, which gets none of the definition's "
        "credential grants (the gateway holds the vendor's key).",
    )
    home_files: dict[str, str] = Field(
        default_factory=dict,
        description="Files written into the agent's home before it starts (path relative to the home, "
        "content), for a CLI that reads its endpoint or auth type only from a file (Gemini CLI's "
        "settings, Pi's models.json); `$(HARNESS_MODEL_GATEWAY_URL)` is expanded in them, never the token.",
        json_schema_extra={
            "maxProperties": 8,
            **validations(
                rule(
                    "self.all(k, !k.startsWith('/') && !k.contains('..') && size(k) <= 256)",
                    "homeFiles keys are paths relative to the agent's home, without '..'",
                )
            ),
        },
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Options a routed attempt adds to the run's `with` (a list is appended to the run's, "
        "anything else replaces it), for a CLI that takes its endpoint only as flags (Codex's `config`). "
        "Only `$(HARNESS_MODEL_GATEWAY_URL)` is expanded in them: flags are argv, never the token.",
        json_schema_extra=FREE_FORM,
    )


class HarnessDefinitionSpec(Model):
    """How to invoke one agent CLI. Keys and semantics follow Dagu's `harnesses:` entries, camelCased."""

    protocol: Protocol = Field(
        default=Protocol.cli, description="cli (a process) or acp (Agent Client Protocol)."
    )
    binary: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="Executable: a name looked up in PATH, or a path containing '/'. Required for cli and "
        "for acp over stdio.",
    )
    prefix_args: list[str] = Field(
        default_factory=list, max_length=64, description="Arguments placed before everything else."
    )
    prompt_mode: PromptMode = Field(
        default=PromptMode.arg,
        description="How the prompt is delivered: arg (a positional argument), flag (after promptFlag) "
        "or stdin (prompt, a blank line, then the run's stdin).",
    )
    prompt_flag: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="Flag token that precedes the prompt; required exactly when promptMode is flag.",
    )
    prompt_position: PromptPosition = Field(
        default=PromptPosition.before_flags,
        description="Whether the prompt goes before (beforeFlags) or after (afterFlags) the option flags.",
    )
    flag_style: FlagStyle = Field(
        default=FlagStyle.double_dash, description="Option flags as --key (doubleDash) or -key (singleDash)."
    )
    option_flags: dict[str, str] = Field(
        default_factory=dict,
        description="Option key -> literal flag token, used verbatim (flagStyle does not apply).",
        json_schema_extra={"maxProperties": 128},
    )
    kebab_case_flags: bool = Field(
        default=False,
        description="Turn '_' in option keys into '-' (true for the built-in catalog); the kebab and snake "
        "spellings of one key are then one key, and the kebab spelling wins.",
    )
    known_options: list[str] | None = Field(
        default=None,
        max_length=512,
        description="The option keys the CLI accepts (after kebab-casing), when known: a run's `with` key "
        "outside them is warned about by `harnessctl validate` and in an Event when the run is reconciled, "
        "before the CLI refuses it. The built-ins' lists are what their pinned CLIs' help prints.",
    )
    stdin_mode: StdinMode = Field(
        default=StdinMode.pipe,
        description="pipe: the run's stdin is piped to the CLI; fold: prompt, a blank line and stdin are "
        "joined into the prompt.",
    )
    defaults: dict[str, Any] = Field(
        default_factory=dict,
        description="Default options, overridden key by key by the run's `with`.",
        json_schema_extra=FREE_FORM,
    )
    transport: AcpTransport | None = Field(default=None, description="ACP transport (default stdio).")
    url: str | None = Field(default=None, max_length=2048, description="ACP endpoint for websocket or http.")
    cwd: str | None = Field(
        default=None,
        max_length=4096,
        description="ACP session working directory on the agent host (absolute).",
        json_schema_extra=validations(rule("self.startsWith('/')", "must be an absolute path")),
    )
    headers: list[AcpHeader] = Field(default_factory=list, max_length=32, description="ACP HTTP headers.")
    ca_bundle_secret_ref: SecretKeySelector | None = Field(
        default=None, description="CA bundle for the ACP endpoint's TLS."
    )
    bearer_subprotocol: bool | None = Field(
        default=None, description="Send the bearer token as a websocket subprotocol."
    )
    image: str | None = Field(
        default=None,
        max_length=1024,
        description="Sandbox image for this provider (default: the operator's sandbox image).",
    )
    output: OutputSpec = Field(default_factory=OutputSpec, description="How stdout is parsed.")
    capabilities: Capabilities = Field(
        default_factory=Capabilities, description="What is really implemented."
    )
    continue_args: list[str] = Field(
        default_factory=list,
        max_length=8,
        description="Arguments after prefixArgs that make the CLI continue its most recent session in the "
        "working directory (e.g. --continue): a re-prompt (a run's spec.outputReprompts) then sends only "
        "the correction. Empty: a re-prompt starts a new session with the prompt and the correction.",
    )
    session: SessionSpec | None = Field(
        default=None,
        description="Where the CLI keeps its sessions and how it continues one, for runs with "
        "spec.resumeFrom; set exactly when capabilities.sessionResume is true. An ACP agent (stdio) "
        "continues one with session/load.",
    )
    output_schema_option: OutputSchemaOption | None = Field(
        default=None,
        description="How a run's spec.outputSchema is passed to the CLI (protocol cli); set exactly when "
        "capabilities.structuredOutput is true. Unset: the schema is only checked after the CLI exits.",
    )
    tools: ToolPolicy | None = Field(
        default=None,
        description="The tool policy every run of this provider gets; a run's spec.tools can only narrow "
        "it (denied tools and false switches add up, allow lists intersect, strict wins).",
    )
    tool_controls: ToolControls | None = Field(
        default=None,
        description="How the CLI enforces a tool policy (protocol cli); unset: it enforces none, so a "
        "strict policy refuses the run and an advisory one warns. An ACP provider instead answers the "
        "agent's permission requests from the policy, enforced where capabilities.permissionHooks is true.",
    )
    mcp: McpSupport | None = Field(
        default=None,
        description="How the CLI takes MCP servers (protocol cli); unset: it takes none, and a run that "
        "attaches one is refused (McpUnsupported).",
    )
    mcp_servers: list[McpServer] = Field(
        default_factory=list,
        max_length=MCP_SERVERS_MAX,
        description="MCP servers every run of this provider gets (a run's own come after them).",
        json_schema_extra=validations(MCP_UNIQUE_RULE),
    )
    credentials: list[CredentialGrant] = Field(
        default_factory=list, max_length=32, description="Default credential grants."
    )
    env: list[EnvVar] = Field(default_factory=list, max_length=64, description="Plain environment.")
    egress: list[EgressRule] = Field(
        default_factory=list, max_length=32, description="Network destinations the provider needs."
    )
    model_route: ModelRoute | None = Field(
        default=None,
        description="How the CLI is routed through the model gateway (when the chart deploys one with a "
        "key for this vendor); absent: the CLI cannot be routed and its key stays in the sandbox.",
    )
    pricing: dict[str, ModelPricing] = Field(
        default_factory=dict,
        description="Per model: USD per million tokens, used when the CLI does not report cost and by the "
        "model gateway's meter. A ClusterHarnessDefinition's prices are the platform's and win over the "
        "price table; a namespaced HarnessDefinition's only raise a price (per model and token kind, the "
        "larger of its price and the platform's), and price a model nobody else prices at least at the "
        "dearest price the table lists for its vendor.",
        json_schema_extra={"maxProperties": 64},
    )
    vendor: str | None = Field(
        default=None,
        max_length=64,
        pattern=r"^[a-z0-9][-_a-z0-9]*$",
        description="Whose list prices apply to the models this CLI uses, as the pinned price table names "
        "the vendor (e.g. openai, google, anthropic, github-copilot); empty: the model name decides "
        "('vendor/model', else the table's own match). Only read when `pricing` has no entry.",
    )
    cli_version: str | None = Field(
        default=None,
        max_length=64,
        description="Version of the CLI the image pins, recorded in status.attempts[].cliVersion when the "
        "CLI prints none itself.",
    )

    model_config = ConfigDict(
        json_schema_extra=validations(
            rule(
                "has(self.binary) || (has(self.protocol) && self.protocol == 'acp' && "
                "has(self.transport) && self.transport != 'stdio')",
                "spec.binary is required for protocol cli and for acp over stdio",
                field_path=".binary",
                reason="FieldValueRequired",
            ),
            rule(
                "(has(self.promptMode) && self.promptMode == 'flag') == has(self.promptFlag)",
                "spec.promptFlag is required when spec.promptMode is flag, and only then",
                field_path=".promptFlag",
            ),
            rule(
                "!has(self.transport) || self.transport == 'stdio' || has(self.url)",
                "spec.url is required for acp over websocket or http",
                field_path=".url",
            ),
            rule(
                "(has(self.protocol) && self.protocol == 'acp') || "
                "!(has(self.transport) || has(self.url) || has(self.cwd))",
                "spec.transport, spec.url and spec.cwd apply only to protocol acp",
            ),
            rule(
                # The API server fills in the CLI defaults, so only a value other than its default is
                # one the author set.
                "!(has(self.protocol) && self.protocol == 'acp') || !(has(self.promptFlag) || "
                "(has(self.promptMode) && self.promptMode != 'arg') || "
                "(has(self.promptPosition) && self.promptPosition != 'beforeFlags') || "
                "(has(self.stdinMode) && self.stdinMode != 'pipe'))",
                "spec.promptMode, promptFlag, promptPosition and stdinMode apply only to protocol cli; an "
                "ACP prompt is sent as a message, with the run's stdin after a blank line",
                reason="FieldValueForbidden",
            ),
            rule(
                "!has(self.transport) || self.transport == 'stdio' || "
                "(has(self.cwd) && !(has(self.binary) || has(self.prefixArgs) || has(self.flagStyle) || "
                "has(self.optionFlags)))",
                "acp over websocket or http needs spec.cwd (the session's absolute directory on the agent "
                "host) and starts nothing: remove binary, prefixArgs, flagStyle and optionFlags",
                field_path=".cwd",
            ),
            rule(
                "!has(self.url) || !has(self.transport) || "
                "(self.transport == 'websocket' && self.url.matches('^wss?://[^/?#]+')) || "
                "(self.transport == 'http' && self.url.matches('^https?://[^/?#]+'))",
                "spec.url must be ws:// or wss:// for transport websocket, http:// or https:// for http",
                field_path=".url",
            ),
            rule(
                "(has(self.transport) && self.transport != 'stdio') || "
                "!(has(self.url) || has(self.headers) || has(self.caBundleSecretRef))",
                "spec.url, headers and caBundleSecretRef apply only to acp over websocket or http",
            ),
            rule(
                "has(self.outputSchemaOption) == (has(self.capabilities) && "
                "has(self.capabilities.structuredOutput) && self.capabilities.structuredOutput)",
                "spec.outputSchemaOption is how the CLI takes a JSON Schema: set it exactly when "
                "spec.capabilities.structuredOutput is true",
                field_path=".outputSchemaOption",
            ),
            rule(
                "!has(self.outputSchemaOption) || !has(self.protocol) || self.protocol == 'cli'",
                "spec.outputSchemaOption applies only to protocol cli",
                field_path=".outputSchemaOption",
            ),
            rule(
                "has(self.session) == (has(self.capabilities) && has(self.capabilities.sessionResume) && "
                "self.capabilities.sessionResume)",
                "spec.session is how the CLI continues a session: set it exactly when "
                "spec.capabilities.sessionResume is true",
                field_path=".session",
            ),
            rule(
                "!has(self.mcp) || ((has(self.protocol) && self.protocol == 'acp') == (has(self.mcp.format) "
                "&& self.mcp.format == 'acp'))",
                "spec.mcp.format is acp exactly for protocol acp: an ACP agent takes its servers in the "
                "session",
                field_path=".mcp.format",
            ),
            rule(
                "!has(self.mcp) || !has(self.transport) || self.transport == 'stdio'",
                "spec.mcp applies to a local ACP agent (transport stdio) only: it starts each server's gate "
                "from the sandbox image",
                field_path=".mcp",
            ),
            rule(
                "!has(self.mcpServers) || size(self.mcpServers) == 0 || has(self.mcp)",
                "spec.mcpServers needs spec.mcp: how the CLI takes them",
                field_path=".mcpServers",
            ),
            rule(
                "!has(self.session) || (has(self.protocol) && self.protocol == 'acp') || "
                "(has(self.session.resumeArgs) && size(self.session.resumeArgs) > 0)",
                "spec.session.resumeArgs is how a protocol cli CLI continues a session: set it",
                field_path=".session.resumeArgs",
            ),
            rule(
                "!has(self.session) || !has(self.protocol) || self.protocol == 'cli' || "
                "((!has(self.session.resumeArgs) || size(self.session.resumeArgs) == 0) && "
                "(!has(self.transport) || self.transport == 'stdio'))",
                "an ACP agent continues a session with session/load, from its files in the sandbox's home: "
                "spec.session takes no resumeArgs, and only transport stdio",
                field_path=".session",
            ),
            rule(
                "!has(self.toolControls) || !has(self.protocol) || self.protocol == 'cli'",
                "spec.toolControls applies only to protocol cli; an ACP provider answers permission "
                "requests from the policy (capabilities.permissionHooks)",
                field_path=".toolControls",
            ),
            rule(
                "!has(self.bearerSubprotocol) || (has(self.transport) && self.transport == 'websocket')",
                "spec.bearerSubprotocol applies only to transport websocket",
                field_path=".bearerSubprotocol",
            ),
        )
    )


class HarnessDefinition(Model):
    """A namespaced provider: how to invoke one agent CLI."""

    api_version: str = Field(default=API_VERSION, description="agentharness.dev/v1alpha1")
    kind: str = Field(default="HarnessDefinition", description="HarnessDefinition")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Standard object metadata.")
    spec: HarnessDefinitionSpec = Field(description="How to invoke the CLI.")
    status: HarnessDefinitionStatus | None = Field(default=None, description="Whether runs can use it.")


class ClusterHarnessDefinition(Model):
    """A cluster-wide provider; the built-in catalog ships as these."""

    api_version: str = Field(default=API_VERSION, description="agentharness.dev/v1alpha1")
    kind: str = Field(default="ClusterHarnessDefinition", description="ClusterHarnessDefinition")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Standard object metadata.")
    spec: HarnessDefinitionSpec = Field(description="How to invoke the CLI.")
    status: HarnessDefinitionStatus | None = Field(default=None, description="Whether runs can use it.")


class HarnessDefinitionStatus(Model):
    """A definition's observed state, written only by the operator."""

    conditions: list[Condition] = Field(
        default_factory=list, description="Ready: the definition is valid and runs can use it."
    )
    observed_generation: int | None = Field(default=None, description="Generation last checked.")


AcpHeader.model_rebuild()
HarnessDefinition.model_rebuild()
ClusterHarnessDefinition.model_rebuild()
