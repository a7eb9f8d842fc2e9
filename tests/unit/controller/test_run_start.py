"""Starting attempts (controller/run_start.py) against a fake API server: the first attempt's children
are created and its slot taken; a full namespace queues it, a spent budget holds or fails it, a covered
run's reservation is in its status before its Job; a retry waits out its backoff holding the slot; a name
another object holds fails the run."""

from datetime import UTC, datetime
from typing import Any

import pytest
from tests.unit.controller.fake_kube import ApiServer, Budgets, ConfigMapApi, Definitions, Queue

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.contract.changes import PUBLISH_PLAN_ENV, PublishPlan
from harness_operator.controller.budgets import BudgetReconciler
from harness_operator.controller.cache import ChildStore
from harness_operator.controller.grants import Grants
from harness_operator.controller.kube_reader import KubeReader
from harness_operator.controller.kueue_cache import KueueStore
from harness_operator.controller.reference_cache import build_budget_ref
from harness_operator.controller.run_start import RunStarter, create_child
from harness_operator.core.attempt import Attempt, decide_attempts
from harness_operator.core.config import OperatorConfig
from harness_operator.core.pod.protected_paths import NAMESPACE_ANNOTATION
from harness_operator.core.queue.fairqueue import QueueEntry
from harness_operator.core.resolve.resolution import Rejection, RunFailure, resolve_targets
from harness_operator.core.status.observed import FINISHED, Observed, ObservedAttempt

NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
CONFIG = OperatorConfig(max_runs_per_namespace=1)


class Api(ApiServer):
    """Runs, Jobs and what is created, with the budgets' ledgers (ConfigMaps) beside them."""

    def __init__(self, *runs: HarnessRun) -> None:
        super().__init__([], [], *runs)
        self.maps = ConfigMapApi()

    def fetch_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.maps.fetch_config_map(namespace, name)

    def write_config_map(self, body: dict[str, Any]) -> str | None:
        return self.maps.write_config_map(body)


def make_run(name: str = "r", created: str = "07:00", **spec: Any) -> HarnessRun:
    return HarnessRun.model_validate(
        {
            "metadata": {"name": name, "namespace": "ns", "uid": f"{name}-uid", "creationTimestamp": created},
            "spec": {"provider": "claude", "prompt": "p", **spec},
        }
    )


def targets_of(api: Api, run: HarnessRun) -> list[Attempt]:
    return decide_attempts(run, resolve_targets(KubeReader(api, Definitions()), run), CONFIG)  # type: ignore[arg-type]


def starter(
    api: Api, children: ChildStore | None = None, queue: Queue | None = None, budgets: Budgets | None = None
) -> RunStarter:
    store = children or ChildStore()
    if children is None:
        store.replace("Job", None, [])
        store.replace("Pod", None, [])
    ledgers = BudgetReconciler(api, "harness-system", lambda: NOW, budgets or Budgets())  # type: ignore[arg-type]
    return RunStarter(
        api,  # type: ignore[arg-type]
        CONFIG,
        lambda: NOW,
        store,
        KueueStore(store),
        ledgers,
        Grants(api, CONFIG),  # type: ignore[arg-type]
        queue or Queue(),
    )


def test_the_first_attempt_creates_its_children_and_takes_the_slot() -> None:
    run = make_run()
    api = Api(run)
    start = starter(api)
    assert start.start_attempt(run, targets_of(api, run), 1, [], 0) is None
    assert sorted(api.created) == ["Job r-a1", "NetworkPolicy r-a1", "Secret r-plan"]
    assert api.created[-1] == "Job r-a1"  # the Job only after what its pod needs
    assert start.children.in_flight("ns") == {"r"}


def test_a_full_namespace_queues_the_run_first_come_first_served() -> None:
    run = make_run("second", "07:01")
    api = Api(run)
    queue = Queue([QueueEntry("07:00", "first"), QueueEntry("07:01", "second")])
    start = starter(api, queue=queue)
    start.children.note_started("ns", "running")
    queued = start.start_attempt(run, targets_of(api, run), 1, [], 0)
    assert queued == (
        Reason.Queued,
        "position 2 of 2 in the queue of namespace ns (1 runs in flight, limit 1)",
    )
    assert api.created == []
    assert start.runs_to_wake("ns") == []  # no slot is free


def budget(**spec: Any) -> Any:
    body = {"metadata": {"name": "team", "uid": "b-uid"}, "spec": {"period": "daily", "limits": spec}}
    return build_budget_ref(body)


def test_a_covered_run_is_reserved_in_its_status_before_its_job() -> None:
    run = make_run(limits={"maxCostUSD": 2})
    api = Api(run)
    start = starter(api, budgets=Budgets([budget(maxCostUSD=10)]))
    start.start_attempt(run, targets_of(api, run), 1, [], 0)
    reserved = api.status("r")["budget"]
    assert (reserved["names"], reserved["reservedUSD"]) == (["team"], 2.0)
    assert "Job r-a1" in api.created


