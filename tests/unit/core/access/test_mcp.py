"""spec.mcpServers: the servers an attempt gets, the CLI's configuration (a secret only as a variable),
the tools it allows, the egress a remote server needs, and a provider that takes none refusing the run."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from tests.attempt_plans import plan_of

from harness_operator.api.v1alpha1 import EgressRule, HarnessRun, McpServer
from harness_operator.catalog import load_builtin_catalog
from harness_operator.core.access.mcp import (
    MCP_REFUSED_CIDRS,
    build_mcp_arguments,
    build_mcp_env,
    build_mcp_home_files,
    build_mcp_tool_names,
    compute_mcp_egress,
    compute_mcp_servers,
    find_mcp_destination_problem,
    find_mcp_problem,
)
from harness_operator.core.access.settings_merge import merge_each
from harness_operator.core.attempt import decide_attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.resolve.resolution import (
    AttemptTarget,
    Rejection,
    find_mcp_destinations_problem,
    resolve_targets,
)

CATALOG = {d.metadata["name"]: d.spec for d in load_builtin_catalog()}
CLAUDE = CATALOG["claude"]
DOCS = {
    "name": "docs",
    "url": "https://mcp.docs.internal/mcp",
    "headers": [{"name": "Authorization", "value": "Bearer $(DOCS_TOKEN)"}],
    "tools": ["search", "fetch"],
}
LOCAL = {"name": "git", "command": ["mcp-server-git", "--read-only"], "tools": ["git_log"]}


def egress_of(run: HarnessRun) -> list[EgressRule]:
    """The declared egress of the run's first attempt with CLAUDE."""
    return decide_attempt(run, AttemptTarget(1, "claude", CLAUDE, 1), OperatorConfig()).egress


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
    args = plan_of(run, CLAUDE, 1, "claude", {}, "p", None).args
    assert args[0] == "--mcp-config" and args[2:5] == ["--strict-mcp-config", "-p", "p"]
    pairs = list(zip(args[5::2], args[6::2], strict=False))
    assert ("--allowed-tools", "mcp__docs__search") in pairs and (
        "--allowed-tools",
        "mcp__docs__fetch",
    ) in pairs
    assert ("--disallowed-tools", "mcp__docs__fetch") in pairs  # Claude Code: a denied tool is removed
    assert "DOCS_TOKEN" not in " ".join(a for a in args if "${DOCS_TOKEN}" not in a)
    plain = plan_of(run_of(), CLAUDE, 1, "claude", {}, "p", None).args
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
    provider_mode = egress_of(run_of(mcpServers=[DOCS]))
    assert provider_mode[-1] == EgressRule(host="mcp.docs.internal", ports=[443])
    allowlist = run_of(
        mcpServers=[DOCS], sandbox={"networkPolicy": "allowlist", "egress": [{"cidr": "10.0.0.0/8"}]}
    )
    assert egress_of(allowlist) == [
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
    plan = plan_of(
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
    plan = plan_of(
        run_of(provider="opencode", mcpServers=[DOCS], env=[own]), opencode, 1, "opencode", {}, "p", None
    )
    merged = json.loads(next(e.value for e in plan.env if e.name == "OPENCODE_CONFIG_CONTENT"))
    assert list(merged) == ["provider", "mcp", "tools"]


def test_the_runner_checks_only_the_credentials_opencode_pastes_into_its_json() -> None:
    grant = {"env": "DOCS_TOKEN", "secretKeyRef": {"name": "docs", "key": "token"}}
    other = {"env": "OTHER", "secretKeyRef": {"name": "other", "key": "token"}}
    for provider, expected in [("opencode", ["DOCS_TOKEN"]), ("claude", []), ("gemini", [])]:
        run = run_of(provider=provider, mcpServers=[DOCS, LOCAL], credentials=[grant, other])
        plan = plan_of(run, CATALOG[provider], 1, provider, {}, "p", None)
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
    plan = plan_of(run, CATALOG[provider], 1, provider, {}, "p", None)
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
    plan = plan_of(denied, CATALOG[provider], 1, provider, {}, "p", None)
    assert plan.acp is not None and plan.acp.mcp_servers[0].gate_args[:2] == ["--tool=fetch", "--url"]
    assert plan.acp.mcp_tools == [names[0].replace("search", "fetch")]


# Where a tenant's MCP URL would open its sandbox's way out (red team, issue 49 item 13), and what stays.
REFUSED_URLS = {
    "http://169.254.169.254/": "points at 169.254.169.254",  # a cloud's metadata service
    "http://10.88.0.1:10250/": "points at 10.88.0.1",  # the node's kubelet
    "http://127.0.0.1:8080/mcp": "points at 127.0.0.1",
    "http://[::1]/": "points at ::1",
    "http://[fe80::1]/": "points at fe80::1",
    "http://[::ffff:169.254.169.254]/": "points at ::ffff:169.254.169.254",  # IPv4-mapped
    "http://[64:ff9b::a9fe:a9fe]/": "points at 64:ff9b::a9fe:a9fe",  # NAT64 of the metadata service
    "http://100.64.0.1/": "points at 100.64.0.1",  # shared (CGNAT)
    "http://x@169.254.169.254:80/": "points at 169.254.169.254",  # user info before the host
    "http://2852039166/": 'names host "2852039166"',  # 169.254.169.254 as one number
    "http://0xa9fea9fe/": 'names host "0xa9fea9fe"',
    "http://169.254.43518/": 'names host "169.254.43518"',
    "http://kubernetes/": 'names host "kubernetes"',  # single label: the resolver's search path
    "http://kubernetes.default.svc/": 'names host "kubernetes.default.svc"',
    "http://api.team-a.svc.cluster.local:8080/": 'names host "api.team-a.svc.cluster.local"',
    "http://localhost/": 'names host "localhost"',
    "http://metadata.google.internal/": 'names host "metadata.google.internal"',
}


def problem_of(url: str, cidrs: tuple[str, ...] = (), hosts: tuple[str, ...] = ()) -> str | None:
    run = run_of(mcpServers=[{**DOCS, "url": url}])
    return find_mcp_destination_problem(run, "claude", CLAUDE, cidrs, hosts)


@pytest.mark.parametrize(("url", "what"), REFUSED_URLS.items(), ids=list(REFUSED_URLS))
def test_an_mcp_url_into_the_node_the_cluster_or_a_metadata_service_is_refused(url: str, what: str) -> None:
    assert problem_of(url) == (
        f'spec.mcpServers[0].url: "{url}" {what}'
        + (
            ", an address MCP servers may not use in this cluster (loopback, link-local such as metadata "
            "services, private, shared or reserved: the node, pods and Services)"
            if what.startswith("points")
            else ", which MCP servers may not use in this cluster (a name inside the cluster or of a metadata "
            "service: single-label, localhost, *.svc, *.cluster.local; or not a DNS name)"
        )
        + "; use the server's public DNS name, or ask the platform team to allow it (chart value "
        "mcp.allowedCIDRs or mcp.allowedHosts)"
    )


def test_public_servers_pass_and_the_platform_allows_its_own() -> None:
    for url in ("https://mcp.docs.internal/mcp", "https://mcp.example.com:8443/", "http://1.1.1.1/"):
        assert problem_of(url) is None, url
    assert problem_of("http://10.88.0.1:9000/mcp", cidrs=("10.88.0.1/32",)) is None
    assert problem_of("http://10.88.0.2:9000/mcp", cidrs=("10.88.0.1/32",)) is not None
    assert problem_of("http://docs.tools.svc.cluster.local/", hosts=("*.tools.svc.cluster.local",)) is None
    assert (
        problem_of("http://docs.other.svc.cluster.local/", hosts=("*.tools.svc.cluster.local",)) is not None
    )
    assert problem_of("http://mcp/", hosts=("mcp",)) is None


def test_a_definitions_server_is_named_as_the_definitions_and_a_runs_of_the_same_name_replaces_it() -> None:
    definition = CLAUDE.model_copy(
        update={"mcp_servers": [McpServer.model_validate({**DOCS, "url": "http://169.254.169.254/"})]}
    )
    message = find_mcp_destination_problem(run_of(), "team-claude", definition, (), ())
    assert message is not None
    assert message.startswith(
        'provider "team-claude": its definition\'s spec.mcpServers[0].url: "http://169.254.169.254/" points at'
    )
    assert find_mcp_destination_problem(run_of(mcpServers=[DOCS]), "team-claude", definition, (), ()) is None


def test_the_operator_refuses_what_the_chart_allows_no_more() -> None:
    """The chart's admission policy refuses the same ranges (templates/_admission.tpl)."""
    template = (
        Path(__file__).resolve().parents[4] / "charts/harness-operator/templates/_admission.tpl"
    ).read_text()
    listed = template.split('define "harness-operator.admission.mcpRefusedCIDRs" -}}\n', 1)[1].split("\n", 1)[
        0
    ]
    assert json.loads(listed) == [str(n) for n in MCP_REFUSED_CIDRS]


def test_the_platforms_allowances_come_from_the_chart_and_a_bad_cidr_stops_the_operator() -> None:
    env = {"HARNESS_MCP_ALLOWED_CIDRS": "10.20.0.0/16, fd00::/8", "HARNESS_MCP_ALLOWED_HOSTS": "*.tools.svc"}
    config = OperatorConfig.from_env(env)
    assert config.mcp_allowed_cidrs == ("10.20.0.0/16", "fd00::/8")
    assert config.mcp_allowed_hosts == ("*.tools.svc",)
    run = run_of(mcpServers=[{**DOCS, "url": "http://10.20.3.4/"}])
    assert find_mcp_destinations_problem(run, resolve_targets(Reader(), run), config) is None
    assert find_mcp_destinations_problem(run, resolve_targets(Reader(), run), OperatorConfig()) is not None
    with pytest.raises(
        ValueError, match=re.escape("HARNESS_MCP_ALLOWED_CIDRS: '10.20.0.0/33' is not a CIDR")
    ):
        OperatorConfig.from_env({"HARNESS_MCP_ALLOWED_CIDRS": "10.20.0.0/33"})
