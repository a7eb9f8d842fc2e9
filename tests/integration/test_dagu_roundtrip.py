"""Dagu round trip on the cluster: each fixture DAG imported (a pipeline as the runs it creates, each
waiting for the runs of the steps before it) and applied, with the fake agent behind every provider, runs
to Succeeded in dependency order; each attempt's argv (the plan) and what the agent received (its output)
are what Dagu executes for that step, step 2's prompt holding step 1's output."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.fakes.dagu import (
    DAGS,
    echoed,
    expand,
    expected,
    imported_runs,
    output_variables,
    with_fake_providers,
)

from .conftest import Api, wait_until
from .test_crd_admission import apply_crds


@pytest.fixture(scope="module", autouse=True)
def crds(kube: client.ApiClient) -> Iterator[None]:
    apply_crds(kube)  # this branch's CRD: the shared cluster may hold another's
    yield


@pytest.mark.parametrize("name", DAGS)
def test_imported_dag_runs_on_the_cluster_as_dagu_would(api: Api, images: dict[str, str], name: str) -> None:
    manifests = with_fake_providers(imported_runs(name), "fake-agent", images["test"])
    # The fakes shadow the built-ins of the same name and are created just before the runs, as one
    # `kubectl apply -f` does: a run's first resolution reads its namespaced definition from the API
    # server, so none starts with the built-in the operator's cache already holds.
    for manifest in manifests:
        api.create(manifest)
    want = expected(name)

    def conditions() -> str:
        return "\n".join(f"{run}: {api.status(run).get('conditions')}" for run in want)

    for run in want:
        wait_until(
            lambda run=run: api.condition(run, "Succeeded").get("status") in ("True", "False"),
            timeout=240,
            what=f"run {run} to finish",
            diagnose=conditions,
        )
    statuses = {run: api.status(run) for run in want}
    assert {run: s["phase"] for run, s in statuses.items()} == dict.fromkeys(want, "Succeeded"), statuses
    outputs = {
        run: api.core.read_namespaced_config_map(f"{run}-output", api.ns).data["output"] for run in want
    }
    variables = output_variables(name)
    for run, expect in want.items():
        attempts = [[expand(a, variables, outputs) for a in argv] for argv in expect["attempts"]]
        plan = api.core.read_namespaced_secret(f"{run}-plan", api.ns).data
        planned = [json.loads(base64.b64decode(plan[f"attempt-{i}.json"])) for i in range(1, len(plan) + 1)]
        assert [p["args"][2:] for p in planned] == attempts, run  # after `sh -c 'exec fake-agent ...'`
        argv, stdin = echoed(outputs[run])
        assert argv == attempts[0], run
        assert stdin == expand(expect["stdin"], variables, outputs), run
    for manifest in manifests:
        if manifest["kind"] != "HarnessRun":
            continue
        spec, run = manifest["spec"], manifest["metadata"]["name"]
        waited = spec.get("after", []) + [
            i["runOutput"]["name"] for i in spec.get("inputs", []) if "runOutput" in i
        ]
        for other in waited:
            assert statuses[run]["startTime"] >= statuses[other]["completionTime"], (run, other)
