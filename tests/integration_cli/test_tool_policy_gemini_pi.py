"""spec.tools on the real Gemini CLI (an admin-tier policy file in its home, named by --admin-policy), Pi
(--tools, its only control) and OpenCode (the permission map of its configuration variable, beside the
model route's provider): each attempt planned by the operator's own planner from the catalog and run by
the runner; a stub model that asks for a shell command, offered or not, writes nothing where the policy
says no, and the attempt names the refused tool."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.attempt_plans import plan_of
from tests.fixtures.cli import capture as fx
from tests.integration_cli.harnessctl import require_cli
from tests.stubs.anthropic import AnthropicStub
from tests.stubs.gemini import GeminiStub

from harness_operator.api.v1alpha1 import EnvVar, HarnessRun
from harness_operator.catalog import load_builtin_catalog
from harness_operator.core.access.settings_merge import merge_settings
from harness_operator.runner.attempt import AttemptResult
from harness_operator.runner.executor import execute

pytestmark = pytest.mark.cli

CATALOG = {d.metadata["name"]: d.spec for d in load_builtin_catalog()}
ROUTED = "OPENCODE_CONFIG_CONTENT"
COMMAND = "printf 'hello\\n' > edited.txt; echo HARNESS-RAN"
# name -> (stub, its shell call, env, options, home setup)
CLIS: dict[
    str, tuple[Any, tuple[str, dict[str, str]], dict[str, str], dict[str, Any], Callable[..., None]]
] = {
    # --yolo: headless, Gemini CLI offers its shell only then (its own policy), so a denial is the run's
    "gemini": (
        GeminiStub,
        ("run_shell_command", {"command": COMMAND, "description": "stub"}),
        fx.GEMINI_ENV,
        {"model": "gemini-2.5-flash", "yolo": True},
        fx.gemini_home,
    ),
    "pi": (
        AnthropicStub,
        ("bash", {"command": COMMAND}),
        fx.PI_ENV,
        {"provider": "anthropic", "model": "claude-sonnet-4-5"},
        fx.pi_home,
    ),
    # Its provider's configuration is the model route's variable (merged into the plan's, as routed).
    "opencode": (
        AnthropicStub,
        ("bash", {"command": COMMAND, "description": "stub"}),
        {k: v for k, v in fx.OPENCODE_ENV.items() if k != ROUTED}
        | {"NPM_CONFIG_REGISTRY": "http://127.0.0.1:9/"},  # its plugin dependencies: from no registry
        {"model": "anthropic/claude-sonnet-4-5"},
        lambda home, stub: None,
    ),
}


def _run(tmp_path: Path, name: str, tools: dict[str, Any]) -> tuple[AttemptResult, Path]:
    stub_cls, call, env, options, setup_home = CLIS[name]
    found = require_cli(name, name)
    assert found is not None
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True)
    with stub_cls(mode="call", call=call) as stub:
        plain = {e.name: e.value for e in CATALOG[name].env} | env
        spec = {
            "provider": name,
            "prompt": "Write edited.txt.",
            "tools": tools,
            "env": [{"name": k, "value": v.replace("{base_url}", stub.base_url)} for k, v in plain.items()],
            "workspace": {"workingDir": str(work)},
        }
        run = HarnessRun.model_validate({"metadata": {"name": "r", "namespace": "ns"}, "spec": spec})
        plan = plan_of(run, CATALOG[name], 1, name, options, "Write edited.txt.", None)
        if name == "opencode":  # as the model route merges its provider into the plan's variable
            given = {e.name: e.value for e in plan.env}
            provider = fx.OPENCODE_ENV[ROUTED].replace("{base_url}", stub.base_url)
            routed = EnvVar(name=ROUTED, value=merge_settings(given.get(ROUTED), provider))
            plan = plan.model_copy(update={"env": [*(e for e in plan.env if e.name != ROUTED), routed]})
        setup_home(str(home), stub)
        base = {"PATH": f"{Path(found).parent}:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
        keys = {k: v for k, v in env.items() if k in plan.credential_envs}  # a grant's: not plain env
        result = execute(plan, keys, base_env=base, stderr=io.BytesIO())
    assert result.exit_code == 0, result.message
    return result, work


@pytest.mark.parametrize("name", sorted(CLIS))
def test_without_a_policy_the_shell_runs(tmp_path: Path, name: str) -> None:
    result, work = _run(tmp_path, name, {})
    assert (work / "edited.txt").read_text() == "hello\n"
    assert result.report.denied_tools == ()


@pytest.mark.parametrize("name", sorted(CLIS))
def test_an_allow_list_keeps_the_shell_out_and_names_it(tmp_path: Path, name: str) -> None:
    allowed = {"gemini": ["read_file"], "pi": ["read"], "opencode": ["read"]}[name]
    result, work = _run(tmp_path, name, {"allow": allowed})
    assert not (work / "edited.txt").exists()
    assert result.report.denied_tools == (CLIS[name][1][0],)


def test_gemini_denies_the_shell_with_its_switch_and_the_file_holds_the_rule(tmp_path: Path) -> None:
    result, work = _run(tmp_path, "gemini", {"shell": False, "network": False})
    assert not (work / "edited.txt").exists()
    assert result.report.denied_tools == ("run_shell_command",)
    rules = (tmp_path / "home" / ".harness" / "gemini-policy.toml").read_text()
    assert (
        json.dumps(
            [
                "run_shell_command",
                "list_background_processes",
                "read_background_output",
                "web_fetch",
                "google_web_search",
            ]
        )
        in rules
    )


def test_opencode_holds_its_list_against_the_workspaces_own_configuration(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "opencode.json").write_text(json.dumps({"permission": {"*": "allow", "bash": "allow"}}))
    result, work = _run(tmp_path, "opencode", {"shell": False})
    assert not (work / "edited.txt").exists()
    assert result.report.denied_tools == ("bash",)
