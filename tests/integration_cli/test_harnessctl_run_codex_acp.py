"""`harnessctl run` drives the real Zed Codex ACP adapter (built-in `codex-acp`) over stdio against the
local OpenAI stub (Responses API), through a custom model provider given as `with: {config: [...]}`:
the answer is the output; a refused key fails the run (the adapter says only "Internal error")."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.stubs.openai import TEXT, OpenAIStub

pytestmark = pytest.mark.cli

ROOT = Path(__file__).resolve().parents[2]
ADAPTER = shutil.which("codex-acp")
# CI installs the CLI (tests/run-all.sh); there a missing binary is a failure, not a skip.
if ADAPTER is None and not os.environ.get("CI"):
    pytest.skip(
        "`codex-acp` is not on PATH (bash tests/cli-tools.sh codex-acp prints the folder to add)",
        allow_module_level=True,
    )

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


def harnessctl_run(tmp_path: Path, mode: str) -> tuple[subprocess.CompletedProcess[str], dict, list[Any]]:
    assert ADAPTER is not None, "codex-acp must be on PATH in CI"
    home = tmp_path / "home"
    home.mkdir()
    with OpenAIStub(mode=mode) as stub:
        manifest = tmp_path / "run.yaml"
        manifest.write_text(MANIFEST.format(workdir=tmp_path / "work", base_url=stub.base_url))
        env = {
            "PATH": f"{Path(ADAPTER).parent}:{Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": str(home),
            "OPENAI_API_KEY": "sk-test-codex-acp-secret",
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


def test_real_codex_acp_adapter_answers_through_harnessctl_run(tmp_path: Path) -> None:
    result, status, calls = harnessctl_run(tmp_path, "ok")
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
    result, status, calls = harnessctl_run(tmp_path, "unauthorized")
    assert calls, "the adapter never reached the stub"  # so the failure is the stub's 401
    assert result.returncode == 1
    assert status["phase"] == "Failed" and status["reason"] == "ProviderError"
    assert "sk-test-codex-acp-secret" not in result.stdout + result.stderr
