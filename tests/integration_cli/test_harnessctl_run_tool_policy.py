"""spec.tools on the real Claude Code CLI through `harnessctl run`: a stub model that asks for Bash, offered
or not, gets its command run only where the policy allows it, and the status names what was refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.integration_cli.harnessctl import harnessctl_run, require_cli
from tests.stubs.anthropic import TEXT, AnthropicStub

pytestmark = pytest.mark.cli

CLAUDE = require_cli("claude", "claude")

MANIFEST = """
apiVersion: agentharness.dev/v1alpha1
kind: HarnessRun
metadata: {{name: tool-policy, namespace: default}}
spec:
  provider: claude
  prompt: Write edited.txt.
  tools: {tools}
  workspace: {{workingDir: {workdir}}}
  env:
    - {{name: ANTHROPIC_BASE_URL, value: "{base_url}"}}
    - {{name: CLAUDE_CODE_MAX_RETRIES, value: "0"}}
  limits: {{timeoutSeconds: 120}}
"""
COMMAND = "printf 'hello\\n' > edited.txt"


def _run(tmp_path: Path, tools: str) -> tuple[dict, list[dict], Path]:
    """The run's status, the model calls the stub saw, and the workspace."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    with AnthropicStub(mode="bash", command=COMMAND, force_bash=True) as stub:
        manifest = MANIFEST.format(tools=tools, workdir=work, base_url=stub.base_url)
        result, status = harnessctl_run(manifest, CLAUDE, home, {"ANTHROPIC_API_KEY": "sk-test-tools"})
        calls = [c.body for c in stub.model_calls()]
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == TEXT
    return status, calls, work


def _offered(call: dict) -> set[str]:
    return {t.get("name") for t in call.get("tools") or []}


def _tool_results(call: dict) -> list[dict]:
    return [
        block
        for message in call["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


def test_shell_false_removes_bash_and_a_call_of_it_does_not_run(tmp_path: Path) -> None:
    status, calls, work = _run(tmp_path, "{shell: false}")
    assert calls and not any("Bash" in _offered(c) for c in calls)
    assert not (work / "edited.txt").exists()
    # The model asked for Bash anyway (the stub ignores the tool list); the CLI answered with an error.
    results = _tool_results(calls[-1])
    assert len(results) == 1 and results[0]["is_error"], results
    assert "No such tool available: Bash" in str(results[0]["content"])
    assert status["attempts"][0]["deniedTools"] == ["Bash"]
    assert status["phase"] == "Succeeded"


def test_a_tool_outside_the_allow_list_is_offered_but_refused(tmp_path: Path) -> None:
    status, calls, work = _run(tmp_path, "{allow: [Read]}")
    assert "Bash" in _offered(calls[0])
    assert not (work / "edited.txt").exists()
    results = _tool_results(calls[-1])
    assert len(results) == 1 and results[0]["is_error"], results
    assert status["attempts"][0]["deniedTools"] == ["Bash"]


def test_an_allowed_tool_runs(tmp_path: Path) -> None:
    status, calls, work = _run(tmp_path, "{allow: [Bash], network: false}")
    assert (work / "edited.txt").read_text() == "hello\n"
    assert not any({"WebFetch", "WebSearch"} & _offered(c) for c in calls)
    results = _tool_results(calls[-1])
    assert len(results) == 1 and not results[0].get("is_error"), results
    assert "deniedTools" not in status["attempts"][0]
