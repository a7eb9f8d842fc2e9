"""spec.tools: a run's policy within its provider's, the parts a CLI cannot enforce, the options that
enforce the rest, and what resolution and planning make of it (Claude Code's controls from the catalog)."""

import json
import tomllib
from typing import Any

import pytest
from tests.attempt_plans import plan_of

from harness_operator.api.v1alpha1 import HarnessDefinitionSpec, HarnessRun, ToolPolicy
from harness_operator.catalog import load_builtin_catalog
from harness_operator.core.access.tool_policy import (
    build_tool_env,
    build_tool_options,
    build_tool_rules,
    compute_tool_policy,
    compute_tool_policy_warning,
    find_guarded_options,
    find_unenforced,
    merge_tool_policies,
    requested_parts,
)
from harness_operator.core.resolve.resolution import Rejection, resolve_targets

CATALOG = {d.metadata["name"]: d.spec for d in load_builtin_catalog()}
CLAUDE = CATALOG["claude"]


def policy(**fields: Any) -> ToolPolicy:
    return ToolPolicy.model_validate(fields)


def run_of(spec: dict[str, Any]) -> HarnessRun:
    base = {"provider": "claude", "prompt": "fix it"}
    return HarnessRun.model_validate(
        {"metadata": {"name": "r", "namespace": "team"}, "spec": {**base, **spec}}
    )


