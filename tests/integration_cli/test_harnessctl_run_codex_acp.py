"""`harnessctl run` drives the real Zed Codex ACP adapter (built-in `codex-acp`) over stdio against the
local OpenAI stub (Responses API), through a custom model provider given as `with: {config: [...]}`:
the answer is the output; a refused key fails the run (the adapter says only "Internal error")."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.integration_cli.harnessctl import harnessctl_run, require_cli
from tests.stubs.openai import TEXT, OpenAIStub

pytestmark = pytest.mark.cli

ADAPTER = require_cli("codex-acp", "codex-acp")

MANIFEST = """
apiVersion: agentharness.dev/v1alpha1
kind: HarnessRun
metadata: {{name: codex-acp-hello, namespace: default}}
spec:
  provider: codex-acp
  prompt: Say hello.
  stdin: (nothing else)
  workspace: {{workingDir: {workdir}}}
  with:
    config:
      - model_provider=stub
      - 'model_providers.stub={{name="stub", base_url="{base_url}/v1", env_key="OPENAI_API_KEY",
        wire_api="responses", request_max_retries=0, stream_max_retries=0}}'
  limits: {{timeoutSeconds: 120, gracePeriodSeconds: 2}}
"""


def run(tmp_path: Path, mode: str) -> tuple[subprocess.CompletedProcess[str], dict, list[Any]]:
    home = tmp_path / "home"
    home.mkdir()
    with OpenAIStub(mode=mode) as stub:
        manifest = MANIFEST.format(workdir=tmp_path / "work", base_url=stub.base_url)
        result, status = harnessctl_run(
            manifest, ADAPTER, home, {"OPENAI_API_KEY": "sk-test-codex-acp-secret"}
        )
        return result, status, stub.model_calls()


def test_real_codex_acp_adapter_answers_through_harnessctl_run(tmp_path: Path) -> None:
    result, status, calls = run(tmp_path, "ok")
    assert calls, "the CLI never reached the stub"
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == TEXT
    assert "sk-test-codex-acp-secret" not in result.stdout + result.stderr
    assert status["phase"] == "Succeeded" and len(status["attempts"]) == 1
    assert status["attempts"][0]["sessionID"] and status["attempts"][0]["cliVersion"] == "0.16.0"
    assert status["usage"]["costSource"] == "unknown"  # 0.16.0 reports no usage over ACP
    # The prompt and stdin reached the model as one message, stdin after a blank line.
    assert "Say hello.\\n\\n(nothing else)" in json.dumps(calls[-1].body)


def test_a_refused_key_fails_the_run(tmp_path: Path) -> None:
    result, status, calls = run(tmp_path, "unauthorized")
    assert calls, "the adapter never reached the stub"  # so the failure is the stub's 401
    assert result.returncode == 1
    assert status["phase"] == "Failed" and status["reason"] == "ProviderError"
    assert "sk-test-codex-acp-secret" not in result.stdout + result.stderr
