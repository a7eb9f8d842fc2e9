"""`harnessctl run` drives the real Gemini CLI in its ACP mode (built-in `gemini-acp`: `gemini --acp`) over
stdio against the local Gemini stub: the answer is the output; a refused key fails the run as AuthFailed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.fixtures.cli.capture import gemini_home
from tests.integration_cli.harnessctl import harnessctl_run, require_cli
from tests.stubs.gemini import TEXT, GeminiStub

pytestmark = pytest.mark.cli

GEMINI = require_cli("gemini", "gemini")

MANIFEST = """
apiVersion: agentharness.dev/v1alpha1
kind: HarnessRun
metadata: {{name: gemini-acp-hello, namespace: default}}
spec:
  provider: gemini-acp
  prompt: Say hello.
  stdin: (nothing else)
  workspace: {{workingDir: {workdir}}}
  env:
    - {{name: GOOGLE_GEMINI_BASE_URL, value: "{base_url}"}}
  limits: {{timeoutSeconds: 120, gracePeriodSeconds: 2}}
"""


def run(tmp_path: Path, mode: str) -> tuple[subprocess.CompletedProcess[str], dict, list[Any]]:
    home = tmp_path / "home"
    home.mkdir()
    with GeminiStub(mode=mode) as stub:
        gemini_home(str(home), stub)
        manifest = MANIFEST.format(workdir=tmp_path / "work", base_url=stub.base_url)
        result, status = harnessctl_run(
            manifest, GEMINI, home, {"GEMINI_API_KEY": "sk-test-gemini-acp-secret"}
        )
        return result, status, stub.model_calls()


def test_real_gemini_acp_mode_answers_through_harnessctl_run(tmp_path: Path) -> None:
    result, status, calls = run(tmp_path, "ok")
    assert calls, "the CLI never reached the stub"
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == TEXT
    assert "sk-test-gemini-acp-secret" not in result.stdout + result.stderr
    assert status["phase"] == "Succeeded" and len(status["attempts"]) == 1
    assert status["attempts"][0]["sessionID"] and status["attempts"][0]["cliVersion"] == "0.61.0"
    assert status["usage"]["costSource"] == "unknown"  # 0.61.0 reports no usage over ACP
    # The prompt and stdin reached the model as one message, stdin after a blank line.
    assert "Say hello.\\n\\n(nothing else)" in json.dumps(calls[-1].body)


def test_a_refused_key_fails_the_run(tmp_path: Path) -> None:
    result, status, _ = run(tmp_path, "unauthorized")
    assert result.returncode == 1
    assert status["phase"] == "Failed" and status["reason"] == "AuthFailed"
    assert "sk-test-gemini-acp-secret" not in result.stdout + result.stderr
