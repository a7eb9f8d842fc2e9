"""Tool policy: a run's spec.tools narrowed by its provider's, the parts a CLI cannot enforce, and the
options that enforce the rest (pure)."""

from __future__ import annotations

import json
from typing import Any

from harness_operator.api.v1alpha1 import (
    TOOLS_PLACEHOLDER,
    HarnessDefinitionSpec,
    Protocol,
    ToolControl,
    ToolControls,
    ToolEnforcement,
    ToolPolicy,
)
from harness_operator.contract.plan import home_path_arg
from harness_operator.core.access.settings_merge import add_option

# The parts of a policy, in the order messages name them, with the field each comes from.
PART_FIELDS = {
    "allow": "spec.tools.allow",
    "deny": "spec.tools.deny",
    "edits": "spec.tools.edits: false",
    "shell": "spec.tools.shell: false",
    "network": "spec.tools.network: false",
}


def _narrow(a: bool | None, b: bool | None) -> bool | None:
    """A switch both policies set: false wins, then true, then unset."""
    if a is False or b is False:
        return False
    if a is True or b is True:
        return True
    return None


def _unique(names: list[str]) -> list[str]:
    return list(dict.fromkeys(names))


def merge_tool_policies(base: ToolPolicy | None, run: ToolPolicy | None) -> ToolPolicy | None:
    """The run's policy within its provider's: denied tools and false switches add up, allow lists
    intersect (the run's order), strict wins."""
    if base is None or run is None:
        return run or base
    if base.allow is None or run.allow is None:
        allow = run.allow if base.allow is None else base.allow
    else:
        allow = [name for name in run.allow if name in base.allow]
    strict = ToolEnforcement.strict in (base.enforcement, run.enforcement)
    return ToolPolicy(
        enforcement=ToolEnforcement.strict if strict else ToolEnforcement.advisory,
        allow=allow,
        deny=_unique([*base.deny, *run.deny]),
        edits=_narrow(base.edits, run.edits),
        shell=_narrow(base.shell, run.shell),
        network=_narrow(base.network, run.network),
    )


def compute_tool_policy(run_tools: ToolPolicy | None, definition: HarnessDefinitionSpec) -> ToolPolicy | None:
    """The policy an attempt with `definition` runs under; one that asks for nothing is none (the CLI's
    own defaults apply, and a run's options are its own)."""
    policy = merge_tool_policies(definition.tools, run_tools)
    return policy if policy is not None and requested_parts(policy) else None


def requested_parts(policy: ToolPolicy) -> list[str]:
    """The parts the policy asks for (an unset field or a true switch asks nothing)."""
    asked = {
        "allow": policy.allow is not None,
        "deny": bool(policy.deny),
        "edits": policy.edits is False,
        "shell": policy.shell is False,
        "network": policy.network is False,
    }
    return [part for part in PART_FIELDS if asked[part]]


def _switch_control(controls: ToolControls, part: str) -> ToolControl | None:
    return {"edits": controls.no_edits, "shell": controls.no_shell, "network": controls.no_network}[part]


def _enforces(controls: ToolControls, part: str) -> bool:
    listed = controls.permission_env is not None
    if part == "allow":
        return controls.allow_option is not None or bool(controls.rules and controls.rules.allow) or listed
    denies = controls.deny_option is not None or controls.rules is not None or listed
    if part == "deny":
        return denies
    control = _switch_control(controls, part)
    # Names to deny need the deny option (or rules) to reach the CLI.
    return control is not None and (not control.deny or denies)


def find_unenforced(policy: ToolPolicy | None, definition: HarnessDefinitionSpec) -> list[str]:
    """The parts of `policy` the definition's CLI cannot enforce."""
    if policy is None:
        return []
    parts = requested_parts(policy)
    if definition.protocol == Protocol.acp:
        return [] if definition.capabilities.permission_hooks else parts
    controls = definition.tool_controls
    if controls is None:
        return parts
    return [part for part in parts if not _enforces(controls, part)]


def describe_unenforced(provider: str, definition: HarnessDefinitionSpec, parts: list[str]) -> str:
    """Which parts provider `provider` cannot enforce, and why."""
    fields = ", ".join(PART_FIELDS[part] for part in parts)
    if definition.protocol == Protocol.acp:
        why = "its ACP agent is not known to ask permission before each tool (capabilities.permissionHooks)"
    else:
        why = "its definition's toolControls say no option of its CLI holds it"
    return f'provider "{provider}" cannot enforce {fields}: {why}'


def _normal(key: str, definition: HarnessDefinitionSpec) -> str:
    return key.replace("_", "-") if definition.kebab_case_flags else key


def guarded_keys(definition: HarnessDefinitionSpec) -> set[str]:
    """The option keys a run may not set under a policy: those the controls set and guard."""
    controls = definition.tool_controls
    if controls is None:
        return set()
    keys = {*controls.guarded_options, *controls.options}
    keys |= {k for k in (controls.allow_option, controls.deny_option) if k}
    for control in (controls.no_edits, controls.no_shell, controls.no_network):
        if control is not None:
            keys |= set(control.options)
    return {_normal(k, definition) for k in keys}


def find_guarded_options(
    policy: ToolPolicy | None, definition: HarnessDefinitionSpec, options: dict[str, Any]
) -> list[str]:
    """The keys of an attempt's own options that would loosen its policy (sorted)."""
    if policy is None or definition.protocol == Protocol.acp:
        return []
    guarded = guarded_keys(definition)
    return sorted(key for key in options if _normal(key, definition) in guarded)


