"""`harnessctl run` drives the real Zed Claude ACP adapter (built-in `claude-acp`) over stdio against the
local Anthropic stub: the answer is the output; a refused key fails; a hung model times out with no
fallback and no process left behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.stubs.anthropic import TEXT, AnthropicStub

pytestmark = pytest.mark.cli

ROOT = Path(__file__).resolve().parents[2]
ADAPTER = shutil.which("claude-code-acp")
# CI installs the adapter (tests/run-all.sh); there a missing binary is a failure, not a skip.
if ADAPTER is None and not os.environ.get("CI"):
    pytest.skip(
        "`claude-code-acp` is not on PATH (bash tests/cli-tools.sh claude-acp prints the folder to add)",
        allow_module_level=True,
    )

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


def harnessctl_run(
    tmp_path: Path, mode: str, timeout: int = 120
) -> tuple[subprocess.CompletedProcess[str], dict, list]:
    assert ADAPTER is not None, "claude-code-acp must be on PATH in CI"
    home = tmp_path / "home"
    home.mkdir()
    with AnthropicStub(mode=mode) as stub:
        manifest = tmp_path / "run.yaml"
        manifest.write_text(
            MANIFEST.format(workdir=tmp_path / "work", base_url=stub.base_url, timeout=timeout)
        )
        env = {
            "PATH": f"{Path(ADAPTER).parent}:{Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": str(home),
            "ANTHROPIC_API_KEY": "sk-test-acp-secret",
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
            timeout=300,
            check=False,
        )
        calls = stub.model_calls()
    status = next(yaml.safe_load_all((tmp_path / "status.yaml").read_text()))
    return result, status, calls


def test_real_claude_acp_adapter_answers_through_harnessctl_run(tmp_path: Path) -> None:
    result, status, calls = harnessctl_run(tmp_path, "ok")
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
    result, status, _ = harnessctl_run(tmp_path, "unauthorized")
    assert result.returncode != 0
    assert status["phase"] == "Failed" and status["attempts"][0]["exitCode"] == 1
    assert "sk-test-acp-secret" not in result.stdout + result.stderr


def test_a_hung_model_times_out_without_fallback(tmp_path: Path) -> None:
    result, status, _ = harnessctl_run(tmp_path, "hang", timeout=10)
    assert result.returncode == 124, result.stderr
    assert status["reason"] == "Timeout" and len(status["attempts"]) == 1
