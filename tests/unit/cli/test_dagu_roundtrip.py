"""Dagu round trip on this machine: each fixture DAG imported (a pipeline expanded into the runs it creates,
step by step), run by `harnessctl run` with the fake agent behind every provider, runs in an order Dagu
could run to Succeeded, each with the argv and stdin Dagu gives it."""

import json
import shlex
import sys
from pathlib import Path

import pytest
import yaml
from tests.fakes.dagu import (
    DAGS,
    dagu_dependencies,
    echoed,
    expand,
    expected,
    imported_runs,
    output_variables,
    with_fake_providers,
)

from harness_operator.api.v1alpha1 import HarnessRunStatus
from harness_operator.cli.local_run import run_paths

AGENT = Path(__file__).parents[2] / "fakes" / "agent.py"
LAUNCHER = f"{shlex.quote(sys.executable)} {shlex.quote(str(AGENT))}"


def outputs_in_order(stdout: str) -> list[str]:
    """`harnessctl run` prints the outputs one after another; the fake's are JSON objects."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while at < len(stdout):
        _, end = decoder.raw_decode(stdout, at)
        found.append(stdout[at:end])
        at = end
    return found


@pytest.mark.parametrize("name", DAGS)
def test_imported_dag_runs_locally_as_dagu_would(
    name: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    manifests = with_fake_providers(imported_runs(name), LAUNCHER)
    path = tmp_path / "imported.yaml"
    path.write_text(yaml.safe_dump_all(manifests))
    status_file = tmp_path / "status.yaml"
    assert run_paths([str(path)], str(status_file)) == 0
    out, err = capfd.readouterr()
    statuses = [HarnessRunStatus.model_validate(s) for s in yaml.safe_load_all(status_file.read_text())]
    assert [s.phase for s in statuses] == ["Succeeded"] * len(expected(name))
    order = [line.split()[2].split("/")[1].rstrip(":") for line in err.splitlines() if ": attempt 1/" in line]
    assert order == list(expected(name)), "runs in the pipeline's build_order (the order of the DAG's steps)"
    for index, run in enumerate(order):
        assert dagu_dependencies(name)[run] <= set(order[:index]), f"{run} runs after what Dagu runs first"
    outputs = dict(zip(order, outputs_in_order(out), strict=True))
    variables = output_variables(name)
    for run, want in expected(name).items():
        argv, stdin = echoed(outputs[run])
        assert argv == [expand(a, variables, outputs) for a in want["attempts"][0]], run
        assert stdin == expand(want["stdin"], variables, outputs), run


def test_step_two_prompt_holds_step_one_output(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    manifests = with_fake_providers(imported_runs("plan-implement.yaml"), LAUNCHER)
    # file order reversed: the implement run still goes second
    path = tmp_path / "imported.yaml"
    path.write_text(yaml.safe_dump_all(list(reversed(manifests))))
    assert run_paths([str(path)], None) == 0
    plan, implement = outputs_in_order(capfd.readouterr().out)
    assert echoed(implement)[0][2] == f"Implement this plan: {plan}"
