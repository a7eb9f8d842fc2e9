"""spec.mcpServers on the real Claude Code CLI through `harnessctl run`: the agent calls a remote MCP server
(a stub) with the header the run names, its secret expanded by the CLI (never in argv or the plan), and a
tool policy that denies the server's tool keeps the call from reaching it."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from tests.integration_cli.harnessctl import harnessctl_run, require_cli
from tests.stubs.anthropic import AnthropicStub
from tests.stubs.mcp import McpStub

pytestmark = pytest.mark.cli

CLAUDE = require_cli("claude", "claude")
TOKEN = "mcp-token-e2e-42"

MANIFEST = """
apiVersion: agentharness.dev/v1alpha1
kind: HarnessRun
metadata: {{name: mcp, namespace: default}}
spec:
  provider: claude
  prompt: Echo hello through the docs server.
  mcpServers:
    - name: docs
      url: "{url}"
      headers: [{{name: Authorization, value: "Bearer $(DOCS_TOKEN)"}}]
      tools: [echo]
  credentials:
    - {{env: DOCS_TOKEN, secretKeyRef: {{name: docs-token, key: token}}}}
  {tools}
  workspace: {{workingDir: {workdir}}}
  env:
    - {{name: ANTHROPIC_BASE_URL, value: "{base_url}"}}
    - {{name: CLAUDE_CODE_MAX_RETRIES, value: "0"}}
  limits: {{timeoutSeconds: 120}}
"""


def _run(tmp_path: Path, tools: str = "") -> tuple[dict, McpStub, str]:
    home = tmp_path / "home"
    home.mkdir()
    with (
        McpStub() as server,
        AnthropicStub(mode="call", call=("mcp__docs__echo", {"text": "hello"})) as model,
    ):
        manifest = MANIFEST.format(
            url=server.url, tools=tools, workdir=tmp_path / "work", base_url=model.base_url
        )
        result, status = harnessctl_run(
            manifest, CLAUDE, home, {"ANTHROPIC_API_KEY": "sk-test-mcp", "DOCS_TOKEN": TOKEN}
        )
    assert result.returncode == 0, result.stderr
    assert TOKEN not in result.stdout + result.stderr
    return status, server, result.stderr


def test_the_agent_calls_the_runs_mcp_server_with_its_secret_header(tmp_path: Path) -> None:
    status, server, _ = _run(tmp_path)
    assert server.tool_calls() == [{"text": "hello"}]
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    assert all(r.auth_sha256 == [digest] for r in server.requests if isinstance(r.body, dict))
    assert status["phase"] == "Succeeded" and "deniedTools" not in status["attempts"][0]


def test_a_denied_mcp_tool_is_never_called(tmp_path: Path) -> None:
    status, server, _ = _run(tmp_path, "tools: {deny: [mcp__docs__echo]}")
    assert server.tool_calls() == []
    assert status["attempts"][0]["deniedTools"] == ["mcp__docs__echo"]
