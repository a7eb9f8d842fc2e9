"""The operator end to end on the real cluster: a real kube-apiserver, Job controller and kubelet run the
sandbox image; the operator runs as a process under exactly the chart's RBAC."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from harness_operator.api.v1alpha1 import GROUP, VERSION
from harness_operator.controller.kube import Kube
from harness_operator.core.objects.naming import end_event_name

from .conftest import Api, wait_until
from .operator_env import OperatorProcess, definition_body, git_run_spec, run_body, serve_git


def test_run_succeeds_with_usage_cost_and_output(
    api: Api, fake: Callable[..., None], operator: OperatorProcess
) -> None:
    fake("fake", "ok")
    started = time.monotonic()
    api.create(
        run_body("hello", {"provider": "fake", "prompt": "say hi", "workspace": {"workingDir": "/workspace"}})
    )
    wait_until(lambda: api.jobs("hello"), timeout=30, what="the attempt's Job")
    to_job = time.monotonic() - started
    status = api.wait_finished("hello")
    to_done = time.monotonic() - started
    print(f"\nmeasured: apply -> Job {to_job:.2f}s, apply -> Succeeded {to_done:.2f}s")
    assert status["phase"] == "Succeeded", status
    assert status["exitCode"] == 0
    assert status["usage"]["inputTokens"] == 10
    assert status["usage"]["outputTokens"] == 5
    assert status["usage"]["costUSD"] == 0.01
    assert status["usage"]["costSource"] == "reported"
    assert status["output"]["excerpt"] == "answer from fake-agent: say hi"
    assert status["attempts"][0]["sessionID"] == "fake-1"
    assert status["attempts"][0]["model"] == "fake-model"
    cm = api.core.read_namespaced_config_map(status["output"]["configMapName"], api.ns)
    assert cm.data["output"] == "answer from fake-agent: say hi"
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "Accepted": "True",
        "Succeeded": "True",
        "Ready": "True",
    }
    assert status["observedGeneration"] == 1
    metrics = operator.metrics()
    assert (
        f'harness_runs_total{{namespace="{api.ns}",phase="Succeeded",provider="fake",reason="Succeeded"}}'
        in metrics
    )
    assert (
        f'harness_tokens_total{{model="fake-model",namespace="{api.ns}",provider="fake",type="input"}}'
        in metrics
    )
    run = api.run("hello")
    ended = [
        e
        for e in api.core.list_namespaced_event(api.ns, field_selector="involvedObject.name=hello").items
        if e.reason == "Succeeded"
    ]
    assert [e.metadata.name for e in ended] == [end_event_name("hello", run["metadata"]["uid"])]
    # An operator killed after posting the end but before the status patch posts it again: refused (409)
    # and ignored, so the run still has one end Event.
    Kube(api.core.api_client).create_event(run, "Normal", "Succeeded", "again", ended[0].metadata.name)
    again = api.core.list_namespaced_event(api.ns, field_selector="involvedObject.name=hello").items
    assert [e.message for e in again if e.reason == "Succeeded"] == [ended[0].message]


REVIEW_SCHEMA = {
    "type": "object",
    "required": ["verdict"],
    "properties": {"verdict": {"enum": ["approve", "changes"]}, "findings": {"type": "array"}},
}


def test_structured_output_is_validated_kept_as_json_and_one_field_feeds_a_later_run(
    api: Api, fake: Callable[..., None]
) -> None:
    def answering(name: str, answer: str) -> None:
        env = [{"name": "FAKE_MODE", "value": "answer"}, {"name": "FAKE_ANSWER", "value": answer}]
        fake(name, "answer", env=env)

    answering("reviewer", '```json\n{"verdict": "changes", "findings": [{"file": "a.py"}]}\n```')
    answering("rambler", '{"verdict": "sk-live-not-for-status", "findings": []}')
    fake("echo", "ok")
    api.create(run_body("so-review", {"provider": "reviewer", "prompt": "p", "outputSchema": REVIEW_SCHEMA}))
    api.create(run_body("so-bad", {"provider": "rambler", "prompt": "p", "outputSchema": REVIEW_SCHEMA}))
    api.create(
        run_body(
            "so-next",
            {
                "provider": "echo",
                "prompt": "verdict=$(inputs.V)",
                "inputs": [{"name": "V", "runOutput": {"name": "so-review", "path": "verdict"}}],
            },
        )
    )
    api.create(run_body("so-schema", {"provider": "echo", "prompt": "p", "outputSchema": {"type": 5}}))
    good = api.wait_finished("so-review")
    assert good["phase"] == "Succeeded", good
    cm = api.core.read_namespaced_config_map(good["output"]["configMapName"], api.ns)
    assert cm.data["output.json"] == '{"findings":[{"file":"a.py"}],"verdict":"changes"}'
    bad = api.wait_finished("so-bad")
    assert (bad["phase"], bad["reason"]) == ("Failed", "OutputInvalid"), bad
    assert bad["message"] == (
        "spec.outputSchema: the output does not match at $.verdict: not one of the values the schema allows "
        "(enum)"
    )
    assert all("sk-live" not in c["message"] for c in bad["conditions"])  # the output's excerpt only
    assert bad["attempts"][0]["exitCode"] == 0 and len(bad["attempts"]) == 1
    following = api.wait_finished("so-next")
    assert following["phase"] == "Succeeded", following
    assert following["output"]["excerpt"] == "answer from fake-agent: verdict=changes"
    refused = api.wait_finished("so-schema")
    assert (refused["reason"], api.condition("so-schema", "Accepted")["status"]) == ("InvalidSpec", "False")
    assert refused["message"].startswith("spec.outputSchema.type: not a valid JSON Schema (2020-12): ")


def test_sandbox_pod_is_locked_down(api: Api, fake: Callable[..., None]) -> None:
    fake("fake", "ok")
    api.create(run_body("locked", {"provider": "fake", "prompt": "x", "sandbox": {"networkPolicy": "none"}}))
    api.wait_finished("locked")
    pod = api.core.list_namespaced_pod(api.ns, label_selector="agentharness.dev/run=locked").items[0]
    assert pod.spec.automount_service_account_token is False
    assert pod.spec.containers[0].security_context.read_only_root_filesystem is True
    policy = api.net.read_namespaced_network_policy("locked-a1", api.ns)
    assert policy.spec.egress in (None, [])
    assert policy.spec.policy_types == ["Ingress", "Egress"]


def test_failing_provider_falls_back(api: Api, fake: Callable[..., None], operator: OperatorProcess) -> None:
    fake("broken", "fail")
    fake("fake", "ok")
    api.create(run_body("fb", {"provider": "broken", "prompt": "p", "fallback": [{"provider": "fake"}]}))
    status = api.wait_finished("fb")
    assert status["phase"] == "Succeeded", status
    assert [(a["provider"], a["exitCode"]) for a in status["attempts"]] == [("broken", 3), ("fake", 0)]
    line = "harness: attempt 1/2 with broken failed; trying fallback 2/2 with fake"
    assert line in api.events("fb")
    # At INFO the operator's log tells the same story, one JSON line per Event it posted.
    logged = [json.loads(x) for x in operator.log_path.read_text().splitlines() if '"Event posted"' in x]
    mine = [(e["level"], e["reason"]) for e in logged if e.get("run") == f"{api.ns}/fb"]
    assert ("info", "FallingBack") in mine and ("info", "Succeeded") in mine, mine
    assert len(api.jobs("fb")) == 2


def test_an_option_the_cli_does_not_know_is_a_warning_event(api: Api, fake: Callable[..., None]) -> None:
    fake("known", "ok", knownOptions=["model", "max-turns"], kebabCaseFlags=True)
    api.create(run_body("typo", {"provider": "known", "prompt": "p", "with": {"max_turn": 3, "model": "m"}}))
    api.wait_finished("typo")
    line = (
        'attempt 1: spec.with.max_turn: provider "known" has no option --max-turn, so the CLI would refuse '
        "it and the attempt fail; did you mean max-turns?"
    )
    assert api.events("typo").count(line) == 1, api.events("typo")


def test_a_kueue_queue_on_a_cluster_without_kueue_fails_the_run_at_once(
    api: Api, fake: Callable[..., None]
) -> None:
    fake("fake", "ok")
    body = run_body("queued", {"provider": "fake", "prompt": "p"})
    body["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "agents"}
    api.create(body)
    status = api.wait_finished("queued")
    assert (status["phase"], status["reason"]) == ("Failed", "QueueUnavailable"), status
    assert 'names the queue "agents"' in status["message"] and "install Kueue" in status["message"]
    assert api.jobs("queued") == []  # no Job left suspended


def test_all_providers_failing(api: Api, fake: Callable[..., None]) -> None:
    fake("broken", "fail")
    fake("broken2", "fail")
    api.create(
        run_body("allfail", {"provider": "broken", "prompt": "p", "fallback": [{"provider": "broken2"}]})
    )
    status = api.wait_finished("allfail")
    assert (status["phase"], status["exitCode"], status["reason"]) == ("Failed", 3, "ProviderFailed")
    assert len(status["attempts"]) == 2


def test_timeout_stops_and_skips_fallback(api: Api, fake: Callable[..., None]) -> None:
    fake("slow", "hang")
    fake("fake", "ok")
    api.create(
        run_body(
            "slow",
            {
                "provider": "slow",
                "prompt": "p",
                "fallback": [{"provider": "fake"}],
                "limits": {"timeoutSeconds": 3, "gracePeriodSeconds": 2},
            },
        )
    )
    status = api.wait_finished("slow")
    assert (status["phase"], status["exitCode"], status["reason"]) == ("Failed", 124, "Timeout")
    assert len(api.jobs("slow")) == 1


def test_cancel(api: Api, fake: Callable[..., None]) -> None:
    fake("slow", "hang")
    api.create(run_body("cx", {"provider": "slow", "prompt": "p", "limits": {"gracePeriodSeconds": 2}}))
    wait_until(lambda: api.status("cx").get("phase") == "Running", timeout=60, what="the run to be Running")
    api.custom.patch_namespaced_custom_object(
        GROUP, VERSION, api.ns, "harnessruns", "cx", {"spec": {"cancel": True}}
    )
    status = api.wait_finished("cx", timeout=60)
    assert (status["phase"], status["exitCode"], status["reason"]) == ("Cancelled", 124, "Cancelled")
    wait_until(lambda: not api.jobs("cx"), timeout=60, what="the cancelled Job to be gone")


def test_delete_collects_children(api: Api, fake: Callable[..., None]) -> None:
    fake("fake", "ok")
    api.create(run_body("gc", {"provider": "fake", "prompt": "p"}))
    status = api.wait_finished("gc")
    assert api.jobs("gc")
    api.custom.delete_namespaced_custom_object(GROUP, VERSION, api.ns, "harnessruns", "gc")

    def gone() -> bool:
        secrets = api.core.list_namespaced_secret(api.ns, label_selector="agentharness.dev/run=gc").items
        cms = api.core.list_namespaced_config_map(api.ns, label_selector="agentharness.dev/run=gc").items
        pols = api.net.list_namespaced_network_policy(api.ns, label_selector="agentharness.dev/run=gc").items
        return not (api.jobs("gc") or secrets or cms or pols)

    wait_until(gone, timeout=60, what="garbage collection of the run's children")
    assert status["output"]["configMapName"] == "gc-output"


def test_unknown_provider(api: Api) -> None:
    api.create(run_body("nope", {"provider": "no-such-agent", "prompt": "p"}))
    status = api.wait_finished("nope", timeout=30)
    accepted = api.condition("nope", "Accepted")
    assert (accepted["status"], accepted["reason"], accepted["message"]) == (
        "False",
        "UnknownProvider",
        'unknown provider "no-such-agent"',
    )
    assert status["phase"] == "Failed"
    assert api.jobs("nope") == []


def test_chaining_through_run_output(api: Api, fake: Callable[..., None], images: dict[str, str]) -> None:
    fake("fake", "ok")
    api.create(definition_body("echo", images["test"], "echo-stdin", output={"format": "text"}))
    api.create(
        run_body(
            "second", {"provider": "echo", "prompt": "review", "stdinFrom": {"runOutput": {"name": "first"}}}
        )
    )
    wait_until(
        lambda: api.condition("second", "Succeeded").get("reason") == "WaitingForRunOutput",
        timeout=30,
        what="the second run to wait for the first",
    )
    api.create(run_body("first", {"provider": "fake", "prompt": "plan"}))
    status = api.wait_finished("second")
    assert status["phase"] == "Succeeded", status
    assert status["output"]["excerpt"].strip() == '{"stdin": "answer from fake-agent: plan"}'


def test_queue_is_first_come_first_served(api: Api, fake: Callable[..., None]) -> None:
    """At the limit of 2, the runs created first take the slots, the others wait in creation order with
    their position, and each freed slot goes to the earliest waiting run."""
    fake("slow", "hang")
    names = ("q1", "q2", "q3", "q4")
    for name in names:  # one after the other: creation time, then the name, orders them
        api.create(run_body(name, {"provider": "slow", "prompt": "p", "limits": {"gracePeriodSeconds": 1}}))

    def queued() -> dict[str, str]:
        conditions = {n: api.condition(n, "Succeeded") for n in names}
        return {n: c.get("message", "") for n, c in conditions.items() if c.get("reason") == "Queued"}

    waiting = wait_until(lambda: len(queued()) == 2 and queued(), timeout=60, what="two runs queued")
    assert sorted(waiting) == ["q3", "q4"]
    # each message is as of that run's reconcile, which may have come before q1 or q2 took its slot
    form = rf"position (\d) of \d in the queue of namespace {api.ns} \(\d runs in flight, limit 2\)"
    assert all(re.fullmatch(form, message) for message in waiting.values()), waiting
    assert [n for n in names if api.jobs(n)] == ["q1", "q2"]
    api.custom.patch_namespaced_custom_object(
        GROUP, VERSION, api.ns, "harnessruns", "q2", {"spec": {"cancel": True}}
    )
    wait_until(lambda: api.jobs("q3"), timeout=60, what="q3 to start once q2 ended")
    assert api.jobs("q4") == []  # one slot freed: the earliest waiting run took it, not every one
    assert "q4" in queued()  # its message keeps the position of its last reconcile: no write per move
    for name in names:
        api.custom.patch_namespaced_custom_object(
            GROUP, VERSION, api.ns, "harnessruns", name, {"spec": {"cancel": True}}
        )


def test_operator_killed_and_restarted_mid_run(
    api: Api, images: dict[str, str], operator: OperatorProcess
) -> None:
    body = definition_body("sleepy", images["test"], "ok")
    body["spec"].update({"binary": "/bin/sh", "prefixArgs": ["-c", 'sleep 6; exec fake-agent "$@"', "sh"]})
    api.create(body)
    api.create(run_body("survivor", {"provider": "sleepy", "prompt": "p"}))
    wait_until(lambda: api.jobs("survivor"), timeout=30, what="the Job")
    operator.kill()
    wait_until(
        lambda: (api.jobs("survivor")[0].status.succeeded or 0) == 1, timeout=90, what="the Job to finish"
    )
    operator.start()
    status = api.wait_finished("survivor")
    assert status["phase"] == "Succeeded", status
    assert len(api.jobs("survivor")) == 1
    assert status["output"]["excerpt"] == "answer from fake-agent: p"


def test_operator_rbac_is_least_privilege(kube: client.ApiClient, service_account_client: Any) -> None:
    sa = service_account_client("harness-system", "harness-operator")
    authz = client.AuthorizationV1Api(sa)

    def allowed(verb: str, resource: str, group: str = "", subresource: str = "") -> bool:
        review = client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(
                    verb=verb, resource=resource, group=group, subresource=subresource, namespace="default"
                )
            )
        )
        return bool(authz.create_self_subject_access_review(review).status.allowed)

    assert allowed("create", "jobs", "batch")
    assert allowed("patch", "harnessruns", "agentharness.dev", "status")
    assert not allowed("update", "harnessruns", "agentharness.dev")
    assert not allowed("delete", "secrets")
    assert not allowed("list", "secrets")
    assert not allowed("create", "pods")
    assert not allowed("update", "jobs", "batch")
    with pytest.raises(ApiException) as caught:
        client.CoreV1Api(sa).list_namespaced_secret("default")
    assert caught.value.status == 403


def test_git_workspace_is_cloned_into_the_working_dir(
    api: Api, images: dict[str, str], tmp_path: Path
) -> None:
    body = definition_body("reader", images["test"], "ok", output={"format": "text"})
    body["spec"].update(
        {"binary": "/bin/sh", "prefixArgs": ["-c", "cat README.md; git log --format=%s", "sh"]}
    )
    api.create(body)
    with serve_git(tmp_path, {"README.md": "hello from git\n"}) as (url, port):
        api.create(run_body("cloned", git_run_spec("reader", url, port)))
        status = api.wait_finished("cloned")
    assert status["phase"] == "Succeeded", status
    assert status["output"]["excerpt"] == "hello from git\nfirst\n"
