"""spec.mcpServers on the cluster: the real Claude Code in its catalog image calls a remote MCP server (a
stub on the node), reached through the egress the operator opens for it, with the header the run names;
a tool policy that denies the server's tool keeps the call from reaching it. Codex, Gemini CLI, Qwen
Code, OpenCode and the three ACP adapters (through the server's gate), each in its catalog image, call it
too."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tests.stubs.anthropic import AnthropicStub
from tests.stubs.mcp import McpStub

from .conftest import STUB_HOST, Runs, install_chart
from .test_agents import ROUTES, agent_run

TOKEN = "mcp-e2e-token-7"
GRANT = {"env": "DOCS_TOKEN", "secretKeyRef": {"name": "docs-token", "key": "token"}}


@pytest.fixture(scope="module", autouse=True)
def stub_host_allowed(release: str) -> Iterator[None]:
    """The MCP stub listens on the node's address, which MCP servers may not use unless the platform
    allows it (chart value mcp.allowedCIDRs), as a platform allows its own internal servers."""
    install_chart("--set", f"mcp.allowedCIDRs={{{STUB_HOST}/32}}")
    try:
        yield
    finally:
        install_chart()


def docs_server(url: str) -> dict[str, Any]:
    """The run's docs server at `url`: its echo tool, the token as its bearer."""
    return {
        "name": "docs",
        "url": url,
        "headers": [{"name": "Authorization", "value": "Bearer $(DOCS_TOKEN)"}],
        "tools": ["echo"],
    }


def test_a_run_calls_its_mcp_server_and_a_denied_tool_is_never_called(runs: Runs) -> None:
    server = McpStub(host=STUB_HOST).start()
    model = AnthropicStub(mode="call", host=STUB_HOST, call=("mcp__docs__echo", {"text": "hello"})).start()
    try:
        runs.secret("docs-token", "token", TOKEN)
        mcp = docs_server(server.url)
        spec = agent_run(runs, "claude", ROUTES["claude"](model.base_url), model.port, mcpServers=[mcp])
        spec["credentials"] = [*spec["credentials"], GRANT]
        runs.create("mcp-call", spec)
        called = runs.wait_finished("mcp-call")
        calls = server.tool_calls()
        model.stop()
        model = AnthropicStub(
            mode="call", host=STUB_HOST, call=("mcp__docs__echo", {"text": "again"})
        ).start()
        denied_spec = agent_run(
            runs, "claude", ROUTES["claude"](model.base_url), model.port, mcpServers=[mcp]
        )
        denied_spec |= {
            "credentials": [*denied_spec["credentials"], GRANT],
            "tools": {"deny": ["mcp__docs__echo"]},
        }
        runs.create("mcp-denied", denied_spec)
        denied = runs.wait_finished("mcp-denied")
        calls_after = server.tool_calls()
    finally:
        model.stop()
        server.stop()
    assert called["reason"] == "Succeeded", runs.describe("mcp-call")
    assert calls == [{"text": "hello"}]
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    assert all(r.auth_sha256 == [digest] for r in server.requests if isinstance(r.body, dict))
    assert denied["reason"] == "Succeeded", runs.describe("mcp-denied")
    assert calls_after == calls  # the denied run's call never reached the server
    assert denied["attempts"][0]["deniedTools"] == ["mcp__docs__echo"]


# How each CLI's model calls the server's echo: the tool's name, and Codex's Responses API namespace.
CALLS: dict[str, tuple[str, dict[str, str]]] = {
    "codex": ("echo", {"namespace": "mcp__docs"}),
    "gemini": ("mcp_docs_echo", {}),
    "qwen": ("mcp__docs__echo", {}),
    "opencode": ("docs_echo", {}),
    # the ACP adapters start the server's gate (runner/mcp_gate.py) in the agent's container
    "claude-acp": ("mcp__docs__echo", {}),
    "codex-acp": ("echo", {"namespace": "mcp__docs"}),
    "gemini-acp": ("mcp_docs_echo", {}),
}


@pytest.mark.parametrize("provider", sorted(CALLS))
def test_codex_gemini_qwen_opencode_and_the_acp_adapters_call_the_runs_mcp_server(
    provider: str, runs: Runs, stub: Callable[..., Any], git_repo: Callable[..., Any]
) -> None:
    tool, extra = CALLS[provider]
    model = stub(ROUTES[provider]("").vendor, "call", call=(tool, {"text": "hello"}), **extra)
    route = ROUTES[provider](model.base_url)
    git = git_repo(route.files) if route.files else None
    server = McpStub(host=STUB_HOST).start()
    try:
        runs.secret("docs-token", "token", TOKEN)
        spec = agent_run(runs, provider, route, model.port, git, mcpServers=[docs_server(server.url)])
        spec["credentials"] = [*spec["credentials"], GRANT]
        runs.create("mcp", spec)
        status = runs.wait_finished("mcp")
    finally:
        server.stop()
    assert status["reason"] == "Succeeded", runs.describe("mcp")
    assert server.tool_calls() == [{"text": "hello"}]
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    assert all(r.auth_sha256 == [digest] for r in server.requests if isinstance(r.body, dict))