def test_a_spent_budget_holds_the_run_or_fails_it() -> None:
    run = make_run()
    api = Api(run)
    waits = budget(maxRuns=1)
    ledgers = BudgetReconciler(api, "harness-system", lambda: NOW, Budgets([waits]))  # type: ignore[arg-type]
    ledgers.reserve(make_run("other"), None, ["team"], NOW)  # the period's one run
    held = starter(api, budgets=Budgets([waits])).start_attempt(run, targets_of(api, run), 1, [], 0)
    assert held is not None and held[0] == Reason.BudgetExhausted and api.created == []
    spec = {"period": "daily", "limits": {"maxRuns": 1}, "whenExhausted": "Fail"}
    failing = build_budget_ref({"metadata": {"name": "team", "uid": "b-uid"}, "spec": spec})
    with pytest.raises(RunFailure) as failure:
        starter(api, budgets=Budgets([failing])).start_attempt(run, targets_of(api, run), 1, [], 0)
    assert failure.value.reason == Reason.BudgetExhausted and api.created == []


def test_a_retry_waits_out_its_backoff_holding_the_slot() -> None:
    run = make_run(retry={"limit": 1, "backoffSeconds": 30})
    api = Api(run)
    start = starter(api)
    lost = ObservedAttempt(1, "claude", "r-a1", None, FINISHED)
    targets = targets_of(api, run)
    observed = Observed(["claude", "claude"], [lost], positions=[t.position for t in targets])
    backoff = start.backoff(run, observed, 2)
    assert backoff is not None and backoff.due_in == 30.0 and backoff.waiting[0] == Reason.Retrying
    assert start.children.in_flight("ns") == {"r"}
    assert start.backoff(run, Observed(["claude"], [lost], positions=[1]), 2) is None  # no retry: no wait


def test_a_name_another_object_holds_fails_the_run() -> None:
    class Taken(Api):
        def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
            owner = [{"uid": "someone-else", "controller": True}]
            return {**obj, "metadata": {**obj["metadata"], "ownerReferences": owner}}

    run = make_run()
    owned = {"ownerReferences": [{"uid": "r-uid", "controller": True}]}
    job = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "r-output", "namespace": "ns", **owned},
    }
    with pytest.raises(RunFailure) as failure:
        create_child(Taken(run), run, job)  # type: ignore[arg-type]
    assert failure.value.reason == Reason.ChildConflict


PUSHING = {
    "git": {"url": "https://github.com/acme/widgets.git"},
    "publish": {"branch": {}, "credentialsSecretRef": {"name": "write", "key": "token"}},
}


def publisher_plan(api: Api) -> PublishPlan:
    [job] = api.jobs
    spec = job["spec"]["template"]["spec"]
    [publisher] = [c for c in spec["initContainers"] if c["name"] == "publish"]
    [plan] = [e["value"] for e in publisher["env"] if e["name"] == PUBLISH_PLAN_ENV]
    return PublishPlan.model_validate_json(plan.replace("$$", "$"))


def test_the_namespace_s_protected_paths_reach_the_publisher() -> None:
    run = make_run(workspace=PUSHING)
    api = Api(run)
    rules = '[{"path": "deploy/", "action": "RequireApproval"}, {"path": ".github/", "action": "RequireApproval"}]'
    api.namespaces["ns"] = {"metadata": {"name": "ns", "annotations": {NAMESPACE_ANNOTATION: rules}}}
    starter(api).start_attempt(run, targets_of(api, run), 1, [], 0)
    enforced = {rule.path: rule.action for rule in publisher_plan(api).protected_paths}
    assert enforced["deploy/"] == "RequireApproval"
    assert enforced[".github/"] == "Refuse"  # the platform's rule is not loosened by the namespace


def test_a_malformed_namespace_annotation_fails_the_run_naming_it() -> None:
    run = make_run(workspace=PUSHING)
    api = Api(run)
    api.namespaces["ns"] = {"metadata": {"name": "ns", "annotations": {NAMESPACE_ANNOTATION: "deploy/"}}}
    with pytest.raises(Rejection) as raised:
        starter(api).start_attempt(run, targets_of(api, run), 1, [], 0)
    assert raised.value.reason == Reason.InvalidSpec and NAMESPACE_ANNOTATION in str(raised.value)
    assert api.created == []


def test_a_run_that_pushes_nothing_does_not_read_its_namespace() -> None:
    run = make_run()
    api = Api(run)
    starter(api).start_attempt(run, targets_of(api, run), 1, [], 0)
    assert "namespace ns" not in api.reads
