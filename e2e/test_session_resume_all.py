"""spec.resumeFrom on the cluster for every built-in that declares sessionResume, the CLIs and the ACP
adapters, each in its catalog image (pi aside: its route below): a second run, in a new pod, continues
the first run's session (the stub sees the first conversation in its request, not a replay, and the
session id is the first run's). About 3 minutes, so only with HARNESS_RESUME_MATRIX=1 (`make
resume-matrix`); `make test` runs Claude Code's and claude-acp's (test_session_resume.py), and every one
against its stub outside the cluster (tests/integration_cli/test_session_resume.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest

from harness_operator.catalog import load_builtin_catalog

from .conftest import Runs
from .test_agents import ROUTES, agent_run

pytestmark = pytest.mark.skipif(
    os.environ.get("HARNESS_RESUME_MATRIX") != "1", reason="the resume matrix: make resume-matrix"
)
RESUMABLE = sorted(d.metadata["name"] for d in load_builtin_catalog() if d.spec.capabilities.session_resume)
# pi's e2e route keeps its agent folder in the workspace (PI_CODING_AGENT_DIR, for the stub's models.json),
# so its sessions are written there, not under the home where its definition keeps them; a routed pi has
# its models in the home. tests/integration_cli/test_session_resume.py resumes pi from its home.
ON_THE_CLUSTER = [p for p in RESUMABLE if p != "pi"]


@pytest.mark.parametrize("provider", ON_THE_CLUSTER)
def test_a_run_continues_the_earlier_runs_session_in_a_new_pod(
    provider: str, runs: Runs, stub: Callable[..., Any], git_repo: Callable[..., Any]
) -> None:
    model = stub(ROUTES[provider]("").vendor, "ok")
    route = ROUTES[provider](model.base_url)
    git = git_repo(route.files) if route.files else None
    runs.create("first", agent_run(runs, provider, route, model.port, git, prompt="PROMPT-ONE: PELICAN."))
    first = runs.wait_finished("first")
    assert first["reason"] == "Succeeded", runs.describe("first")
    assert "session" in first, runs.describe("first")
    before = len(model.model_calls())
    second_spec = agent_run(runs, provider, route, model.port, git, prompt="PROMPT-TWO: the codeword?")
    runs.create("second", {**second_spec, "resumeFrom": {"run": "first"}})
    second = runs.wait_finished("second")
    later = [json.dumps(c.body) for c in model.model_calls()[before:]]
    assert second["reason"] == "Succeeded", runs.describe("first") + "\n----\n" + runs.describe("second")
    assert first["session"]["provider"] == provider
    assert second["attempts"][0]["sessionID"] == first["session"]["sessionID"]
    assert later and "PROMPT-ONE" in later[-1] and "PROMPT-TWO" in later[-1]
    assert "earlier-request" not in later[-1]  # the session itself, not a replay
    assert not [e for e in runs.events("second") if e[1] == "SessionReplayed"]
