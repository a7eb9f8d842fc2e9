"""`harnessctl run` drives the real Claude Code CLI (built-in catalog entry) against the local Anthropic
stub: the status file shows the stub's tokens and the cost the CLI itself reported."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.stubs.anthropic import TEXT, USAGE, AnthropicStub

pytestmark = pytest.mark.cli

ROOT = Path(__file__).resolve().parents[2]
CLAUDE = shutil.which("claude")
# CI installs the CLI (tests/run-all.sh); there a missing binary is a failure, not a skip.
if CLAUDE is None and not os.environ.get("CI"):
    pytest.skip(
        "`claude` is not on PATH (tests/cli-tools.sh prints the folder to add)", allow_module_level=True
    )

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
    assert CLAUDE is not None, "claude must be on PATH in CI"
    home = tmp_path / "home"
    home.mkdir()
    with AnthropicStub(mode="ok") as stub:
        manifest = tmp_path / "run.yaml"
        manifest.write_text(MANIFEST.format(workdir=tmp_path / "work", base_url=stub.base_url))
        env = {
            "PATH": f"{Path(CLAUDE).parent}:{Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": str(home),
            "ANTHROPIC_API_KEY": "sk-test-harnessctl-secret",
        }
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "harness_operator.cli",
                "run",
                str(manifest),
                "--status-file",
                str(tmp_path / "status.yaml"),
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=180,
            check=False,
        )
        assert stub.model_calls(), "the CLI never reached the stub"
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == TEXT
    assert "sk-test-harnessctl-secret" not in result.stdout + result.stderr
    assert "from the environment" in result.stderr or "ANTHROPIC_API_KEY" in result.stderr
    status = next(yaml.safe_load_all((tmp_path / "status.yaml").read_text()))
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
