"""The Argo CD health check (charts/harness-operator/files/argocd-health.lua) run by a real Lua 5.1
interpreter (Argo CD runs gopher-lua, Lua 5.1 semantics) on the status compute_status writes for every
phase and reason, on runs without status or with an unseen spec, and on definitions."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.unit.core.status.test_status import KSTATUS_CASES, NOW, SUSPENDED, Observed, ObservedAttempt, run

from harness_operator.core.status.status import compute_definition_status, compute_status

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "charts" / "harness-operator" / "files" / "argocd-health.lua"
HEALTH = {"Reconciling": "Progressing", "Ready": "Healthy", "Stalled": "Degraded"}


def lua_literal(value: Any) -> str:
    """A Python JSON value as a Lua table constructor (what Argo CD hands the script as `obj`)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"[{lua_literal(k)}] = {lua_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "{" + ", ".join(lua_literal(v) for v in value) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{text}"'


def health(obj: dict[str, Any]) -> tuple[str, str]:
    lua = shutil.which("lua5.1")
    if lua is None:
        pytest.fail("lua5.1 is not installed: apt-get install lua5.1 (.ci/run installs it)")
    program = (
        f"obj = {lua_literal(obj)}\n"
        f"local hs = (function()\n{SCRIPT.read_text()}\nend)()\n"
        'io.write(hs.status, "\\t", hs.message)\n'
    )
    out = subprocess.run([lua, "-"], input=program, capture_output=True, text=True, check=True, timeout=30)
    status, message = out.stdout.split("\t", 1)
    return status, message


def run_object(status: dict[str, Any] | None, generation: int = 1) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "agentharness.dev/v1alpha1", "kind": "HarnessRun"}
    body["metadata"] = {"name": "r", "namespace": "ns", "generation": generation}
    return {**body, "status": status} if status is not None else body


@pytest.mark.parametrize(
    ("observed", "spec", "outcome"),
    [(o, s, outcome) for o, s, _, outcome in KSTATUS_CASES.values()],
    ids=list(KSTATUS_CASES),
)
def test_every_phase(observed: Observed, spec: dict[str, Any], outcome: str) -> None:
    status = compute_status(run(**spec), observed, NOW)
    got, message = health(run_object(status.to_api()))
    assert got == ("Suspended" if status.reason == "Suspended" else HEALTH[outcome])
    if outcome != "Ready":  # the reason travels with the verdict
        assert message.startswith(f"{status.reason}: ")


def test_a_run_kueue_holds_back_is_suspended() -> None:
    why = 'LocalQueue "team-a": insufficient quota'
    held = Observed(["claude"], [ObservedAttempt(1, "claude", "r-a1", state=SUSPENDED, waiting=why)])
    assert health(run_object(compute_status(run(), held, NOW).to_api()))[0] == "Suspended"
    # Before Kueue says why (no Workload yet, or not judged yet) the run is on its way: Progressing.
    routine = Observed(["claude"], [ObservedAttempt(1, "claude", "r-a1", state=SUSPENDED)])
    assert health(run_object(compute_status(run(), routine, NOW).to_api()))[0] == "Progressing"


def test_no_status_or_an_unseen_spec_is_never_healthy() -> None:
    done = compute_status(run(), KSTATUS_CASES["succeeded"][0], NOW).to_api()
    assert health(run_object(None))[0] == "Progressing"
    assert health(run_object(done, generation=2)) == (
        "Progressing",
        "harness-operator has not seen the latest spec yet",
    )


@pytest.mark.parametrize(
    ("kind", "spec", "expected"),
    [
        ("HarnessDefinition", {"binary": "claude"}, "Healthy"),
        ("ClusterHarnessDefinition", {"binary": "claude"}, "Healthy"),
        ("HarnessDefinition", {"binary": ""}, "Degraded"),
    ],
)
def test_definitions(kind: str, spec: dict[str, Any], expected: str) -> None:
    body: dict[str, Any] = {"apiVersion": "agentharness.dev/v1alpha1", "kind": kind}
    body |= {"metadata": {"name": "d", "generation": 1}, "spec": spec}
    body["status"] = compute_definition_status(body, NOW).to_api()
    assert health(body)[0] == expected


def test_the_guides_argocd_snippet_is_the_charts_script() -> None:
    """docs/gitops.md carries the script once per kind, indented under argocd-cm's keys."""
    doc = (ROOT / "docs" / "gitops.md").read_text()
    indented = "".join(
        ("    " + line if line.strip() else line) for line in SCRIPT.read_text().splitlines(True)
    )
    for kind in ("HarnessRun", "HarnessDefinition", "ClusterHarnessDefinition"):
        assert f"  resource.customizations.health.agentharness.dev_{kind}: |\n{indented}" in doc
