"""HarnessPipelines on the real cluster, with the operator under the chart's RBAC and admission: a DAG
with a fan-out, a fan-in judge with a structured output, a step reading one field of it, a failed step
skipping what depends on it; the runs created as the pipeline's ServiceAccount; cancel mid-way; delete
cascading; and a pipeline naming a ServiceAccount its author may not act as refused at apply."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from harness_operator.api.v1alpha1 import GROUP, VERSION
from harness_operator.core.forge.report import ANNOTATION_REPORTED
from harness_operator.core.objects.naming import (
    ANNOTATION_AUTHOR,
    ANNOTATION_REPOSITORY,
    ANNOTATION_THREAD_KIND,
    LABEL_THREAD,
    LABEL_TRIGGER,
)
from harness_operator.core.schedule import LABEL_SCHEDULE
from tests.fakes.dagu import import_fixture
from tests.lib.forge_deliveries import trigger_body

from .conftest import Api, wait_until
from .operator_env import RELEASE_NAMESPACE, SERVICE_ACCOUNT

RUNNER = "pipeline-runner"
TENANT = "pipeline-tenant"


def rbac(
    kube: client.ApiClient,
    namespace: str,
    name: str,
    rules: list[client.V1PolicyRule],
    subject: tuple[str, str],
) -> None:
    api = client.RbacAuthorizationV1Api(kube)
    api.create_namespaced_role(namespace, client.V1Role(metadata={"name": name}, rules=rules))
    api.create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata={"name": name},
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=name),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name=subject[1], namespace=subject[0])],
        ),
    )


def grant_account(kube: client.ApiClient, namespace: str, account: str) -> None:
    """A pipelines' ServiceAccount that may create and read runs, which the operator may act as (the Roles
    a team grants, README: Pipelines)."""
    core = client.CoreV1Api(kube)
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata={"name": account}))
    runs = client.V1PolicyRule(api_groups=[GROUP], resources=["harnessruns"], verbs=["create", "get", "list"])
    rbac(kube, namespace, account, [runs], (namespace, account))
    act_as = client.V1PolicyRule(
        api_groups=[""], resources=["serviceaccounts"], verbs=["impersonate"], resource_names=[account]
    )
    rbac(kube, namespace, f"operator-acts-as-{account}", [act_as], (RELEASE_NAMESPACE, SERVICE_ACCOUNT))


@pytest.fixture
def runner(kube: client.ApiClient, namespace: str) -> Iterator[str]:
    grant_account(kube, namespace, RUNNER)
    yield RUNNER


class Pipelines:
    def __init__(self, api: Api) -> None:
        self.api = api

    def create(
        self, name: str, steps: list[dict[str, Any]], account: str = RUNNER, **metadata: dict[str, str]
    ) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "HarnessPipeline",
            "metadata": {"name": name, **metadata},
            "spec": {"serviceAccountName": account, "steps": steps},
        }
        self.api.custom.create_namespaced_custom_object(GROUP, VERSION, self.api.ns, "harnesspipelines", body)

    def get(self, name: str) -> dict[str, Any]:
        return self.api.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.api.ns, "harnesspipelines", name
        )

    def status(self, name: str) -> dict[str, Any]:
        return self.get(name).get("status") or {}

    def steps(self, name: str) -> dict[str, str]:
        return {s["name"]: s["phase"] for s in self.status(name).get("steps", [])}

    def succeeded(self, name: str) -> dict[str, Any]:
        return next((c for c in self.status(name).get("conditions", []) if c["type"] == "Succeeded"), {})

    def runs(self, name: str) -> list[dict[str, Any]]:
        listed = self.api.custom.list_namespaced_custom_object(
            GROUP, VERSION, self.api.ns, "harnessruns", label_selector=f"agentharness.dev/pipeline={name}"
        )
        return sorted(listed["items"], key=lambda r: r["metadata"]["name"])

    def output(self, run: str) -> str:
        return str(self.api.status(run).get("output", {}).get("excerpt", ""))


def step(name: str, provider: str, prompt: str, **more: Any) -> dict[str, Any]:
    spec = more.pop("spec", {})
    return {"name": name, **more, "run": {"spec": {"provider": provider, "prompt": prompt, **spec}}}


def test_a_fan_out_a_judge_a_field_of_its_verdict_and_a_failure_skipping_its_dependent(
    api: Api, fake: Callable[..., None], runner: str
) -> None:
    fake("quick-a", "ok")
    fake("quick-b", "ok")
    fake(
        "judge",
        "answer",
        env=[
            {"name": "FAKE_MODE", "value": "answer"},
            {"name": "FAKE_ANSWER", "value": '{"winner": "quick-b"}'},
        ],
    )
    fake("broken", "fail")
    pipelines = Pipelines(api)
    pipelines.create(
        "review",
        [
            step("plan", "quick-a", "plan the work"),
            step(
                "impl",
                "quick-a",
                "implement with $(matrix.provider): $(steps.plan.output)",
                after=["plan"],
                matrix={"providers": ["quick-a", "quick-b"]},
            ),
            step(
                "judge",
                "judge",
                "pick one of:\n$(steps.impl.output)",
                after=["impl"],
                spec={
                    "outputSchema": {
                        "type": "object",
                        "required": ["winner"],
                        "properties": {"winner": {"type": "string"}},
                    }
                },
            ),
            step("report", "quick-a", "the winner is $(steps.judge.output.winner)", after=["judge"]),
            step("lint", "broken", "lint it"),
            step("after-lint", "quick-a", "never", after=["lint"]),
        ],
    )
    wait_until(
        lambda: pipelines.succeeded("review").get("status") in ("True", "False"),
        timeout=300,
        what="pipeline review to end",
    )
    assert pipelines.steps("review") == {
        "plan": "Succeeded",
        "impl": "Succeeded",
        "judge": "Succeeded",
        "report": "Succeeded",
        "lint": "Failed",
        "after-lint": "Skipped",
    }
    succeeded = pipelines.succeeded("review")
    assert (succeeded["status"], succeeded["reason"], succeeded["message"]) == (
        "False",
        "StepFailed",
        "failed: step lint",
    )
    assert pipelines.get("review")["status"]["phase"] == "Failed"
    runs = {r["metadata"]["name"]: r for r in pipelines.runs("review")}
    assert sorted(runs) == [
        "review-impl-0",
        "review-impl-1",
        "review-judge",
        "review-lint",
        "review-plan",
        "review-report",
    ]
    for run in runs.values():  # created as the pipeline's ServiceAccount, owned by the pipeline
        assert run["metadata"]["annotations"][ANNOTATION_AUTHOR] == f"system:serviceaccount:{api.ns}:{runner}"
        owner = run["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("HarnessPipeline", "review", True)
    # each fanned-out run got its provider and the plan's output; the judge read both under headings
    assert "implement with quick-b: answer from fake-agent: plan the work" in pipelines.output(
        "review-impl-1"
    )
    assert runs["review-impl-1"]["spec"]["provider"] == "quick-b"
    judge_prompt = runs["review-judge"]["spec"]["prompt"]
    assert judge_prompt == (
        "pick one of:\n### impl (provider: quick-a)\n$(inputs.steps-impl-0)\n\n### impl (provider: quick-b)\n"
        "$(inputs.steps-impl-1)"
    )
    assert pipelines.output("review-report") == "answer from fake-agent: the winner is quick-b"
    status = pipelines.status("review")
    assert [r["name"] for s in status["steps"] if s["name"] == "impl" for r in s["runs"]] == [
        "review-impl-0",
        "review-impl-1",
    ]
    assert status["completionTime"] and status["startTime"]
    events = api.events("review")
    assert "created run review-judge for step judge" in events
    assert "failed: step lint" in events


def test_cancel_mid_way_cancels_the_running_run_and_starts_nothing_more_and_delete_cascades(
    api: Api, fake: Callable[..., None], runner: str
) -> None:
    fake("slow", "hang")
    fake("quick", "ok")
    pipelines = Pipelines(api)
    pipelines.create(
        "long", [step("work", "slow", "work long"), step("next", "quick", "then", after=["work"])]
    )
    wait_until(
        lambda: api.condition("long-work", "Succeeded").get("reason") == "Running",
        timeout=120,
        what="the first step to run",
    )
    api.custom.patch_namespaced_custom_object(
        GROUP, VERSION, api.ns, "harnesspipelines", "long", {"spec": {"cancel": True}}
    )
    wait_until(
        lambda: pipelines.succeeded("long").get("reason") == "Cancelled",
        timeout=120,
        what="the pipeline to end cancelled",
    )
    assert api.run("long-work")["spec"]["cancel"] is True
    assert api.condition("long-work", "Succeeded")["reason"] == "Cancelled"
    assert pipelines.steps("long") == {"work": "Cancelled", "next": "Cancelled"}
    assert [r["metadata"]["name"] for r in pipelines.runs("long")] == ["long-work"]
    api.custom.delete_namespaced_custom_object(GROUP, VERSION, api.ns, "harnesspipelines", "long")
    wait_until(lambda: pipelines.runs("long") == [], timeout=60, what="the pipeline's runs to go with it")


def test_a_triggers_pipeline_hands_its_forge_context_to_its_runs_and_each_is_reported(
    api: Api, fake: Callable[..., None], runner: str
) -> None:
    """As the receiver makes it (tests/integration/test_trigger_receiver.py): the trigger's labels and
    the delivery's annotations on the pipeline; each run carries them, so the reporting step takes it as
    the trigger's (this trigger names no token: the stage is recorded, nothing is sent)."""
    fake("quick", "ok")
    trigger = trigger_body("fixer", runner)
    api.custom.create_namespaced_custom_object(GROUP, VERSION, api.ns, "harnesstriggers", trigger)
    pipelines = Pipelines(api)
    pipelines.create(
        "fixer-3-0123456789",
        [step("draft", "quick", "fix it"), step("check", "quick", "$(steps.draft.output)", after=["draft"])],
        labels={LABEL_TRIGGER: "fixer", LABEL_THREAD: "3"},
        annotations={ANNOTATION_REPOSITORY: "acme/payments", ANNOTATION_THREAD_KIND: "issue"},
    )
    wait_until(
        lambda: pipelines.succeeded("fixer-3-0123456789").get("status") == "True",
        timeout=180,
        what="the trigger's pipeline to succeed",
    )
    runs = pipelines.runs("fixer-3-0123456789")
    assert [r["metadata"]["name"] for r in runs] == ["fixer-3-0123456789-check", "fixer-3-0123456789-draft"]
    for run in runs:
        labels, annotations = run["metadata"]["labels"], run["metadata"]["annotations"]
        assert (labels[LABEL_TRIGGER], labels[LABEL_THREAD]) == ("fixer", "3")
        assert annotations[ANNOTATION_REPOSITORY] == "acme/payments"
    wait_until(
        lambda: all(
            api.run(r["metadata"]["name"])["metadata"]["annotations"].get(ANNOTATION_REPORTED) == "finished"
            for r in runs
        ),
        timeout=60,
        what="the reporting step to record each run's end",
    )


