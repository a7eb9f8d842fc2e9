"""`harnessctl run` drives the real Zed Claude ACP adapter (built-in `claude-acp`) over stdio against the
local Anthropic stub: the answer is the output; a refused key fails; a hung model times out with no
fallback and no process left behind."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from tests.integration_cli.harnessctl import harnessctl_run, require_cli
from tests.stubs.anthropic import TEXT, AnthropicStub

pytestmark = pytest.mark.cli

ADAPTER = require_cli("claude-code-acp", "claude-acp")

MANIFEST = """
apiVersion: agentharness.dev/v1alpha1
kind: HarnessRun
metadata: {{name: acp-hello, namespace: default}}
spec:
  provider: claude-acp
  prompt: Say hello.
  stdin: (nothing else)
  workspace: {{workingDir: {workdir}}}
  env:
    - {{name: ANTHROPIC_BASE_URL, value: "{base_url}"}}
    - {{name: CLAUDE_CODE_MAX_RETRIES, value: "0"}}
  limits: {{timeoutSeconds: {timeout}, gracePeriodSeconds: 2}}
  fallback:
    - provider: claude-acp
"""


def run(tmp_path: Path, mode: str, timeout: int = 120) -> tuple[subprocess.CompletedProcess[str], dict, list]:
    home = tmp_path / "home"
    home.mkdir()
    with AnthropicStub(mode=mode) as stub:
        manifest = MANIFEST.format(workdir=tmp_path / "work", base_url=stub.base_url, timeout=timeout)
        result, status = harnessctl_run(manifest, ADAPTER, home, {"ANTHROPIC_API_KEY": "sk-test-acp-secret"})
        return result, status, stub.model_calls()


def test_real_claude_acp_adapter_answers_through_harnessctl_run(tmp_path: Path) -> None:
    result, status, calls = run(tmp_path, "ok")
    assert calls, "the adapter never reached the stub"
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == TEXT
    assert "sk-test-acp-secret" not in result.stdout + result.stderr
    assert status["phase"] == "Succeeded" and len(status["attempts"]) == 1
    assert status["attempts"][0]["sessionID"] and status["attempts"][0]["cliVersion"] == "0.16.2"
    assert status["usage"]["costSource"] == "unknown"  # adapter 0.16.2 reports no usage; never a made-up 0
    # The prompt and stdin reached the model as one message, stdin after a blank line.
    assert "Say hello.\\n\\n(nothing else)" in json.dumps(calls[-1].body)


def test_a_refused_key_fails_the_run(tmp_path: Path) -> None:
    result, status, _ = run(tmp_path, "unauthorized")
    assert result.returncode != 0
    assert status["phase"] == "Failed" and status["attempts"][0]["exitCode"] == 1
    assert "sk-test-acp-secret" not in result.stdout + result.stderr


def test_a_hung_model_times_out_without_fallback(tmp_path: Path) -> None:
    result, status, _ = run(tmp_path, "hang", timeout=10)
    assert result.returncode == 124, result.stderr
    assert status["reason"] == "Timeout" and len(status["attempts"]) == 1
