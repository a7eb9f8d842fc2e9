"""spec.mcpServers: the servers an attempt gets, the CLI's configuration (a secret only as a variable),
the tools it allows, the egress a remote server needs, and a provider that takes none refusing the run."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from harness_operator.api.v1alpha1 import EgressRule, HarnessRun, McpServer
from harness_operator.catalog import load_builtin_catalog
from harness_operator.core.egress import compute_egress_rules
from harness_operator.core.mcp import (
    build_mcp_arguments,
    build_mcp_env,
    build_mcp_home_files,
    build_mcp_tool_names,
    compute_mcp_egress,
    compute_mcp_servers,
    find_mcp_problem,
)
from harness_operator.core.planning import build_plan
from harness_operator.core.resolution import Rejection, resolve_targets
from harness_operator.core.settings_merge import merge_each

CATALOG = {d.metadata["name"]: d.spec for d in load_builtin_catalog()}
CLAUDE = CATALOG["claude"]
DOCS = {
    "name": "docs",
    "url": "https://mcp.docs.internal/mcp",
    "headers": [{"name": "Authorization", "value": "Bearer $(DOCS_TOKEN)"}],
    "tools": ["search", "fetch"],
}
LOCAL = {"name": "git", "command": ["mcp-server-git", "--read-only"], "tools": ["git_log"]}


def run_of(**spec: Any) -> HarnessRun:
    body = {"provider": "claude", "prompt": "p", **spec}
    return HarnessRun.model_validate({"metadata": {"name": "r", "namespace": "ns"}, "spec": body})


class Reader:
    def definition(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        spec = CATALOG.get(name) if namespace is None else None
        return {"spec": spec.to_api()} if spec else None


def test_claude_gets_one_config_with_variables_not_secrets() -> None:
    servers = [McpServer.model_validate(DOCS), McpServer.model_validate(LOCAL)]
    args = build_mcp_arguments(servers, CLAUDE)
    assert args[0] == "--mcp-config" and args[2:] == ["--strict-mcp-config"]
    assert json.loads(args[1]) == {
        "mcpServers": {
            "docs": {
                "type": "http",
                "url": "https://mcp.docs.internal/mcp",
                "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"},
            },
            "git": {"type": "stdio", "command": "mcp-server-git", "args": ["--read-only"]},
        }
    }
    assert build_mcp_tool_names(servers, CLAUDE) == [
        "mcp__docs__search",
        "mcp__docs__fetch",
        "mcp__git__git_log",
    ]
    assert build_mcp_arguments([], CLAUDE) == [] and build_mcp_tool_names(servers, CATALOG["aider"]) == []


def test_the_plan_allows_the_listed_tools_and_a_policy_still_denies() -> None:
    run = run_of(mcpServers=[DOCS], tools={"deny": ["mcp__docs__fetch"]})
    args = build_plan(run, CLAUDE, 1, "claude", {}, "p", None).args
    assert args[0] == "--mcp-config" and args[2:5] == ["--strict-mcp-config", "-p", "p"]
    pairs = list(zip(args[5::2], args[6::2], strict=False))
    assert ("--allowed-tools", "mcp__docs__search") in pairs and (
        "--allowed-tools",
        "mcp__docs__fetch",
    ) in pairs
    assert ("--disallowed-tools", "mcp__docs__fetch") in pairs  # Claude Code: a denied tool is removed
    assert "DOCS_TOKEN" not in " ".join(a for a in args if "${DOCS_TOKEN}" not in a)
    plain = build_plan(run_of(), CLAUDE, 1, "claude", {}, "p", None).args
    assert "--mcp-config" not in plain and "--allowed-tools" not in plain


def test_a_runs_server_replaces_its_providers_of_the_same_name() -> None:
    provider = CLAUDE.model_copy(
        update={"mcp_servers": [McpServer.model_validate(LOCAL), McpServer.model_validate(DOCS)]}
    )
    mine = {**DOCS, "url": "https://mcp.mine.internal/mcp"}
    servers = compute_mcp_servers(run_of(mcpServers=[mine]), provider)
    assert [(s.name, s.url) for s in servers] == [("git", None), ("docs", "https://mcp.mine.internal/mcp")]


def test_a_remote_server_joins_the_attempts_egress() -> None:
    servers = [
        McpServer.model_validate(DOCS),
        McpServer.model_validate({**DOCS, "name": "ip", "url": "http://10.1.2.3:8080/mcp", "headers": []}),
        McpServer.model_validate(LOCAL),
    ]
    assert compute_mcp_egress(servers) == [
        EgressRule(host="mcp.docs.internal", ports=[443]),
        EgressRule(cidr="10.1.2.3/32", ports=[8080]),
    ]
    provider_mode = compute_egress_rules(run_of(mcpServers=[DOCS]), CLAUDE)
    assert provider_mode[-1] == EgressRule(host="mcp.docs.internal", ports=[443])
    allowlist = run_of(
        mcpServers=[DOCS], sandbox={"networkPolicy": "allowlist", "egress": [{"cidr": "10.0.0.0/8"}]}
    )
    assert compute_egress_rules(allowlist, CLAUDE) == [
        EgressRule(cidr="10.0.0.0/8"),
        EgressRule(host="mcp.docs.internal", ports=[443]),
    ]


def test_a_provider_that_takes_no_mcp_servers_refuses_the_run() -> None:
    with pytest.raises(Rejection) as refused:
        resolve_targets(Reader(), run_of(mcpServers=[DOCS], fallback=[{"provider": "aider"}]))
    assert refused.value.reason == "McpUnsupported"
    assert refused.value.message.startswith('spec.mcpServers: provider "aider" takes no MCP servers')
    assert [t.provider for t in resolve_targets(Reader(), run_of(mcpServers=[DOCS]))] == ["claude"]
    assert [
        t.provider for t in resolve_targets(Reader(), run_of(mcpServers=[DOCS], provider="codex-acp"))
    ] == ["codex-acp"]


@pytest.mark.parametrize(
    "server",
    [
        {"name": "Docs", "url": "https://x/mcp", "tools": ["x"]},
        {"name": "docs", "url": "ftp://x/mcp", "tools": ["x"]},
        {"name": "docs", "url": "https://x/mcp", "tools": []},
    ],
)
def test_a_malformed_server_is_refused(server: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        McpServer.model_validate(server)


def test_copilot_lists_each_servers_tools_and_names_them_by_permission_kind() -> None:
    copilot = CATALOG["copilot"]
    servers = [McpServer.model_validate(DOCS)]
    args = build_mcp_arguments(servers, copilot)
    assert args[0] == "--additional-mcp-config" and len(args) == 2
    assert json.loads(args[1])["mcpServers"]["docs"]["tools"] == ["search", "fetch"]
    assert json.loads(args[1])["mcpServers"]["docs"]["headers"] == {"Authorization": "Bearer ${DOCS_TOKEN}"}
    assert build_mcp_tool_names(servers, copilot) == ["docs(search)", "docs(fetch)"]
    assert "tools" not in json.loads(build_mcp_arguments(servers, CLAUDE)[1])["mcpServers"]["docs"]


def test_codex_gets_one_inline_table_per_server_its_tools_enabled_approved_and_required() -> None:
    codex = CATALOG["codex"]
    key = {
        **DOCS,
        "name": "key",
        "headers": [{"name": "X-Api-Key", "value": "$(KEY)"}, {"name": "X-Team", "value": 'a"b'}],
    }
    servers = [McpServer.model_validate(s) for s in (DOCS, LOCAL, key)]
    assert build_mcp_arguments(servers, codex) == [
        "-c",
        'mcp_servers.docs={"url"="https://mcp.docs.internal/mcp", "bearer_token_env_var"="DOCS_TOKEN", '
        '"enabled_tools"=["search", "fetch"], "default_tools_approval_mode"="approve", "required"=true}',
        "-c",
        'mcp_servers.git={"command"="mcp-server-git", "args"=["--read-only"], "enabled_tools"=["git_log"], '
        '"default_tools_approval_mode"="approve", "required"=true}',
        "-c",
        'mcp_servers.key={"url"="https://mcp.docs.internal/mcp", "env_http_headers"={"X-Api-Key"="KEY"}, '
        '"http_headers"={"X-Team"="a\\"b"}, "enabled_tools"=["search", "fetch"], '
        '"default_tools_approval_mode"="approve", "required"=true}',
    ]
    assert find_mcp_problem(servers, codex.mcp) is None  # type: ignore[arg-type]


def test_codex_refuses_a_header_that_mixes_text_and_a_variable() -> None:
    mixed = {**DOCS, "headers": [{"name": "X-Auth", "value": "Token $(DOCS_TOKEN)"}]}
    problem = find_mcp_problem([McpServer.model_validate(mixed)], CATALOG["codex"].mcp)  # type: ignore[arg-type]
    assert problem is not None and "header X-Auth mixes text and variables" in problem
    assert find_mcp_problem([McpServer.model_validate(mixed)], CLAUDE.mcp) is None  # type: ignore[arg-type]
    with pytest.raises(Rejection) as refused:
        resolve_targets(Reader(), run_of(provider="codex", mcpServers=[mixed]))
    assert refused.value.reason == "McpUnsupported" and refused.value.message.startswith("provider 'codex': ")


def test_gemini_and_qwen_get_their_servers_in_the_home_settings_with_the_routes_auth() -> None:
    servers = [McpServer.model_validate(DOCS), McpServer.model_validate(LOCAL)]
    for name, path in (("gemini", ".gemini/settings.json"), ("qwen", ".qwen/settings.json")):
        definition = CATALOG[name]
        assert build_mcp_arguments(servers, definition) == []
        files = build_mcp_home_files(servers, definition)
        assert list(files) == [path]
        assert json.loads(files[path]) == {
            "mcpServers": {
                "docs": {
                    "httpUrl": "https://mcp.docs.internal/mcp",
                    "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"},
                    "trust": True,
                    "includeTools": ["search", "fetch"],
                },
                "git": {
                    "command": "mcp-server-git",
                    "args": ["--read-only"],
                    "trust": True,
                    "includeTools": ["git_log"],
                },
            }
        }
        assert build_mcp_home_files([], definition) == {} and build_mcp_home_files(servers, CLAUDE) == {}
    plan = build_plan(
        run_of(provider="gemini", mcpServers=[DOCS]), CATALOG["gemini"], 1, "gemini", {}, "p", None
    )
    route = CATALOG["gemini"].model_route
    assert route is not None
    settings = json.loads(merge_each(plan.home_files, route.home_files)[".gemini/settings.json"])
    assert set(settings) == {"mcpServers", "security"}  # the route's auth beside the servers
    assert build_mcp_tool_names(servers[:1], CATALOG["gemini"]) == ["mcp_docs_search", "mcp_docs_fetch"]


def test_opencode_gets_its_servers_in_its_configuration_beside_the_runs_own() -> None:
    opencode = CATALOG["opencode"]
    servers = [McpServer.model_validate(DOCS), McpServer.model_validate(LOCAL)]
    assert build_mcp_arguments(servers, opencode) == []
    config = json.loads(build_mcp_env(servers, opencode)["OPENCODE_CONFIG_CONTENT"])
    assert config["mcp"] == {
        "docs": {
            "type": "remote",
            "url": "https://mcp.docs.internal/mcp",
            "headers": {"Authorization": "Bearer {env:DOCS_TOKEN}"},
        },
        "git": {"type": "local", "command": ["mcp-server-git", "--read-only"]},
    }
    # each server's other tools off, its listed ones on after (the last matching rule wins)
    assert list(config["tools"].items()) == [
        ("docs_*", False),
        ("docs_search", True),
        ("docs_fetch", True),
        ("git_*", False),
        ("git_git_log", True),
    ]
    own = {"name": "OPENCODE_CONFIG_CONTENT", "value": '{"provider": {"anthropic": {}}}'}
    plan = build_plan(
        run_of(provider="opencode", mcpServers=[DOCS], env=[own]), opencode, 1, "opencode", {}, "p", None
    )
    merged = json.loads(next(e.value for e in plan.env if e.name == "OPENCODE_CONFIG_CONTENT"))
    assert list(merged) == ["provider", "mcp", "tools"]


def test_the_runner_checks_only_the_credentials_opencode_pastes_into_its_json() -> None:
    grant = {"env": "DOCS_TOKEN", "secretKeyRef": {"name": "docs", "key": "token"}}
    other = {"env": "OTHER", "secretKeyRef": {"name": "other", "key": "token"}}
    for provider, expected in [("opencode", ["DOCS_TOKEN"]), ("claude", []), ("gemini", [])]:
        run = run_of(provider=provider, mcpServers=[DOCS, LOCAL], credentials=[grant, other])
        plan = build_plan(run, CATALOG[provider], 1, provider, {}, "p", None)
        assert plan.raw_json_envs == expected, provider
        assert {"DOCS_TOKEN", "OTHER"} <= set(plan.credential_envs)


@pytest.mark.parametrize(
    ("provider", "names"),
    [
        ("claude-acp", ["mcp__docs__search", "mcp__git__git_log"]),
        ("gemini-acp", ["search (docs MCP Server)", "git_log (git MCP Server)"]),
        ("codex-acp", ["Tool: docs/search", "Tool: git/git_log"]),
    ],
)
def test_an_acp_agent_gets_each_server_behind_its_gate_and_a_policy_still_denies(
    provider: str, names: list[str]
) -> None:
    run = run_of(provider=provider, mcpServers=[DOCS, LOCAL])
    plan = build_plan(run, CATALOG[provider], 1, provider, {}, "p", None)
    assert plan.acp is not None
    docs, git = plan.acp.mcp_servers
    assert (docs.name, docs.env) == ("docs", ["DOCS_TOKEN"])
    assert docs.gate_args == [
        "--tool=search",
        "--tool=fetch",
        "--url",
        "https://mcp.docs.internal/mcp",
        "--header",
        "Authorization: Bearer $(DOCS_TOKEN)",  # the variable, read by the gate: no secret in the plan
    ]
    assert (git.gate_args, git.env) == (["--tool=git_log", "--", "mcp-server-git", "--read-only"], [])
    assert plan.acp.mcp_tools == [names[0], names[0].replace("search", "fetch"), names[1]]
    assert "mcp" not in " ".join(plan.args) and plan.home_files == {}  # nothing of it in argv or files
    denied = run_of(provider=provider, mcpServers=[DOCS], tools={"deny": [names[0]]})
    plan = build_plan(denied, CATALOG[provider], 1, provider, {}, "p", None)
    assert plan.acp is not None and plan.acp.mcp_servers[0].gate_args[:2] == ["--tool=fetch", "--url"]
    assert plan.acp.mcp_tools == [names[0].replace("search", "fetch")]
