"""Run the real Claude Code CLI against the local Anthropic stub (no vendor is reached).

Needs ``claude`` on PATH (``tests/cli-tools.sh`` installs the pinned version and prints its bin
dir). Marked ``cli``; skipped with a reason when the binary is missing.
"""

from __future__ import annotations

import json
import shutil

import pytest
from tests.stubs.anthropic import TEXT, USAGE, AnthropicStub
from tests.stubs.run_cli import run

pytestmark = pytest.mark.cli

CLAUDE = shutil.which("claude")
needs_claude = pytest.mark.skipif(
    CLAUDE is None, reason="`claude` is not on PATH (run tests/cli-tools.sh and add its last line to PATH)"
)

ENV = {
    "ANTHROPIC_BASE_URL": "{base_url}",
    "ANTHROPIC_API_KEY": "sk-test-integration",
    "DISABLE_TELEMETRY": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "CLAUDE_CODE_MAX_RETRIES": "0",
}
ARGV = ["-p", "hi", "--output-format", "stream-json", "--verbose"]


def _lines(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


@needs_claude
def test_success_result_reports_stub_usage_and_cost(tmp_path):
    with AnthropicStub(mode="ok") as stub:
        code, out, err, _ = run(
            stub,
            [CLAUDE, *ARGV],
            ENV,
            timeout=120,
            home=str(tmp_path / "home"),
            workdir=str(tmp_path / "work"),
        )
        assert stub.model_calls(), "claude never called POST /v1/messages on the stub"
    assert code == 0, err
    lines = _lines(out)
    assert lines[0]["type"] == "system" and lines[0]["subtype"] == "init"
    session = lines[0]["session_id"]
    result = [line for line in lines if line.get("type") == "result"]
    assert len(result) == 1
    result = result[0]
    assert result["subtype"] == "success" and result["is_error"] is False
    assert result["result"] == TEXT
    assert result["session_id"] == session
    for key in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
        assert result["usage"][key] == USAGE[key], key
    assert result["total_cost_usd"] > 0
    assert result["num_turns"] == 1


@needs_claude
def test_unauthorized_exits_non_zero_with_error_result(tmp_path):
    with AnthropicStub(mode="unauthorized") as stub:
        code, out, _err, _ = run(
            stub,
            [CLAUDE, *ARGV],
            ENV,
            timeout=120,
            home=str(tmp_path / "home"),
            workdir=str(tmp_path / "work"),
        )
    assert code != 0
    result = [line for line in _lines(out) if line.get("type") == "result"][-1]
    assert result["is_error"] is True
    assert result.get("api_error_status") == 401


@needs_claude
def test_bash_mode_makes_claude_edit_its_workspace(tmp_path):
    # `--allowedTools Bash`: as root (CI) Claude Code refuses --permission-mode bypassPermissions and
    # --dangerously-skip-permissions; without a permission flag it refuses the redirect ("needs approval").
    work = tmp_path / "work"
    with AnthropicStub(mode="bash", command="printf 'hello\\n' > edited.txt") as stub:
        code, out, err, _ = run(
            stub,
            [CLAUDE, "-p", "edit", "--allowedTools", "Bash", "--output-format", "stream-json", "--verbose"],
            ENV,
            timeout=120,
            home=str(tmp_path / "home"),
            workdir=str(work),
        )
        calls = [
            c.body
            for c in stub.model_calls()
            if any(t.get("name") == "Bash" for t in c.body.get("tools") or [])
        ]
    assert code == 0, err
    assert (work / "edited.txt").read_text() == "hello\n"
    # The CLI ran the stub's tool_use and sent its result back on the next turn, which ended the run.
    assert len(calls) == 2, calls
    results = [
        b
        for m in calls[1]["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    assert len(results) == 1 and not results[0].get("is_error"), results
    result = [line for line in _lines(out) if line.get("type") == "result"][-1]
    assert result["subtype"] == "success" and result["result"] == TEXT