def test_a_pipeline_may_name_only_a_service_account_its_author_may_act_as(
    api: Api, kube: client.ApiClient, runner: str, service_account_client: Callable[..., client.ApiClient]
) -> None:
    core = client.CoreV1Api(kube)
    core.create_namespaced_service_account(api.ns, client.V1ServiceAccount(metadata={"name": TENANT}))
    may = client.V1PolicyRule(api_groups=[GROUP], resources=["harnesspipelines"], verbs=["create", "get"])
    rbac(kube, api.ns, TENANT, [may], (api.ns, TENANT))
    tenant = Pipelines(Api(service_account_client(api.ns, TENANT), api.ns))
    message = wait_until(lambda: _refusal(tenant), timeout=30, what="the policy to refuse the pipeline")
    assert (
        f'spec.serviceAccountName: user "system:serviceaccount:{api.ns}:{TENANT}" may not act as ServiceAccount '
        f'"{RUNNER}" (verb impersonate on serviceaccounts)'
    ) in message
    act_as = client.V1PolicyRule(
        api_groups=[""], resources=["serviceaccounts"], verbs=["impersonate"], resource_names=[RUNNER]
    )
    rbac(kube, api.ns, f"{TENANT}-acts", [act_as], (api.ns, TENANT))
    wait_until(
        lambda: _admitted(tenant),
        timeout=30,
        what="the tenant, now allowed to act as the runner, to be admitted",
    )


