"""spec.tools on the real Qwen Code and Copilot CLIs (OpenAI Chat Completions against the stub): each
attempt planned by the operator's own planner from the catalog and run by the runner; a stub model that
asks for a shell command, offered or not, writes nothing where the policy says no, and the attempt
names the refused tool."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from tests.attempt_plans import plan_of
from tests.integration_cli.harnessctl import require_cli
from tests.stubs.openai import OpenAIStub

from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.catalog import load_builtin_catalog
from harness_operator.runner.attempt import AttemptResult
from harness_operator.runner.executor import execute

pytestmark = pytest.mark.cli

CATALOG = {d.metadata["name"]: d.spec for d in load_builtin_catalog()}
COMMAND = "printf 'hello\\n' > edited.txt; echo HARNESS-RAN"
# name -> (executable, its shell tool, the env that points it at the stub)
CLIS: dict[str, tuple[str, str, dict[str, str]]] = {
    "qwen": ("qwen", "run_shell_command", {"OPENAI_BASE_URL": "{base_url}/v1"}),
    "copilot": (
        "copilot",
        "bash",
        {
            "COPILOT_OFFLINE": "true",
            "COPILOT_PROVIDER_BASE_URL": "{base_url}/v1",
            "COPILOT_MODEL": "gpt-4.1",
            "COPILOT_AUTO_UPDATE": "false",
        },
    ),
}


def _run(tmp_path: Path, name: str, tools: dict[str, Any]) -> tuple[AttemptResult, list[dict], Path]:
    executable, shell_tool, route = CLIS[name]
    found = require_cli(executable, name)
    assert found is not None
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir(parents=True)
    home.mkdir(parents=True)
    with OpenAIStub(mode="shell", command=COMMAND, shell_tool=shell_tool) as stub:
        env = [{"name": k, "value": v.replace("{base_url}", stub.base_url)} for k, v in route.items()]
        spec = {"provider": name, "prompt": "Write edited.txt.", "tools": tools, "env": env}
        spec["workspace"] = {"workingDir": str(work)}
        run = HarnessRun.model_validate({"metadata": {"name": "r", "namespace": "ns"}, "spec": spec})
        plan = plan_of(run, CATALOG[name], 1, name, {}, "Write edited.txt.", None)
        key = {"OPENAI_API_KEY" if name == "qwen" else "COPILOT_PROVIDER_API_KEY": "sk-test-tools"}
        base = {"PATH": f"{Path(found).parent}:/usr/bin:/bin", "HOME": str(home)}
        result = execute(plan, key, base_env=base, stderr=io.BytesIO())
        calls = [c.body for c in stub.model_calls()]
    return result, calls, work


def _offered(calls: list[dict]) -> set[str]:
    return {t["function"]["name"] for c in calls for t in c.get("tools") or [] if "function" in t}


@pytest.mark.parametrize("name", sorted(CLIS))
def test_shell_false_refuses_the_shell_and_names_it(tmp_path: Path, name: str) -> None:
    result, calls, work = _run(tmp_path, name, {"shell": False})
    shell_tool = CLIS[name][1]
    assert result.exit_code == 0, result.message
    assert calls, "the CLI never reached the stub"
    assert not (work / "edited.txt").exists()
    assert result.report.denied_tools == (shell_tool,)


def test_qwen_excludes_what_the_policy_denies(tmp_path: Path) -> None:
    result, calls, work = _run(tmp_path, "qwen", {"shell": False, "edits": False})
    assert result.exit_code == 0, result.message
    assert not {"run_shell_command", "write_file", "edit"} & _offered(calls)
    assert not (work / "edited.txt").exists()


def test_copilot_without_a_policy_runs_the_shell_and_an_allow_list_keeps_it_out(tmp_path: Path) -> None:
    result, _, work = _run(tmp_path / "open", "copilot", {})
    assert result.exit_code == 0, result.message
    assert (work / "edited.txt").read_text() == "hello\n"  # the catalog's --allow-all-tools
    result, _, work = _run(tmp_path / "allow", "copilot", {"allow": ["write"]})
    assert result.exit_code == 0, result.message
    assert not (work / "edited.txt").exists()
    assert result.report.denied_tools == ("bash",)
