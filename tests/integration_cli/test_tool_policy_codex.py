"""spec.tools on the real Codex CLI: its attempt planned by the operator's own planner (the stub's provider
passed as the model gateway's route passes it, as `config`) and run by the runner; a stub model that
asks for a shell command, offered or not, writes nothing where the policy says no."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from tests.attempt_plans import plan_of
from tests.integration_cli.harnessctl import require_cli
from tests.stubs.openai import TEXT, OpenAIStub

from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.catalog import load_builtin_catalog
from harness_operator.runner.executor import execute

pytestmark = pytest.mark.cli

CODEX = require_cli("codex", "codex")
CODEX_DEFINITION = next(d.spec for d in load_builtin_catalog() if d.metadata["name"] == "codex")
COMMAND = "printf 'hello\\n' > edited.txt; echo HARNESS-RAN"


def _run(tmp_path: Path, tools: dict) -> tuple[list[dict], Path, int]:
    """The model calls the stub saw, the workspace, and the attempt's exit code."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    spec = {
        "provider": "codex",
        "prompt": "Write edited.txt.",
        "tools": tools,
        "workspace": {"workingDir": str(work)},
    }
    run = HarnessRun.model_validate({"metadata": {"name": "r", "namespace": "ns"}, "spec": spec})
    with OpenAIStub(mode="shell", command=COMMAND) as stub:
        provider = (
            f'{{name="stub", base_url="{stub.base_url}/v1", env_key="OPENAI_API_KEY", wire_api="responses"}}'
        )
        route = {"config": ["model_provider=stub", f"model_providers.stub={provider}"]}
        plan = plan_of(run, CODEX_DEFINITION, 1, "codex", route, "Write edited.txt.", None)
        assert CODEX is not None
        env = {"PATH": f"{Path(CODEX).parent}:/usr/bin:/bin", "HOME": str(home)}
        result = execute(plan, {"OPENAI_API_KEY": "sk-test-tools"}, base_env=env, stderr=io.BytesIO())
        calls = [c.body for c in stub.model_calls()]
    assert result.output.decode().strip() == TEXT, result.message
    return calls, work, result.exit_code


def _answers(calls: list[dict]) -> list[str]:
    """What the CLI answered the model's tool call with."""
    return [
        str(item.get("output"))
        for call in calls[1:]
        for item in call.get("input") or []
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]


def test_without_a_policy_the_shell_runs(tmp_path: Path) -> None:
    calls, _, code = _run(tmp_path, {})
    assert code == 0
    assert "HARNESS-RAN" in " ".join(_answers(calls))  # the command ran (its write hit the read-only sandbox)


def test_shell_false_takes_the_shell_away(tmp_path: Path) -> None:
    calls, work, code = _run(tmp_path, {"shell": False})
    assert code == 0
    answers = _answers(calls)
    assert answers and "unsupported call: exec_command" in answers[0]
    assert "HARNESS-RAN" not in " ".join(answers)
    assert not (work / "edited.txt").exists()


def test_edits_false_keeps_the_workspace_read_only(tmp_path: Path) -> None:
    calls, work, code = _run(tmp_path, {"edits": False, "network": False})
    assert code == 0
    answers = " ".join(_answers(calls))
    assert "Read-only file system" in answers and "HARNESS-RAN" in answers
    assert not (work / "edited.txt").exists()
    assert os.listdir(work) == []
