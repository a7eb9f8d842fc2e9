"""Named inputs and spec.after on the real cluster: the operator waits, substitutes run 1's output into
run 2's prompt, fails a dependent run when its dependency fails, and keeps a Secret input in the plan."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from .conftest import Api, wait_until
from .operator_env import definition_body, run_body
from .test_crd_admission import apply_crds


@pytest.fixture(scope="module", autouse=True)
def crds(kube: client.ApiClient) -> Iterator[None]:
    apply_crds(kube)  # this branch's CRD: the shared cluster may hold another's
    yield


def test_run_two_prompt_holds_run_one_output(api: Api, fake: Callable[..., None]) -> None:
    fake("fake", "ok")
    api.create(
        run_body(
            "implement",
            {
                "provider": "fake",
                "prompt": "Implement this plan: $(inputs.PLAN) ($(inputs.team))",
                "inputs": [{"name": "PLAN", "runOutput": {"name": "plan"}}, {"name": "team", "value": "a"}],
                "after": ["setup"],
            },
        )
    )
    wait_until(
        lambda: (
            api.condition("implement", "Succeeded").get("message")
            == 'spec.after[0]: waiting for HarnessRun "setup" to exist'
        ),
        timeout=30,
        what="the run to wait for setup",
    )
    api.create(run_body("plan", {"provider": "fake", "prompt": "write a plan", "after": ["setup"]}))
    api.create(run_body("setup", {"provider": "fake", "prompt": "set up"}))
    status = api.wait_finished("implement")
    assert status["phase"] == "Succeeded", status
    assert status["output"]["excerpt"] == (
        "answer from fake-agent: Implement this plan: answer from fake-agent: write a plan (a)"
    )
    assert api.status("plan")["phase"] == "Succeeded"
    started = {name: api.status(name)["startTime"] for name in ("setup", "plan", "implement")}
    assert started["setup"] <= started["plan"] <= started["implement"]


def test_a_failed_dependency_fails_the_run(api: Api, fake: Callable[..., None]) -> None:
    fake("broken", "fail")
    fake("fake", "ok")
    api.create(run_body("second", {"provider": "fake", "prompt": "p", "after": ["first"]}))
    api.create(run_body("first", {"provider": "broken", "prompt": "p"}))
    api.wait_finished("second")
    accepted = api.condition("second", "Accepted")
    assert (accepted["status"], accepted["reason"], accepted["message"]) == (
        "False",
        "RunOutputFailed",
        'spec.after[0]: HarnessRun "first" did not succeed',
    )
    assert api.jobs("second") == []


def test_a_secret_input_reaches_the_plan_only(
    api: Api, fake: Callable[..., None], images: dict[str, str]
) -> None:
    token = "s3cr3t-value-for-inputs"
    api.core.create_namespaced_secret(
        api.ns,
        client.V1Secret(metadata=client.V1ObjectMeta(name="ticket"), string_data={"token": token}),
    )
    api.create(definition_body("echo", images["test"], "echo-stdin", output={"format": "text"}))
    api.create(
        run_body(
            "private",
            {
                "provider": "echo",
                "prompt": "use $(inputs.token)",
                "stdin": "public",
                "inputs": [{"name": "token", "secretKeyRef": {"name": "ticket", "key": "token"}}],
            },
        )
    )
    status = api.wait_finished("private")
    assert status["phase"] == "Succeeded", status
    assert json.loads(status["output"]["excerpt"]) == {"stdin": "public"}
    plan = api.core.read_namespaced_secret("private-plan", api.ns)
    attempt = json.loads(base64.b64decode(plan.data["attempt-1.json"]))
    assert attempt["args"] == [f"use {token}"]
    assert token not in json.dumps(api.run("private"))
    assert not [m for m in api.events("private") if token in m]
