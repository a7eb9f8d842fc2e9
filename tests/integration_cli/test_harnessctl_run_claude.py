"""`harnessctl run` drives the real Claude Code CLI (built-in catalog entry) against the local Anthropic
stub: the status file shows the stub's tokens and the cost the CLI itself reported."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.integration_cli.harnessctl import harnessctl_run, require_cli
from tests.stubs.anthropic import TEXT, USAGE, AnthropicStub

pytestmark = pytest.mark.cli

CLAUDE = require_cli("claude", "claude")

MANIFEST = """
apiVersion: agentharness.dev/v1alpha1
kind: HarnessRun
metadata: {{name: stub-review, namespace: default}}
spec:
  provider: claude
  prompt: Say hello.
  workspace: {{workingDir: {workdir}}}
  env:
    - {{name: ANTHROPIC_BASE_URL, value: "{base_url}"}}
    - {{name: DISABLE_TELEMETRY, value: "1"}}
    - {{name: DISABLE_AUTOUPDATER, value: "1"}}
    - {{name: CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC, value: "1"}}
    - {{name: CLAUDE_CODE_MAX_RETRIES, value: "0"}}
  limits: {{timeoutSeconds: 120, maxCostUSD: 5}}
"""


def test_real_claude_through_harnessctl_run(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with AnthropicStub(mode="ok") as stub:
        manifest = MANIFEST.format(workdir=tmp_path / "work", base_url=stub.base_url)
        result, status = harnessctl_run(
            manifest, CLAUDE, home, {"ANTHROPIC_API_KEY": "sk-test-harnessctl-secret"}
        )
        assert stub.model_calls(), "the CLI never reached the stub"
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == TEXT
    assert "sk-test-harnessctl-secret" not in result.stdout + result.stderr
    assert "from the environment" in result.stderr or "ANTHROPIC_API_KEY" in result.stderr
    assert status["phase"] == "Succeeded"
    usage = status["usage"]
    assert usage["inputTokens"] == USAGE["input_tokens"]
    assert usage["outputTokens"] == USAGE["output_tokens"]
    assert usage["cacheReadTokens"] == USAGE["cache_read_input_tokens"]
    assert usage["cacheWriteTokens"] == USAGE["cache_creation_input_tokens"]
    assert usage["costSource"] == "reported"
    assert usage["costUSD"] > 0
    attempt = status["attempts"][0]
    assert attempt["provider"] == "claude"
    assert attempt["sessionID"]
    assert status["output"]["sha256"]


def test_an_overloaded_vendor_is_retried_with_the_same_cli_before_any_fallback(tmp_path: Path) -> None:
    """The real Claude Code meets Anthropic's 529 once: the runner names it ProviderUnavailable, and
    spec.retry runs the same CLI again after the backoff instead of falling back."""
    home = tmp_path / "home"
    home.mkdir()
    with AnthropicStub(mode="ok", overloaded_calls=1) as stub:
        manifest = MANIFEST.format(workdir=tmp_path / "work", base_url=stub.base_url)
        manifest += "  retry: {limit: 2, backoffSeconds: 1}\n  fallback: [{provider: codex}]\n"
        result, status = harnessctl_run(
            manifest, CLAUDE, home, {"ANTHROPIC_API_KEY": "sk-test-harnessctl-secret"}
        )
        calls = stub.model_calls()
    assert result.returncode == 0, result.stderr
    assert len(calls) == 2
    first, second = status["attempts"]
    assert (first["index"], first["provider"], first["reason"]) == (1, "claude", "ProviderUnavailable")
    assert (second["index"], second["provider"], second["exitCode"]) == (2, "claude", 0)
    line = "attempt 1/6 with claude failed (ProviderUnavailable); retry 1/2 with claude as attempt 2/6 in 1s"
    assert line in result.stderr
    assert status["phase"] == "Succeeded" and status["usage"]["inputTokens"] == USAGE["input_tokens"]
