"""Tool policy: which tools a run's agent may use (spec.tools), and how a definition's CLI enforces it
(spec.toolControls)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import ConfigDict, Field

from harness_operator.api.common import FREE_FORM, NO_NUL, Model, rule, validations

TOOL_NAMES_MAX = 32
TOOL_NAME_MAX = 256
# The most tool names an attempt's status records as denied.
DENIED_TOOLS_MAX = 16

ToolName = Annotated[
    str, Field(min_length=1, max_length=TOOL_NAME_MAX, json_schema_extra=validations(NO_NUL))
]


class ToolEnforcement(StrEnum):
    strict = "strict"
    advisory = "advisory"


class ToolPolicy(Model):
    """Which tools the agent may use. Unset fields ask for nothing; the CLI's own defaults apply there."""

    enforcement: ToolEnforcement = Field(
        default=ToolEnforcement.strict,
        description="strict: the run is refused (ToolPolicyUnenforceable) when a provider's CLI cannot "
        "enforce a part of the policy (its definition's toolControls lack it); advisory: the attempt runs "
        "with the parts it can enforce and a Warning Event (ToolPolicyNotEnforced) names the rest.",
    )
    allow: list[ToolName] | None = Field(
        default=None,
        max_length=TOOL_NAMES_MAX,
        description="Tools the agent may use without asking, in the CLI's own names and patterns (Claude "
        "Code: Read, Bash(git status:*)); nobody answers a prompt in a run, so a tool that needs approval "
        "and is not listed is refused.",
    )
    deny: list[ToolName] = Field(
        default_factory=list,
        max_length=TOOL_NAMES_MAX,
        description="Tools the agent may never use, in the CLI's own names and patterns.",
    )
    edits: bool | None = Field(
        default=None, description="false: the agent's tools may not create, change or delete files."
    )
    shell: bool | None = Field(default=None, description="false: the agent's tools may not run commands.")
    network: bool | None = Field(
        default=None,
        description="false: the agent's tools may not fetch from or search the network (its model calls "
        "are not tools; spec.sandbox.egress confines the pod).",
    )


class ToolControl(Model):
    """What enforces one part of a tool policy on this CLI: options added to the attempt's, and tool names
    added to the denied ones."""

    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Options added to the attempt's (a list is appended to a list, anything else replaces).",
        json_schema_extra=FREE_FORM,
    )
    deny: list[ToolName] = Field(
        default_factory=list, max_length=TOOL_NAMES_MAX, description="Tool names to deny."
    )


TOOLS_PLACEHOLDER = "$(TOOLS)"


class ToolRules(Model):
    """A file of rules that holds the policy, for a CLI that takes its tool rules from a file (Gemini CLI's
    `--admin-policy`): written into the agent's home and named by `flag`. In the templates, `$(TOOLS)`
    stands for the tools' names as a JSON list (a TOML array too)."""

    flag: str = Field(
        min_length=1, max_length=256, pattern=r"^-", description="The flag that takes the file's path."
    )
    path: str = Field(
        min_length=1,
        max_length=256,
        pattern=r"^[^/]",
        description="The file, relative to the agent's home.",
        json_schema_extra=validations(rule("!self.contains('..')", "path may not contain '..'")),
    )
    deny: str = Field(
        min_length=1,
        max_length=4096,
        description="The rules that deny the denied tools ($(TOOLS)).",
        json_schema_extra=validations(rule("self.contains('$(TOOLS)')", "deny must contain $(TOOLS)")),
    )
    allow: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="The rules that allow the allowed tools ($(TOOLS)) and no other; unset: the file "
        "cannot hold an allow list.",
        json_schema_extra=validations(rule("self.contains('$(TOOLS)')", "allow must contain $(TOOLS)")),
    )


class ToolControls(Model):
    """How this CLI enforces a run's spec.tools, each part as its pinned CLI was seen to; a part left unset
    is one it cannot enforce (a strict policy asking for it is refused)."""

    allow_option: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        description="The option key that takes the allowed tools (a list: one flag per tool).",
    )
    deny_option: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        description="The option key that takes the denied tools (a list: one flag per tool).",
    )
    list_separator: str | None = Field(
        default=None,
        min_length=1,
        max_length=4,
        description="The allow and deny options take one value, the names joined by this (Pi's "
        "`--tools read,grep`: a repeated flag keeps only its last), not one flag per tool.",
    )
    rules: ToolRules | None = Field(
        default=None,
        description="A file of rules that holds the allow and deny lists instead of options.",
    )
    permission_env: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description="A variable holding the CLI's JSON configuration, whose `permission` map holds the "
        "allow and deny lists instead of options, in the order the last matching rule wins by: `*` "
        "denied under an allow list, the allowed tools, the denied ones (OpenCode's "
        "OPENCODE_CONFIG_CONTENT, merged with what else the attempt puts there).",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Variables every attempt under a tool policy gets (e.g. one that keeps the workspace's "
        "own configuration from widening it).",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Options every attempt under a tool policy gets (e.g. a permission mode in which "
        "nothing runs unapproved).",
        json_schema_extra=FREE_FORM,
    )
    no_edits: ToolControl | None = Field(default=None, description="What enforces edits: false.")
    no_shell: ToolControl | None = Field(default=None, description="What enforces shell: false.")
    no_network: ToolControl | None = Field(default=None, description="What enforces network: false.")
    guarded_options: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="Option keys a run's `with` may not set while a tool policy applies, because they "
        "would loosen it (permission modes, bypass switches, the tool lists themselves).",
    )
    guarded_env: list[str] = Field(
        default_factory=list,
        max_length=32,
        description="Variables a run's env may not set while a tool policy applies, for the same reason "
        "(Copilot's COPILOT_ALLOW_ALL).",
    )

    model_config = ConfigDict(
        json_schema_extra=validations(
            rule(
                "!has(self.denyOption) || !has(self.allowOption) || self.denyOption != self.allowOption",
                "toolControls.allowOption and denyOption must be different options",
            ),
            rule(
                "(has(self.rules) ? 1 : 0) + (has(self.permissionEnv) ? 1 : 0) + "
                "(has(self.allowOption) || has(self.denyOption) ? 1 : 0) <= 1",
                "set one of rules, permissionEnv or allowOption and denyOption: each holds the lists",
            ),
        )
    )
