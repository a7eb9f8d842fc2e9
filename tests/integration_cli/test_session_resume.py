"""spec.resumeFrom on the real CLIs: every catalog entry that declares sessionResume keeps its session (the
runner packs the files its definition names), and a later attempt given only that archive, in a fresh
home and the same working directory, continues the session by id (an ACP agent with session/load): the stub sees the first conversation
in the second request, and the CLI reports the same session id. Planned by the operator's own planner,
run by the runner."""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.attempt_plans import plan_of
from tests.fixtures.cli import capture as fx
from tests.stubs.run_cli import stub_class

from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.catalog import load_builtin_catalog
from harness_operator.core.plan.resumption import Resumption, compute_continuation
from harness_operator.runner.attempt import AttemptResult
from harness_operator.runner.executor import execute
from harness_operator.runner.launch import Launch, LocalAgent

pytestmark = pytest.mark.cli

CATALOG = {d.metadata["name"]: d.spec for d in load_builtin_catalog()}
FIRST = "PROMPT-ONE: remember the codeword PELICAN."
SECOND = "PROMPT-TWO: what was the codeword?"
# name -> (stub, env pointing the CLI at it, options added to the run, home setup)
ROUTES: dict[str, tuple[str, dict[str, str], dict[str, Any], Callable[[str, Any], None] | None]] = {
    "claude": ("anthropic", dict(fx.CLAUDE_ENV, CLAUDE_CODE_MAX_RETRIES="0"), {}, None),
    "codex": ("openai", fx.CODEX_ENV, {"config": [fx.CODEX_PROVIDER[1], fx.CODEX_PROVIDER[3]]}, None),
    "gemini": ("gemini", fx.GEMINI_ENV, {"model": "gemini-2.5-flash"}, fx.gemini_home),
    "qwen": ("openai", fx.QWEN_ENV, {}, None),
    # opencode installs plugin dependencies in the background: from no registry here (loopback only)
    "opencode": (
        "anthropic",
        dict(fx.OPENCODE_ENV, NPM_CONFIG_REGISTRY="http://127.0.0.1:9/"),
        {"model": "anthropic/claude-sonnet-4-5"},
        None,
    ),
    "pi": ("anthropic", fx.PI_ENV, {"provider": "anthropic", "model": "claude-sonnet-4-5"}, fx.pi_home),
    "copilot": ("openai", fx.COPILOT_ENV, {}, None),
    # ACP agents continue with session/load
    "claude-acp": ("anthropic", dict(fx.CLAUDE_ENV, CLAUDE_CODE_MAX_RETRIES="0"), {}, None),
    "codex-acp": ("openai", fx.CODEX_ENV, {"config": [fx.CODEX_PROVIDER[1], fx.CODEX_PROVIDER[3]]}, None),
}
RESUMABLE = sorted(name for name, spec in CATALOG.items() if spec.capabilities.session_resume)


def test_every_cli_that_declares_resume_is_run_here() -> None:
    assert sorted(ROUTES) == RESUMABLE


def _attempt(
    name: str, stub: Any, home: Path, work: Path, prompt: str, resumption: Resumption | None = None
) -> AttemptResult:
    """One attempt of a run with provider `name`; with `resumption`, continuing its session."""
    _, env, options, setup_home = ROUTES[name]
    definition = CATALOG[name]
    found = shutil.which(definition.binary or "")
    assert found is not None, f"`{definition.binary}` is not on PATH (tests/cli-tools.sh {name})"
    plain = {e.name: e.value for e in definition.env} | env
    spec = {
        "provider": name,
        "prompt": prompt,
        "env": [{"name": k, "value": v.replace("{base_url}", stub.base_url)} for k, v in plain.items()],
        "workspace": {"workingDir": str(work)},
    }
    run = HarnessRun.model_validate({"metadata": {"name": "r", "namespace": "ns"}, "spec": spec})
    with_ = {
        k: [x.replace("{base_url}", stub.base_url) for x in v] if isinstance(v, list) else v
        for k, v in options.items()
    }
    home.mkdir(parents=True)
    if setup_home is not None:
        setup_home(str(home), stub)
    resume = None
    spawn: Any = LocalAgent
    if resumption is not None:
        resume = compute_continuation(resumption, name, definition)
        assert resume is not None and resumption.archive is not None
        restored = base64.b64encode(resumption.archive).decode()

        def spawn(launch: Launch) -> LocalAgent:
            return LocalAgent(dataclasses.replace(launch, session=restored))

    plan = plan_of(run, definition, 1, name, with_, prompt, None, resume=resume)
    # In the pod the runner reads the archive from its run's Secret, checked against the plan's SHA-256
    # (tests/unit/runner/test_session.py); here the launch is handed the archive itself.
    plan = plan.model_copy(update={"session_sha256": None})
    base = {"PATH": f"{Path(found).parent}:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
    keys = {k: v for k, v in env.items() if k in plan.credential_envs}  # a grant's variable: not plain env
    return execute(plan, keys, base_env=base, stderr=io.BytesIO(), spawn=spawn)


@pytest.mark.parametrize("name", RESUMABLE)
def test_a_later_attempt_continues_the_session_from_its_archive(name: str, tmp_path: Path) -> None:
    work = tmp_path / "work"
    with stub_class(ROUTES[name][0])(mode="ok") as stub:
        first = _attempt(name, stub, tmp_path / "home-1", work, FIRST)
        assert first.succeeded, first.message
        assert first.session is not None, "the runner kept no session"
        shutil.rmtree(work)  # the next pod's workspace starts afresh, at the same path
        calls_before = len(stub.model_calls())
        session_id = first.report.session_id
        assert session_id
        resumption = Resumption("a", FIRST, "", provider=name, session_id=session_id, archive=first.session)
        second = _attempt(name, stub, tmp_path / "home-2", work, SECOND, resumption)
        later = [json.dumps(c.body) for c in stub.model_calls()[calls_before:]]
    assert second.succeeded, second.message
    assert later and all("PROMPT-ONE" in body and "PROMPT-TWO" in body for body in later[-1:])
    assert "Hello from the" in later[-1]  # the first answer, too
    assert second.report.session_id == session_id
    assert second.session is not None and len(second.session) >= len(first.session) // 2
