"""spec.mcpServers on the real Claude Code (through `harnessctl run`) and Copilot (planned by the operator,
run by the runner) CLIs: the agent calls a remote MCP server (a stub) with the header the run names, its
secret expanded by the CLI (never in argv or the plan), and a tool policy that denies the server's tool
keeps the call from reaching it."""

from __future__ import annotations

import hashlib
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.attempt_plans import plan_of
from tests.fixtures.cli import capture as fx
from tests.integration_cli.harnessctl import harnessctl_run, require_cli
from tests.stubs.anthropic import AnthropicStub
from tests.stubs.gemini import GeminiStub
from tests.stubs.mcp import McpStub
from tests.stubs.openai import OpenAIStub

from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.catalog import load_builtin_catalog
from harness_operator.core.access.settings_merge import merge_each
from harness_operator.runner.attempt import AttemptResult
from harness_operator.runner.executor import execute

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


def _copilot(tmp_path: Path, tools: dict[str, Any]) -> tuple[AttemptResult, McpStub]:
    """A Copilot attempt (BYOK against the OpenAI stub) planned by the operator, with the docs server."""
    copilot = require_cli("copilot", "copilot")
    assert copilot is not None
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir(parents=True)
    home.mkdir(parents=True)
    with McpStub() as server, OpenAIStub(mode="call", call=("docs-echo", {"text": "hello"})) as model:
        env = [
            {"name": k, "value": v.replace("{base_url}", model.base_url)} for k, v in fx.COPILOT_ENV.items()
        ]
        mcp = {
            "name": "docs",
            "url": server.url,
            "headers": [{"name": "Authorization", "value": "Bearer $(DOCS_TOKEN)"}],
            "tools": ["echo"],
        }
        spec = {
            "provider": "copilot",
            "prompt": "Echo hello.",
            "mcpServers": [mcp],
            "tools": tools,
            "env": env,
        }
        spec["workspace"] = {"workingDir": str(work)}
        spec["credentials"] = [{"env": "DOCS_TOKEN", "secretKeyRef": {"name": "docs-token", "key": "token"}}]
        run = HarnessRun.model_validate({"metadata": {"name": "r", "namespace": "ns"}, "spec": spec})
        definition = next(d.spec for d in load_builtin_catalog() if d.metadata["name"] == "copilot")
        plan = plan_of(run, definition, 1, "copilot", {}, "Echo hello.", None)
        assert TOKEN not in " ".join(plan.args)
        base = {"PATH": f"{Path(copilot).parent}:/usr/bin:/bin", "HOME": str(home)}
        keys = {"COPILOT_PROVIDER_API_KEY": "sk-test-mcp", "DOCS_TOKEN": TOKEN}
        result = execute(plan, keys, base_env=base, stderr=io.BytesIO())
    assert result.exit_code == 0, result.message
    return result, server


def test_copilot_calls_the_runs_mcp_server_and_a_denied_tool_is_never_called(tmp_path: Path) -> None:
    result, server = _copilot(tmp_path / "open", {})
    assert server.tool_calls() == [{"text": "hello"}]
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    assert all(r.auth_sha256 == [digest] for r in server.requests if isinstance(r.body, dict))
    result, server = _copilot(tmp_path / "denied", {"deny": ["docs(echo)"]})
    assert server.tool_calls() == []
    assert result.report.denied_tools == ("docs-echo",)


LOCAL = """
apiVersion: agentharness.dev/v1alpha1
kind: HarnessRun
metadata: {{name: mcp-local, namespace: default}}
spec:
  provider: claude
  prompt: Echo hello through the local server.
  mcpServers:
    - name: local
      command: ["{python}", "{server}", "{log}"]
      tools: [echo]
  workspace: {{workingDir: {workdir}}}
  env:
    - {{name: ANTHROPIC_BASE_URL, value: "{base_url}"}}
    - {{name: CLAUDE_CODE_MAX_RETRIES, value: "0"}}
  limits: {{timeoutSeconds: 120}}
"""


def test_claude_starts_a_local_mcp_server_and_the_agent_calls_it(tmp_path: Path) -> None:
    home, log = tmp_path / "home", tmp_path / "calls.jsonl"
    home.mkdir()
    server = Path(__file__).parents[1] / "fakes" / "mcp_stdio.py"
    with AnthropicStub(mode="call", call=("mcp__local__echo", {"text": "hello"})) as model:
        manifest = LOCAL.format(
            python=sys.executable, server=server, log=log, workdir=tmp_path / "work", base_url=model.base_url
        )
        result, status = harnessctl_run(manifest, CLAUDE, home, {"ANTHROPIC_API_KEY": "sk-test-mcp"})
    assert result.returncode == 0, result.stderr
    assert status["phase"] == "Succeeded"
    assert [json.loads(line) for line in log.read_text().splitlines()] == [{"text": "hello"}]