def _refusal(tenant: Pipelines) -> str | None:
    """The admission policy's refusal of a pipeline naming the runner; None while RBAC settles."""
    try:
        tenant.create("borrowed", [step("a", "quick", "x")])
    except ApiException as exc:
        message = str(json.loads(exc.body or "{}").get("message", ""))
        return message if "may not act as ServiceAccount" in message else None
    raise AssertionError("a pipeline naming an account its author may not act as was admitted")


def _admitted(tenant: Pipelines) -> bool:
    try:
        tenant.create("allowed", [step("a", "quick", "x")])
    except ApiException as exc:
        if exc.status == 403:
            return False
        raise
    return True


def test_the_dagu_nightly_dag_imported_runs_as_a_scheduled_pipeline(
    api: Api, kube: client.ApiClient, fake: Callable[..., None]
) -> None:
    """Dagu's nightly DAG of two harness steps, as `harnessctl import-dagu` makes it (a HarnessSchedule of
    a pipeline), applied with its cron set to every minute (the test cannot wait for 02:00) and the fake
    agent behind claude: at the next minute the schedule creates the pipeline, whose summary runs after
    the review, reading its output."""
    [schedule] = [m for m in import_fixture("nightly-review-summary.yaml") if m["kind"] == "HarnessSchedule"]
    account = schedule["spec"]["pipelineTemplate"]["spec"]["serviceAccountName"]
    assert (schedule["spec"]["schedule"], account) == ("0 2 * * 1-5", "harness-pipeline")
    grant_account(kube, api.ns, account)
    fake("claude", "ok")
    schedule["spec"]["schedule"] = "* * * * *"
    api.custom.create_namespaced_custom_object(GROUP, VERSION, api.ns, "harnessschedules", schedule)
    pipelines = Pipelines(api)

    def created() -> str | None:
        listed = api.custom.list_namespaced_custom_object(
            GROUP,
            VERSION,
            api.ns,
            "harnesspipelines",
            label_selector=f"{LABEL_SCHEDULE}={schedule['metadata']['name']}",
        )["items"]
        return listed[0]["metadata"]["name"] if listed else None

    name = wait_until(created, timeout=90, what="the schedule to create its pipeline at the next minute")
    wait_until(
        lambda: pipelines.succeeded(name).get("status") in ("True", "False"),
        timeout=180,
        what=f"pipeline {name}",
    )
    assert pipelines.steps(name) == {"review": "Succeeded", "summarize": "Succeeded"}, pipelines.status(name)
    review, summary = api.run(f"{name}-review"), api.run(f"{name}-summarize")
    assert summary["spec"]["inputs"] == [{"name": "steps-review-0", "runOutput": {"name": f"{name}-review"}}]
    assert summary["metadata"]["creationTimestamp"] >= review["status"]["completionTime"]
    assert review["spec"]["retry"]["retryOn"] == "Any"
    owner = api.custom.get_namespaced_custom_object(GROUP, VERSION, api.ns, "harnesspipelines", name)
    assert owner["metadata"]["ownerReferences"][0]["kind"] == "HarnessSchedule"
