"""kstatus itself (sigs.k8s.io/cli-utils, what Flux and kpt read) classifies our objects: a tiny Go
helper built from the Go module proxy at the version tests/tools/kstatus/go.mod pins, fed the status
compute_status writes for every phase and reason, and definitions' status."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from tests.unit.core.test_status import KSTATUS_CASES, NOW, Observed, run

from harness_operator.core.status import compute_definition_status, compute_status

pytestmark = pytest.mark.gotool

SOURCE = Path(__file__).resolve().parent / "kstatus"
CACHE = Path(os.environ.get("HARNESS_KSTATUS_CACHE", "/var/cache/harness-operator/kstatus"))
VERDICT = {"Reconciling": "InProgress", "Ready": "Current", "Stalled": "Failed"}


@pytest.fixture(scope="session")
def kstatus_bin() -> Path:
    """`go build` of tests/tools/kstatus, cached per source and Go version."""
    go = shutil.which("go")
    assert go, "go is needed to build the kstatus helper"
    go_version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout
    key = hashlib.sha256(
        b"".join((SOURCE / f).read_bytes() for f in ("go.mod", "go.sum", "main.go")) + go_version.encode()
    ).hexdigest()[:16]
    binary = CACHE / key / "kstatus"
    if not binary.exists():
        binary.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=binary.parent) as out:
            subprocess.run(
                [go, "build", "-mod=readonly", "-o", f"{out}/kstatus", "."],
                cwd=SOURCE,
                env={**os.environ, "CGO_ENABLED": "0"},
                capture_output=True,
                check=True,
                timeout=900,
            )
            os.replace(Path(out) / "kstatus", binary)
    return binary


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
