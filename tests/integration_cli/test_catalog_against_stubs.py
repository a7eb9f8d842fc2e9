"""Each verified built-in catalog entry, rendered to argv by the operator's own invocation builder,
runs the real CLI successfully against a local vendor stub.

Only the vendor routing (base URL, fake key, a model the stub answers) is added per CLI; the
binary, prefix args, prompt placement and defaults come from the catalog YAML. Marked ``cli``;
a CLI that is not on PATH is skipped (``tests/cli-tools.sh claude codex gemini qwen opencode pi
copilot aider`` installs them all).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any

import pytest
from tests.fixtures.cli import capture as fx
from tests.stubs.run_cli import run, stub_class

pytestmark = pytest.mark.cli

catalog = pytest.importorskip("harness_operator.catalog", reason="the operator package is not importable")
invocation = pytest.importorskip("harness_operator.core.plan.invocation")

# name -> (stub, env, options added to the run, HOME setup)
ROUTES: dict[str, tuple[str, dict[str, str], dict[str, Any], Callable[[str, Any], None] | None]] = {
    "claude": ("anthropic", dict(fx.CLAUDE_ENV, CLAUDE_CODE_MAX_RETRIES="0"), {}, None),
    "codex": ("openai", fx.CODEX_ENV, {"config": [fx.CODEX_PROVIDER[1], fx.CODEX_PROVIDER[3]]}, None),
    "gemini": ("gemini", fx.GEMINI_ENV, {"model": "gemini-2.5-flash"}, fx.gemini_home),
    "qwen": ("openai", fx.QWEN_ENV, {}, None),
    "opencode": ("anthropic", fx.OPENCODE_ENV, {"model": "anthropic/claude-sonnet-4-5"}, None),
    "pi": ("anthropic", fx.PI_ENV, {"provider": "anthropic", "model": "claude-sonnet-4-5"}, fx.pi_home),
    "copilot": ("openai", fx.COPILOT_ENV, {}, None),
    "aider": ("openai", fx.AIDER_ENV, {"model": "gpt-4o", "no_git": True}, None),
}


def _definition(name: str):
    for d in catalog.load_builtin_catalog():
        if d.metadata["name"] == name:
            return d
    raise AssertionError(f"no built-in {name!r}")


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_catalog_entry_runs_against_stub(name, tmp_path):
    definition = _definition(name)
    binary = definition.spec.binary
    if shutil.which(binary) is None:
        pytest.skip(f"`{binary}` is not on PATH (tests/cli-tools.sh {name})")
    stub_name, env, options, setup_home = ROUTES[name]
    inv = invocation.build_invocation(definition.spec, "hi", options=options)
    env = dict(env)
    for e in definition.spec.env:
        env[e.name] = e.value
    with stub_class(stub_name)(mode="ok") as stub:
        code, out, err, _ = run(
            stub,
            inv.argv,
            env,
            timeout=120,
            stdin=inv.stdin,
            home=str(tmp_path / "home"),
            workdir=str(tmp_path / "work"),
            setup_home=setup_home,
        )
        calls = stub.model_calls()
    assert calls, f"{name} made no model call to the stub; argv={inv.argv} stderr={err[-2000:]}"
    assert code == 0, f"argv={inv.argv}\nstdout={out[-2000:]}\nstderr={err[-2000:]}"
    assert "Hello from the" in out
