"""`harnessctl run` drives the real Gemini CLI in its ACP mode (built-in `gemini-acp`: `gemini --acp`) over
stdio against the local Gemini stub: the answer is the output; a refused key fails the run as AuthFailed."""

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
from tests.fixtures.cli.capture import gemini_home
from tests.stubs.gemini import TEXT, GeminiStub

pytestmark = pytest.mark.cli

ROOT = Path(__file__).resolve().parents[2]
GEMINI = shutil.which("gemini")
# CI installs the CLI (tests/run-all.sh); there a missing binary is a failure, not a skip.
if GEMINI is None and not os.environ.get("CI"):
    pytest.skip(
        "`gemini` is not on PATH (bash tests/cli-tools.sh gemini prints the folder to add)",
        allow_module_level=True,
    )

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


def harnessctl_run(tmp_path: Path, mode: str) -> tuple[subprocess.CompletedProcess[str], dict, list[Any]]:
    assert GEMINI is not None, "gemini must be on PATH in CI"
    home = tmp_path / "home"
    home.mkdir()
    with GeminiStub(mode=mode) as stub:
        gemini_home(str(home), stub)
        manifest = tmp_path / "run.yaml"
        manifest.write_text(MANIFEST.format(workdir=tmp_path / "work", base_url=stub.base_url))
        env = {
            "PATH": f"{Path(GEMINI).parent}:{Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": str(home),
            "GEMINI_API_KEY": "sk-test-gemini-acp-secret",
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


def test_real_gemini_acp_mode_answers_through_harnessctl_run(tmp_path: Path) -> None:
    result, status, calls = harnessctl_run(tmp_path, "ok")
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
    result, status, _ = harnessctl_run(tmp_path, "unauthorized")
    assert result.returncode == 1
    assert status["phase"] == "Failed" and status["reason"] == "AuthFailed"
    assert "sk-test-gemini-acp-secret" not in result.stdout + result.stderr
