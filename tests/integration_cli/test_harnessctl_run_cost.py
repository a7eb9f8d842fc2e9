"""`harnessctl run` drives the real Codex and Gemini CLIs (built-in catalog entries) against the local
vendor stubs: neither reports a cost, so status shows the cost computed from the pinned price table,
and a `maxCostUSD` below it stops the run with CostLimitExceeded."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.fixtures.cli import capture as fx
from tests.integration_cli.harnessctl import harnessctl_run
from tests.stubs.run_cli import stub_class

from harness_operator.core.plan.pricing import PRICE_TABLE

pytestmark = pytest.mark.cli


def run_manifest(tmp_path: Path, provider: str, stub_name: str, limit: float) -> dict[str, Any]:
    """Run one HarnessRun of `provider` against its stub; the status file's document."""
    binary = shutil.which(provider)
    if binary is None and not os.environ.get("CI"):
        pytest.skip(f"`{provider}` is not on PATH (tests/cli-tools.sh {provider})")
    home = tmp_path / "home"
    home.mkdir()
    with stub_class(stub_name)(mode="ok") as stub:
        if provider == "codex":
            config = [fx.CODEX_PROVIDER[1], fx.CODEX_PROVIDER[3].replace("{base_url}", stub.base_url)]
            with_: dict[str, Any] = {"model": "gpt-5.4", "config": config}
            env = [{"name": "CODEX_HOME", "value": str(home / ".codex")}]
            (home / ".codex").mkdir()
        else:
            fx.gemini_home(str(home), stub)
            with_ = {"model": "gemini-2.5-flash"}
            env = [
                {"name": k, "value": v.replace("{base_url}", stub.base_url)}
                for k, v in fx.GEMINI_ENV.items()
                if k != "GEMINI_API_KEY"
            ]
        manifest = {
            "apiVersion": "agentharness.dev/v1alpha1",
            "kind": "HarnessRun",
            "metadata": {"name": f"{provider}-cost", "namespace": "default"},
            "spec": {
                "provider": provider,
                "prompt": "hi",
                "with": with_,
                "workspace": {"workingDir": str(tmp_path / "work")},
                "env": env,
                "limits": {"timeoutSeconds": 120, "maxCostUSD": limit},
            },
        }
        key = "OPENAI_API_KEY" if provider == "codex" else "GEMINI_API_KEY"
        result, status = harnessctl_run(
            json.dumps(manifest), binary, home, {key: "sk-test-harnessctl-cost"}, 180
        )
        assert stub.model_calls(), f"the CLI never reached the stub: {result.stderr[-2000:]}"
    status["_stderr"] = result.stderr
    status["_returncode"] = result.returncode
    return status


@pytest.mark.parametrize(("provider", "stub"), [("codex", "openai"), ("gemini", "gemini")])
def test_cost_is_computed_from_the_price_table(tmp_path: Path, provider: str, stub: str) -> None:
    status = run_manifest(tmp_path, provider, stub, limit=5)
    assert status["_returncode"] == 0, status["_stderr"][-3000:]
    usage = status["usage"]
    assert (usage["costSource"], usage["priceSource"]) == ("computed", PRICE_TABLE)
    assert usage["costUSD"] > 0
    attempt = status["attempts"][0]
    assert attempt["model"] in ("gpt-5.4", "gemini-2.5-flash")
    assert attempt["cliVersion"]


@pytest.mark.parametrize(("provider", "stub"), [("codex", "openai"), ("gemini", "gemini")])
def test_max_cost_stops_on_computed_cost(tmp_path: Path, provider: str, stub: str) -> None:
    status = run_manifest(tmp_path, provider, stub, limit=0.0001)
    assert status["_returncode"] == 124, status["_stderr"][-3000:]
    assert status["reason"] == "CostLimitExceeded"
    assert "(computed) crossed maxCostUSD 0.0001" in status["_stderr"]
    assert status["usage"]["costSource"] == "computed" and status["usage"]["costUSD"] > 0.0001