def find_guarded_env(
    policy: ToolPolicy | None, definition: HarnessDefinitionSpec, env_names: list[str]
) -> list[str]:
    """The names of a run's env that would loosen its policy (sorted)."""
    controls = definition.tool_controls
    if policy is None or controls is None or definition.protocol == Protocol.acp:
        return []
    return sorted(set(env_names) & set(controls.guarded_env))


def build_tool_options(
    policy: ToolPolicy | None, definition: HarnessDefinitionSpec, options: dict[str, Any]
) -> dict[str, Any]:
    """The attempt's options with those that enforce `policy` on its CLI (the parts it can enforce)."""
    controls = definition.tool_controls
    if policy is None or controls is None or definition.protocol == Protocol.acp:
        return dict(options)
    out = dict(options)  # none of its keys is guarded (find_guarded_options refused those)
    for key, value in controls.options.items():
        add_option(out, _normal(key, definition), value)
    for control in _requested_switches(policy, controls):
        for key, value in control.options.items():
            add_option(out, _normal(key, definition), value)
    deny = denied_names(policy, controls)

    def listed(names: list[str]) -> str | list[str]:
        return controls.list_separator.join(names) if controls.list_separator else names

    if policy.allow is not None and controls.allow_option:
        out[_normal(controls.allow_option, definition)] = listed(list(policy.allow))
    if deny and controls.deny_option:
        out[_normal(controls.deny_option, definition)] = listed(deny)
    return out


def _requested_switches(policy: ToolPolicy, controls: ToolControls) -> list[ToolControl]:
    """The controls of the switches the policy sets false, those the CLI has."""
    parts = [p for p in requested_parts(policy) if p in ("edits", "shell", "network")]
    return [c for c in (_switch_control(controls, p) for p in parts) if c is not None]


def denied_names(policy: ToolPolicy, controls: ToolControls) -> list[str]:
    """The tool names the policy denies: its own, then those its false switches deny."""
    return _unique([*policy.deny, *(n for c in _requested_switches(policy, controls) for n in c.deny)])


def build_tool_env(
    policy: ToolPolicy | None, definition: HarnessDefinitionSpec, also_allowed: list[str]
) -> dict[str, str]:
    """The variables an attempt under `policy` gets: the controls' own, and the JSON configuration whose
    `permission` map holds the lists (permissionEnv), in the order the last matching rule wins by: `*`
    denied under an allow list, the allowed tools and `also_allowed` (an MCP server's listed tools), the
    denied ones."""
    controls = definition.tool_controls
    if policy is None or controls is None or definition.protocol == Protocol.acp:
        return {}
    out = dict(controls.env)
    if controls.permission_env:
        permission: dict[str, str] = {}
        if policy.allow is not None:
            permission["*"] = "deny"
            permission |= {name: "allow" for name in [*policy.allow, *also_allowed]}
        for name in denied_names(policy, controls):
            permission.pop(name, None)  # a denial goes last, after any allowance of the same name
            permission[name] = "deny"
        if permission:
            out[controls.permission_env] = json.dumps({"permission": permission})
    return out


def build_tool_rules(
    policy: ToolPolicy | None, definition: HarnessDefinitionSpec, also_allowed: list[str]
) -> tuple[list[str], dict[str, str]]:
    """The arguments and home file of a CLI whose rules file holds the policy's lists (none otherwise):
    the denied tools' rules, and under an allow list those of the allowed ones and `also_allowed` (an MCP
    server's listed tools)."""
    controls = definition.tool_controls
    if policy is None or controls is None or controls.rules is None or definition.protocol == Protocol.acp:
        return [], {}
    rules = controls.rules
    texts = []
    if policy.allow is not None and rules.allow:
        allowed = _unique([*policy.allow, *also_allowed])
        texts.append(rules.allow.replace(TOOLS_PLACEHOLDER, json.dumps(allowed)))
    if deny := denied_names(policy, controls):
        texts.append(rules.deny.replace(TOOLS_PLACEHOLDER, json.dumps(deny)))
    if not texts:
        return [], {}
    return [rules.flag, home_path_arg(rules.path)], {rules.path: "\n".join(texts)}


def allow_listed_tools(
    options: dict[str, Any], definition: HarnessDefinitionSpec, names: list[str]
) -> dict[str, Any]:
    """The options with `names` (an MCP server's listed tools) added to what the CLI allows without
    asking (its tool controls' allow option), beside what is allowed already: nobody approves a tool in
    a run."""
    controls = definition.tool_controls
    if not names or controls is None or controls.allow_option is None:
        return options
    key = _normal(controls.allow_option, definition)
    given = options.get(key)
    allowed = given if isinstance(given, list) else ([given] if isinstance(given, str) and given else [])
    return {**options, key: [*allowed, *names]}


def compute_tool_policy_warning(
    policy: ToolPolicy | None, index: int, provider: str, definition: HarnessDefinitionSpec
) -> str | None:
    """The Warning of an advisory `policy` (compute_tool_policy's) attempt `index` runs without parts of
    (None: it holds it all)."""
    parts = find_unenforced(policy, definition)
    if not parts:
        return None
    unheld = describe_unenforced(provider, definition, parts)
    return f"attempt {index}: {unheld}; it runs without them (advisory)"