class Reader:
    """The catalog as the only definitions, plus `extra` cluster ones."""

    def __init__(self, extra: dict[str, dict[str, Any]] | None = None) -> None:
        self.specs = {name: spec.to_api() for name, spec in CATALOG.items()} | (extra or {})

    def definition(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        spec = self.specs.get(name) if namespace is None else None
        return {"spec": spec} if spec is not None else None


@pytest.mark.parametrize(
    ("base", "run", "expected"),
    [
        (None, None, None),
        (None, {"shell": False}, {"shell": False}),
        ({"deny": ["WebFetch"]}, None, {"deny": ["WebFetch"]}),
        # denied names and false switches add up; a run's true cannot undo a provider's false
        (
            {"deny": ["WebFetch"], "edits": False},
            {"deny": ["Bash", "WebFetch"], "edits": True, "network": False},
            {"deny": ["WebFetch", "Bash"], "edits": False, "network": False},
        ),
        # allow lists intersect in the run's order; one side's list stands when the other has none
        (
            {"allow": ["Read", "Bash", "Grep"]},
            {"allow": ["Grep", "Edit", "Read"]},
            {"allow": ["Grep", "Read"]},
        ),
        ({"allow": ["Read"]}, {"deny": ["Bash"]}, {"allow": ["Read"], "deny": ["Bash"]}),
        (None, {"allow": []}, {"allow": []}),
        # strict wins over advisory
        ({"enforcement": "advisory"}, {"enforcement": "strict"}, {"enforcement": "strict"}),
        ({"enforcement": "strict"}, {"enforcement": "advisory"}, {"enforcement": "strict"}),
        ({"enforcement": "advisory"}, {"enforcement": "advisory"}, {"enforcement": "advisory"}),
    ],
)
def test_a_run_narrows_its_providers_policy(base, run, expected) -> None:
    merged = merge_tool_policies(
        policy(**base) if base is not None else None, policy(**run) if run is not None else None
    )
    assert merged == (policy(**expected) if expected is not None else None)


@pytest.mark.parametrize(
    ("fields", "parts"),
    [
        ({}, []),
        ({"edits": True, "shell": True, "network": True, "deny": []}, []),
        ({"allow": []}, ["allow"]),
        (
            {"network": False, "deny": ["X"], "allow": ["Y"], "shell": False, "edits": False},
            ["allow", "deny", "edits", "shell", "network"],
        ),
    ],
)
def test_only_what_narrows_is_a_part(fields, parts) -> None:
    assert requested_parts(policy(**fields)) == parts


def test_what_each_builtin_can_hold() -> None:
    everything = policy(allow=["Read"], deny=["X"], edits=False, shell=False, network=False)
    assert find_unenforced(everything, CLAUDE) == []
    assert find_unenforced(everything, CATALOG["copilot"]) == []
    assert find_unenforced(everything, CATALOG["qwen"]) == ["allow"]  # a workspace's settings widen it
    assert find_unenforced(everything, CATALOG["codex"]) == ["allow", "deny"]
    assert find_unenforced(everything, CATALOG["gemini"]) == []  # its rules file
    assert find_unenforced(everything, CATALOG["pi"]) == ["deny", "edits", "shell", "network"]
    assert find_unenforced(everything, CATALOG["aider"]) == ["allow", "deny", "edits", "shell", "network"]
    assert find_unenforced(None, CATALOG["aider"]) == []
    # an ACP agent enforces a policy only where it asks before its tools
    acp = CATALOG["claude-acp"]
    assert find_unenforced(policy(shell=False), acp) == ["shell"]
    hooks = acp.model_copy(
        update={"capabilities": acp.capabilities.model_copy(update={"permission_hooks": True})}
    )
    assert find_unenforced(policy(shell=False), hooks) == []


def test_a_switch_that_denies_names_needs_the_deny_option() -> None:
    spec = HarnessDefinitionSpec.model_validate(
        {
            "binary": "agent",
            "toolControls": {"noShell": {"deny": ["shell"]}, "noEdits": {"options": {"ro": True}}},
        }
    )
    assert find_unenforced(policy(shell=False, edits=False), spec) == ["shell"]


def test_claudes_options_under_a_policy() -> None:
    options = build_tool_options(
        policy(allow=["Bash(git status:*)"], deny=["Glob"], edits=False, shell=False, network=False),
        CLAUDE,
        {"model": "claude-sonnet-4-5"},
    )
    assert options == {
        "model": "claude-sonnet-4-5",
        "permission-mode": "dontAsk",
        "setting-sources": "user",
        "allowed-tools": ["Bash(git status:*)"],
        "disallowed-tools": ["Glob", "Edit", "Write", "NotebookEdit", "Bash", "WebFetch", "WebSearch"],
    }
    assert build_tool_options(None, CLAUDE, {"model": "m"}) == {"model": "m"}
    assert build_tool_options(policy(shell=False), CATALOG["aider"], {"model": "m"}) == {"model": "m"}


def test_the_other_builtins_options_under_a_policy() -> None:
    none = policy(edits=False, shell=False, network=False)
    routed = {"config": ["model_provider=harness"]}
    assert build_tool_options(none, CATALOG["codex"], routed) == {
        "config": ["model_provider=harness", 'web_search="disabled"'],
        "disable": ["shell_tool"],
        "sandbox": "read-only",
    }
    assert build_tool_options(policy(deny=["glob"], shell=False), CATALOG["qwen"], {}) == {
        "approval-mode": "default",
        "exclude-tools": ["glob", "run_shell_command"],
    }
    assert build_tool_options(policy(allow=["write"], network=False), CATALOG["copilot"], {}) == {
        "allow-all-tools": False,
        "allow-tool": ["write"],
        "deny-tool": ["url"],
    }


def test_a_policy_that_asks_nothing_is_none() -> None:
    run = run_of(
        {"tools": {"enforcement": "strict", "shell": True}, "with": {"permission-mode": "acceptEdits"}}
    )
    assert compute_tool_policy(run.spec.tools, CLAUDE) is None
    assert [t.provider for t in resolve_targets(Reader(), run)] == ["claude"]


def test_the_plan_of_a_policed_claude_attempt() -> None:
    run = run_of({"tools": {"shell": False}, "with": {"model": "claude-sonnet-4-5"}})
    plan = plan_of(run, CLAUDE, 1, "claude", run.spec.with_, "fix it", None)
    args = plan.args
    assert args[:2] == ["-p", "fix it"]
    pairs = list(zip(args[2::2], args[3::2], strict=False))
    assert ("--disallowed-tools", "Bash") in pairs and ("--permission-mode", "dontAsk") in pairs
    assert ("--setting-sources", "user") in pairs and "--allowed-tools" not in args
    unpoliced = plan_of(run_of({}), CLAUDE, 1, "claude", {}, "fix it", None)
    assert "--permission-mode" not in unpoliced.args and "--disallowed-tools" not in unpoliced.args


def test_an_acp_plan_carries_the_policy_it_answers_from() -> None:
    run = run_of({"provider": "claude-acp", "tools": {"enforcement": "advisory", "shell": False}})
    plan = plan_of(run, CATALOG["claude-acp"], 1, "claude-acp", {}, "fix it", None)
    assert plan.acp is not None and plan.acp.tools == policy(enforcement="advisory", shell=False)


@pytest.mark.parametrize(
    "with_",
    [
        {"permission-mode": "bypassPermissions"},
        {"permission_mode": "acceptEdits"},
        {"allowedTools": "Bash"},
        {"dangerously_skip_permissions": True},
        {"disallowed-tools": []},
    ],
)
def test_an_option_that_would_loosen_the_policy_is_refused(with_) -> None:
    run = run_of({"tools": {"deny": ["Bash"]}, "with": with_})
    assert find_guarded_options(run.spec.tools, CLAUDE, with_) == list(with_)
    with pytest.raises(Rejection) as refused:
        resolve_targets(Reader(), run)
    assert refused.value.reason == "ToolPolicyConflict"
    key = next(iter(with_))
    assert refused.value.message.startswith(f'spec.with.{key}: provider "claude" enforces the tool policy')


def test_without_a_policy_every_option_is_the_runs() -> None:
    run = run_of({"with": {"permission-mode": "acceptEdits"}})
    assert [t.provider for t in resolve_targets(Reader(), run)] == ["claude"]


def test_a_strict_policy_no_fallback_can_hold_refuses_the_run_and_names_the_parts() -> None:
    run = run_of({"tools": {"shell": False, "deny": ["Bash"]}, "fallback": [{"provider": "aider"}]})
    with pytest.raises(Rejection) as refused:
        resolve_targets(Reader(), run)
    assert refused.value.reason == "ToolPolicyUnenforceable"
    assert refused.value.message == (
        'provider "aider" cannot enforce spec.tools.deny, spec.tools.shell: false: its definition\'s '
        "toolControls say no option of its CLI holds it; use a provider that can, drop those parts, or set "
        "spec.tools.enforcement: advisory to run without them"
    )


def test_a_fallbacks_guarded_option_names_its_own_field() -> None:
    mine = {**CLAUDE.to_api(), "binary": "my-claude"}
    run = run_of({"tools": {"shell": False}, "fallback": [{"provider": "mine", "with": {"tools": "Bash"}}]})
    with pytest.raises(Rejection) as refused:
        resolve_targets(Reader({"mine": mine}), run)
    assert refused.value.message.startswith('spec.fallback[0].with.tools: provider "mine"')


def test_a_providers_own_policy_applies_to_runs_that_set_none() -> None:
    strict = {**CATALOG["aider"].to_api(), "tools": {"network": False}}
    with pytest.raises(Rejection) as refused:
        resolve_targets(Reader({"aider": strict}), run_of({"provider": "aider"}))
    assert refused.value.reason == "ToolPolicyUnenforceable"


def test_an_advisory_policy_runs_and_warns_for_what_is_not_held() -> None:
    run = run_of({"provider": "aider", "tools": {"enforcement": "advisory", "shell": False}})
    targets = resolve_targets(Reader(), run)
    warning = compute_tool_policy_warning(
        compute_tool_policy(run.spec.tools, targets[0].definition), 1, "aider", targets[0].definition
    )
    assert warning == (
        'attempt 1: provider "aider" cannot enforce spec.tools.shell: false: its definition\'s toolControls '
        "say no option of its CLI holds it; it runs without them (advisory)"
    )
    assert (
        compute_tool_policy_warning(compute_tool_policy(run.spec.tools, CLAUDE), 1, "claude", CLAUDE) is None
    )
    assert (
        compute_tool_policy_warning(compute_tool_policy(None, CATALOG["aider"]), 1, "aider", CATALOG["aider"])
        is None
    )


def test_a_variable_that_would_loosen_the_policy_is_refused() -> None:
    run = run_of(
        {
            "provider": "copilot",
            "tools": {"shell": False},
            "env": [{"name": "COPILOT_ALLOW_ALL", "value": "1"}],
        }
    )
    with pytest.raises(Rejection) as refused:
        resolve_targets(Reader(), run)
    assert refused.value.reason == "ToolPolicyConflict"
    assert refused.value.message.startswith(
        'spec.env.COPILOT_ALLOW_ALL: provider "copilot" enforces the tool policy'
    )


def test_gemini_holds_the_lists_in_an_admin_policy_file_in_its_home() -> None:
    gemini = CATALOG["gemini"]
    assert build_tool_options(policy(shell=False, deny=["x"]), gemini, {"model": "m"}) == {"model": "m"}
    args, files = build_tool_rules(
        policy(allow=["read_file"], deny=["x"], network=False), gemini, ["mcp_d_t"]
    )
    assert args == ["--admin-policy", "$(HARNESS_HOME)/.harness/gemini-policy.toml"]
    rules = tomllib.loads(files[".harness/gemini-policy.toml"])["rule"]
    assert [(r["toolName"], r["decision"], r["priority"]) for r in rules] == [
        ("*", "deny", 900),
        (["read_file", "mcp_d_t"], "allow", 950),  # an MCP server's listed tools join an allow list
        (["x", "web_fetch", "google_web_search"], "deny", 999),  # a denial beats an allowance
    ]
    args, files = build_tool_rules(policy(edits=False), gemini, ["mcp_d_t"])
    assert tomllib.loads(files[".harness/gemini-policy.toml"])["rule"][0]["toolName"] == [
        "write_file",
        "replace",
    ]
    assert build_tool_rules(None, gemini, []) == ([], {})
    assert build_tool_rules(policy(edits=False), CLAUDE, []) == ([], {})
    plan = plan_of(
        run_of({"provider": "gemini", "tools": {"shell": False}}), gemini, 1, "gemini", {}, "p", None
    )
    assert plan.args[:2] == ["--admin-policy", "$(HARNESS_HOME)/.harness/gemini-policy.toml"]
    assert ".harness/gemini-policy.toml" in plan.home_files


def test_pi_takes_its_allow_list_as_one_comma_joined_value_without_extensions() -> None:
    assert build_tool_options(policy(allow=["read", "grep"]), CATALOG["pi"], {}) == {
        "no-extensions": True,
        "tools": "read,grep",
    }


def test_opencode_holds_the_lists_in_its_configurations_permission_map_in_order() -> None:
    opencode = CATALOG["opencode"]
    env = build_tool_env(policy(allow=["read", "bash"], deny=["grep"], shell=False), opencode, ["docs_echo"])
    assert env["OPENCODE_DISABLE_PROJECT_CONFIG"] == "1"  # no workspace opencode.json re-orders the rules
    permission = json.loads(env["OPENCODE_CONFIG_CONTENT"])["permission"]
    # the last matching rule wins: the catch-all first, the allowances, then the denials
    assert list(permission.items()) == [
        ("*", "deny"),
        ("read", "allow"),
        ("docs_echo", "allow"),
        ("grep", "deny"),
        ("bash", "deny"),
    ]
    assert build_tool_env(None, opencode, []) == {}
    assert find_unenforced(policy(allow=["read"], deny=["x"], edits=False), opencode) == []
    run = run_of(
        {
            "provider": "opencode",
            "tools": {"shell": False},
            "env": [{"name": "OPENCODE_PERMISSION", "value": "{}"}],
        }
    )
    with pytest.raises(Rejection) as refused:
        resolve_targets(Reader(), run)
    assert refused.value.reason == "ToolPolicyConflict"
