"""kstatus itself (sigs.k8s.io/cli-utils, what Flux and kpt read) classifies our objects: a tiny Go
helper built from the Go module proxy at the version tests/tools/kstatus/go.mod pins, fed the status
compute_status writes for every phase and reason, and definitions' status."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.tools.gobuilds import kstatus_binary
from tests.unit.core.status.test_status import KSTATUS_CASES, NOW, Observed, run

from harness_operator.core.status.status import compute_definition_status, compute_status

pytestmark = pytest.mark.gotool

VERDICT = {"Reconciling": "InProgress", "Ready": "Current", "Stalled": "Failed"}


@pytest.fixture(scope="session")
def kstatus_bin() -> Path:
    """tests/tools/kstatus (tests/tools/gobuilds.py)."""
    return kstatus_binary()


def verdicts(binary: Path, objects: list[dict[str, Any]]) -> list[str]:
    out = subprocess.run(
        [str(binary)], input=json.dumps(objects), capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return [line.split("\t")[0] for line in out.splitlines()]


def run_object(status: dict[str, Any] | None, generation: int = 1) -> dict[str, Any]:
    body = {"apiVersion": "agentharness.dev/v1alpha1", "kind": "HarnessRun"}
    body["metadata"] = {"name": "r", "namespace": "ns", "generation": generation}
    return {**body, "status": status} if status is not None else body


def test_every_phase_reads_as_kstatus_should(kstatus_bin: Path) -> None:
    objects, expected = [], []
    for observed, spec, _, outcome in KSTATUS_CASES.values():
        objects.append(run_object(compute_status(run(**spec), observed, NOW).to_api()))
        expected.append(VERDICT[outcome])
    assert verdicts(kstatus_bin, objects) == expected
    assert set(expected) == {"InProgress", "Current", "Failed"}


def test_a_spec_change_not_yet_observed_is_in_progress(kstatus_bin: Path) -> None:
    done = compute_status(run(), KSTATUS_CASES["succeeded"][0], NOW).to_api()
    assert verdicts(kstatus_bin, [run_object(done, generation=2)]) == ["InProgress"]


def test_a_run_without_status_reads_current(kstatus_bin: Path) -> None:
    """kstatus' rule for objects it knows nothing of; why docs/gitops.md gives Flux a healthCheckExprs
    entry for runs: between apply and the operator's first status write, a run would read Current."""
    assert verdicts(kstatus_bin, [run_object(None)]) == ["Current"]
    queued = compute_status(run(), Observed(["claude"], waiting=("Queued", "x")), NOW).to_api()
    assert verdicts(kstatus_bin, [run_object(queued)]) == ["InProgress"]


@pytest.mark.parametrize(("spec", "verdict"), [({"binary": "claude"}, "Current"), ({"binary": ""}, "Failed")])
def test_definitions(kstatus_bin: Path, spec: dict[str, Any], verdict: str) -> None:
    body = {"apiVersion": "agentharness.dev/v1alpha1", "kind": "HarnessDefinition"}
    body |= {"metadata": {"name": "d", "generation": 1}, "spec": spec}
    body["status"] = compute_definition_status(body, NOW).to_api()
    assert verdicts(kstatus_bin, [body]) == [verdict]