def _dirs(tmp_path: Path) -> tuple[Path, Path]:
    """An attempt's workspace and home, made."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir(parents=True)
    home.mkdir(parents=True)
    return work, home


def _codex(tmp_path: Path, server: dict[str, Any]) -> tuple[AttemptResult, list]:
    """A Codex attempt planned by the operator with `server` (the stub's provider passed as the model
    gateway's route passes it), its model calling the server's echo: the result and the model calls."""
    codex = require_cli("codex", "codex")
    assert codex is not None
    work, home = _dirs(tmp_path)
    spec = {
        "provider": "codex",
        "prompt": "Echo hello.",
        "mcpServers": [server],
        "workspace": {"workingDir": str(work)},
        "credentials": [{"env": "DOCS_TOKEN", "secretKeyRef": {"name": "docs-token", "key": "token"}}],
    }
    run = HarnessRun.model_validate({"metadata": {"name": "r", "namespace": "ns"}, "spec": spec})
    definition = next(d.spec for d in load_builtin_catalog() if d.metadata["name"] == "codex")
    call = ("echo", {"text": "hello"})
    with OpenAIStub(mode="call", call=call, namespace=f"mcp__{server['name']}") as model:
        provider = (
            f'{{name="stub", base_url="{model.base_url}/v1", env_key="OPENAI_API_KEY", wire_api="responses"}}'
        )
        route = {"config": ["model_provider=stub", f"model_providers.stub={provider}"]}
        plan = plan_of(run, definition, 1, "codex", route, "Echo hello.", None)
        assert TOKEN not in " ".join(plan.args)
        base = {"PATH": f"{Path(codex).parent}:/usr/bin:/bin", "HOME": str(home)}
        keys = {"OPENAI_API_KEY": "sk-test-mcp", "DOCS_TOKEN": TOKEN}
        result = execute(plan, keys, base_env=base, stderr=io.BytesIO())
        calls = [c.body for c in model.model_calls()]
    return result, calls


def test_codex_calls_the_runs_mcp_server_with_its_bearer_token(tmp_path: Path) -> None:
    with McpStub() as server:
        docs = {
            "name": "docs",
            "url": server.url,
            "headers": [{"name": "Authorization", "value": "Bearer $(DOCS_TOKEN)"}],
            "tools": ["echo"],
        }
        result, _ = _codex(tmp_path, docs)
    assert result.exit_code == 0, result.message
    assert server.tool_calls() == [{"text": "hello"}]
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    assert all(r.auth_sha256 == [digest] for r in server.requests if isinstance(r.body, dict))


def test_codex_never_calls_a_tool_the_server_entry_does_not_list(tmp_path: Path) -> None:
    with McpStub() as server:
        docs = {"name": "docs", "url": server.url, "tools": ["search"]}
        result, calls = _codex(tmp_path, docs)
    assert result.exit_code == 0, result.message
    assert server.rpc_calls("tools/list") and server.tool_calls() == []
    answers = [
        str(item.get("output"))
        for call in calls[1:]
        for item in call.get("input") or []
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]
    assert answers and "unsupported call" in answers[0]


def test_codex_starts_a_local_mcp_server_and_the_agent_calls_it(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    server = Path(__file__).parents[1] / "fakes" / "mcp_stdio.py"
    local = {"name": "local", "command": [sys.executable, str(server), str(log)], "tools": ["echo"]}
    result, _ = _codex(tmp_path, local)
    assert result.exit_code == 0, result.message
    assert [json.loads(line) for line in log.read_text().splitlines()] == [{"text": "hello"}]


# The settings format, Gemini CLI (its stub) and Qwen Code (the OpenAI stub), and OpenCode's configuration
# variable (the Anthropic stub), each planned by the operator.
SETTINGS_CLIS = {
    "gemini": (GeminiStub, fx.GEMINI_ENV, {"model": "gemini-2.5-flash"}, "mcp_docs_echo"),
    "qwen": (OpenAIStub, fx.QWEN_ENV, {}, "mcp__docs__echo"),
    # its servers join the provider's configuration in the run's OPENCODE_CONFIG_CONTENT
    "opencode": (
        AnthropicStub,
        fx.OPENCODE_ENV | {"NPM_CONFIG_REGISTRY": "http://127.0.0.1:9/"},
        {"model": "anthropic/claude-sonnet-4-5"},
        "docs_echo",
    ),
}
# The ACP adapters: each server given in session/new behind its gate (runner/mcp_gate.py).
ACP_CLIS = {
    "claude-acp": (AnthropicStub, fx.CLAUDE_ENV | {"CLAUDE_CODE_MAX_RETRIES": "0"}, {}, "mcp__docs__echo"),
    "codex-acp": (OpenAIStub, fx.CODEX_ENV, {"config": [fx.CODEX_PROVIDER[1], fx.CODEX_PROVIDER[3]]}, "echo"),
    "gemini-acp": (GeminiStub, fx.GEMINI_ENV, {}, "mcp_docs_echo"),
}
PLANNED_CLIS = SETTINGS_CLIS | ACP_CLIS


def _planned_attempt(
    name: str,
    tmp_path: Path,
    server: McpStub | None,
    tools: list[str],
    policy: dict[str, Any] | None = None,
    local: Path | None = None,
) -> AttemptResult:
    """An attempt of `name` with the docs server listing `tools`, its model calling docs' echo: the stub
    `server`, or the local fake server started as `docs`, its calls logged to `local`."""
    stub_cls, env, options, tool = PLANNED_CLIS[name]
    definition = next(d.spec for d in load_builtin_catalog() if d.metadata["name"] == name)
    found = require_cli(definition.binary or name, name)
    assert found is not None
    work, home = _dirs(tmp_path)
    docs: dict[str, Any] = {"name": "docs", "tools": tools}
    if server is not None:
        docs |= {"url": server.url, "headers": [{"name": "Authorization", "value": "Bearer $(DOCS_TOKEN)"}]}
    else:
        fake = Path(__file__).parents[1] / "fakes" / "mcp_stdio.py"
        docs["command"] = [sys.executable, str(fake), str(local)]
    namespace = {"namespace": "mcp__docs"} if name == "codex-acp" else {}  # codex's own name for it
    with stub_cls(mode="call", call=(tool, {"text": "hello"}), **namespace) as model:
        options = {
            k: [x.replace("{base_url}", model.base_url) for x in v] if isinstance(v, list) else v
            for k, v in options.items()
        }
        plain = {e.name: e.value for e in definition.env} | env
        spec = {
            "provider": name,
            "prompt": "Echo hello.",
            "mcpServers": [docs],
            "tools": policy or {},
            "env": [{"name": k, "value": v.replace("{base_url}", model.base_url)} for k, v in plain.items()],
            "workspace": {"workingDir": str(work)},
            "credentials": [{"env": "DOCS_TOKEN", "secretKeyRef": {"name": "docs-token", "key": "token"}}],
        }
        run = HarnessRun.model_validate({"metadata": {"name": "r", "namespace": "ns"}, "spec": spec})
        plan = plan_of(run, definition, 1, name, options, "Echo hello.", None)
        assert TOKEN not in plan.model_dump_json()
        if definition.model_route and definition.model_route.home_files:  # as a routed attempt's files
            plan = plan.model_copy(
                update={"home_files": merge_each(plan.home_files, definition.model_route.home_files)}
            )
        base = {"PATH": f"{Path(found).parent}:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
        keys = {k: v for k, v in env.items() if k in plan.credential_envs} | {"DOCS_TOKEN": TOKEN}
        result = execute(plan, keys, base_env=base, stderr=io.BytesIO())
    assert result.exit_code == 0, result.message
    return result


@pytest.mark.parametrize("name", sorted(PLANNED_CLIS))
def test_a_cli_or_acp_agent_calls_the_runs_mcp_server_with_its_secret_header(
    name: str, tmp_path: Path
) -> None:
    with McpStub() as server:
        _planned_attempt(name, tmp_path, server, ["echo"])
    assert server.tool_calls() == [{"text": "hello"}]
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    assert all(r.auth_sha256 == [digest] for r in server.requests if isinstance(r.body, dict))


@pytest.mark.parametrize("name", sorted(PLANNED_CLIS))
def test_a_cli_or_acp_agent_never_calls_a_tool_the_server_entry_does_not_list(
    name: str, tmp_path: Path
) -> None:
    with McpStub() as server:
        _planned_attempt(name, tmp_path, server, ["search"])
    assert server.rpc_calls("tools/list") and server.tool_calls() == []  # connected, echo never called


def test_qwen_never_calls_an_mcp_tool_its_policy_denies(tmp_path: Path) -> None:
    with McpStub() as server:
        result = _planned_attempt("qwen", tmp_path, server, ["echo"], {"deny": ["mcp__docs__echo"]})
    assert server.tool_calls() == []
    assert result.report.denied_tools == ("mcp__docs__echo",)


def test_an_acp_agent_never_calls_an_mcp_tool_its_policy_denies(tmp_path: Path) -> None:
    with McpStub() as server:
        _planned_attempt("claude-acp", tmp_path, server, ["echo"], {"deny": ["mcp__docs__echo"]})
    assert server.rpc_calls("tools/list") and server.tool_calls() == []


@pytest.mark.parametrize("name", sorted(ACP_CLIS))
def test_an_acp_agent_starts_a_local_mcp_server_behind_its_gate(name: str, tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    _planned_attempt(name, tmp_path, None, ["echo"], local=log)
    assert [json.loads(line) for line in log.read_text().splitlines()] == [{"text": "hello"}]
