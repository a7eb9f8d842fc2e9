"""MCP servers a run's agent may use (spec.mcpServers of runs and definitions), and how a definition's CLI
takes them (spec.mcp)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import ConfigDict, Field

from harness_operator.api.common import NO_NUL, Model, rule, validations

MCP_SERVERS_MAX = 8
MCP_SERVER_NAME_RULE = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"

McpToolName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="A tool of the server, as it lists it.",
    ),
]


class McpHeader(Model):
    """An HTTP header sent to a remote MCP server."""

    name: str = Field(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9-]+$", description="Header name.")
    value: str = Field(
        max_length=4096,
        description="Its value; `$(NAME)` stands for the attempt's variable NAME (a credential the run or "
        "its definition grants, e.g. `Bearer $(DOCS_TOKEN)`), which the CLI expands: the secret is in "
        "neither argv nor the plan.",
        json_schema_extra=validations(NO_NUL),
    )


class McpServer(Model):
    """One MCP server: remote (`url`, through the sandbox's egress) or local (`command`, started in the
    sandbox from its image)."""

    name: str = Field(
        min_length=1,
        max_length=40,
        pattern=MCP_SERVER_NAME_RULE,
        description="The server's name (lowercase letters, digits and '-'); its tools are named after it.",
    )
    url: str | None = Field(
        default=None,
        max_length=2048,
        pattern=r"^https?://[^/?#]+",
        description="A remote server's endpoint (streamable HTTP); its host and port join the attempt's "
        "egress.",
    )
    headers: list[McpHeader] = Field(default_factory=list, max_length=16, description="Headers for `url`.")
    command: list[Annotated[str, Field(min_length=1, max_length=4096)]] | None = Field(
        default=None,
        min_length=1,
        max_length=32,
        description="A local server's argv, started by the CLI in the sandbox (the image must have it).",
    )
    tools: list[McpToolName] = Field(
        min_length=1,
        max_length=32,
        description="The server's tools the agent may call, and only those (list read-only ones for a "
        "read-only server); spec.tools.deny still refuses any of them.",
    )

    model_config = ConfigDict(
        json_schema_extra=validations(
            rule("has(self.url) != has(self.command)", "set exactly one of url or command"),
            rule(
                "!has(self.headers) || size(self.headers) == 0 || has(self.url)",
                "headers apply only to a remote server (url)",
                field_path=".headers",
            ),
        )
    )


class McpFormat(StrEnum):
    json = "json"
    codex = "codex"
    settings = "settings"
    opencode = "opencode"
    acp = "acp"


class McpSupport(Model):
    """How the CLI takes MCP servers, and the names its tools get. `json`: one configuration in the shape
    `{"mcpServers": {NAME: {...}}}` as the flag's value (Claude Code's `--mcp-config`, Copilot's
    `--additional-mcp-config`); `codex`: the flag once per server with `mcp_servers.NAME={...}`, a TOML
    inline table (Codex's `-c`); `settings`: the servers merged into the `mcpServers` of a JSON settings
    file in the agent's home (Gemini CLI's, Qwen Code's), each trusted (its listed tools run unasked) and
    limited to its listed tools (`includeTools`); `opencode`: the servers merged into the `mcp` of the
    JSON configuration a variable holds, its other tools switched off (`tools`); `acp`: each server given
    in the ACP session (session/new or session/load) as a local server, the gate that lets through only
    its listed tools (runner/mcp_gate.py)."""

    format: McpFormat = Field(default=McpFormat.json, description="The configuration's shape.")
    flag: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        pattern=r"^-",
        description="The flag that takes the configuration (json and codex).",
    )
    file: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="The settings file, relative to the agent's home (settings).",
    )
    env: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description="The variable that holds the JSON configuration (opencode).",
    )
    args: list[str] = Field(
        default_factory=list,
        max_length=8,
        description="Arguments added with it (e.g. --strict-mcp-config: no server but those given).",
    )
    tool_name: str = Field(
        min_length=1,
        max_length=128,
        description="How the CLI names a server's tool, with {server} and {tool} (Claude Code: "
        "mcp__{server}__{tool}): the names the allow and deny options take; for acp, the title the agent's "
        "permission requests give it (Gemini's: {tool} ({server} MCP Server)).",
        json_schema_extra=validations(
            rule(
                "self.contains('{server}') && self.contains('{tool}')",
                "toolName must name {server} and {tool}",
            )
        ),
    )
    list_tools: bool = Field(
        default=False,
        description="Each server's configuration lists its tools (Copilot's `tools`: only those are "
        "offered); the codex format always does (`enabled_tools`).",
    )
    variable: str = Field(
        default="${{{name}}}",
        max_length=64,
        description="How the json and settings configurations write a variable the CLI expands, with "
        "{name} (Claude Code: ${{{name}}}). The codex format expands none: a header is literal text, "
        "`$(NAME)` or, for Authorization, `Bearer $(NAME)`.",
    )

    model_config = ConfigDict(
        json_schema_extra=validations(
            rule(
                "has(self.format) && self.format == 'settings' ? has(self.file) && !has(self.flag) && "
                "!has(self.env) : has(self.format) && self.format == 'opencode' ? has(self.env) && "
                "!has(self.flag) && !has(self.file) : has(self.format) && self.format == 'acp' ? "
                "!has(self.flag) && !has(self.file) && !has(self.env) && (!has(self.args) || "
                "size(self.args) == 0) : has(self.flag) && !has(self.file) && !has(self.env)",
                "set file for the settings format, env for opencode, nothing for acp, flag for the others",
            ),
            rule(
                "!has(self.file) || (!self.file.startsWith('/') && !self.file.contains('..'))",
                "file is a path relative to the agent's home, without '..'",
                field_path=".file",
            ),
        )
    )


MCP_UNIQUE_RULE = rule(
    "self.all(a, self.filter(b, b.name == a.name).size() == 1)", "MCP server names must be unique"
)
