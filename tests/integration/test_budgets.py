"""HarnessBudget on the real cluster, with the operator as a process under the chart's RBAC: a run waits
while its budget is spent and starts when the rolling window moves on, or when the budget is deleted; two concurrent runs reserve caps
that together stay within the budget; the spend survives a SIGKILL of the operator, and deleting or
relabelling runs gives none of it back (the red team's refund attacks); two writers of one ledger
never lose each other's change; a budget's namespace deletes with the operator uninstalled (no finalizer)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from harness_operator.api.v1alpha1 import GROUP, VERSION
from harness_operator.controller.kube import Kube
from harness_operator.controller.ledgers import LedgerStore, ledger_name
from harness_operator.core.queue.budget import reserve

from .conftest import Api, wait_until
from .operator_env import RELEASE_NAMESPACE, OperatorProcess, run_body
from .test_crd_admission import apply_crds

BUDGETS = "harnessbudgets"
NOW = datetime(2026, 12, 2, 15, 30, tzinfo=UTC)


@pytest.fixture(scope="module", autouse=True)
def crds(kube: client.ApiClient) -> Iterator[None]:
    apply_crds(kube)  # the HarnessBudget kind and the runs' status.budget field
    yield


def create_budget(api: Api, name: str, spec: dict[str, Any]) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HarnessBudget",
        "metadata": {"name": name},
        "spec": spec,
    }
    api.custom.create_namespaced_custom_object(GROUP, VERSION, api.ns, BUDGETS, body)


def budget_status(api: Api, name: str) -> dict[str, Any]:
    return api.custom.get_namespaced_custom_object(GROUP, VERSION, api.ns, BUDGETS, name).get("status") or {}


def reason(api: Api, run: str) -> str | None:
    return api.condition(run, "Succeeded").get("reason")


def test_exhausted_budget_queues_a_run_until_the_window_rolls(
    api: Api, fake: Callable[..., None], cluster_bin_dir: Path, kubeconfig_path: str
) -> None:
    fake("fake", "ok")
    create_budget(api, "one-per-window", {"period": "rolling", "windowSeconds": 20, "limits": {"maxRuns": 1}})
    wait_until(
        lambda: budget_status(api, "one-per-window").get("periodEnd"), timeout=30, what="budget status"
    )
    api.create(run_body("first", {"provider": "fake", "prompt": "p"}))
    assert api.wait_finished("first")["phase"] == "Succeeded"
    api.create(run_body("second", {"provider": "fake", "prompt": "p"}))
    wait_until(lambda: reason(api, "second") == "BudgetExhausted", timeout=30, what="second to wait")
    assert api.jobs("second") == []
    message = api.condition("second", "Succeeded")["message"]
    assert "HarnessBudget one-per-window: 1 of maxRuns 1 runs started" in message, message
    status = api.wait_finished("second", timeout=90)  # the window moves on 20 s after the first started
    assert status["phase"] == "Succeeded", status
    first, second = (api.status(n)["budget"]["admittedAt"] for n in ("first", "second"))
    assert second > first
    listed = subprocess.run(
        [str(cluster_bin_dir / "kubectl"), "--kubeconfig", kubeconfig_path, "-n", api.ns, "get", BUDGETS],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    print("\n" + listed)
    header, row = listed.split("\n")[:2]
    titles = ["NAME", "PERIOD", "MAX USD", "SPENT", "REMAINING", "RUNS", "MAX RUNS", "PERIOD END", "AGE"]
    starts = []
    for title in titles:  # kubectl aligns each column under its title; an absent value is blank
        starts.append(header.index(title, starts[-1] + 1 if starts else 0))
    assert header.split() == " ".join(titles).split(), listed
    cells = dict(
        zip(titles, (row[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)), strict=True)
    )
    assert (cells["PERIOD"], cells["MAX USD"], cells["MAX RUNS"]) == ("rolling", "", "1"), cells
    assert cells["RUNS"].isdigit(), cells  # maxRuns, the limit that ran out, is in the default view


def test_deleting_a_budget_wakes_the_runs_it_held(api: Api, fake: Callable[..., None]) -> None:
    fake("fake", "ok")
    create_budget(api, "spent", {"period": "daily", "limits": {"maxRuns": 1}})
    wait_until(lambda: budget_status(api, "spent").get("periodEnd"), timeout=30, what="budget status")
    api.create(run_body("first", {"provider": "fake", "prompt": "p"}))
    assert api.wait_finished("first")["phase"] == "Succeeded"
    api.create(run_body("held", {"provider": "fake", "prompt": "p"}))
    wait_until(lambda: reason(api, "held") == "BudgetExhausted", timeout=30, what="held to wait")
    api.custom.delete_namespaced_custom_object(GROUP, VERSION, api.ns, BUDGETS, "spent")
    # No other event would move it: the day's period ends hours from now.
    assert api.wait_finished("held", timeout=60)["phase"] == "Succeeded"


def test_two_concurrent_runs_cannot_overspend_their_budget(
    api: Api, fake: Callable[..., None], operator: OperatorProcess
) -> None:
    # The fake agent's `cost` mode streams codex-jsonl turns of 1M more input tokens each: $0.10 a turn.
    fake(
        "costly",
        "cost",
        output={"format": "codex-jsonl"},
        capabilities={"usageReporting": True},
        pricing={"gpt": {"input": 0.1}},
    )
    create_budget(api, "team", {"period": "daily", "limits": {"maxCostUSD": 1}})
    wait_until(lambda: budget_status(api, "team").get("periodEnd"), timeout=30, what="budget status")
    for name in ("a", "b"):
        api.create(run_body(name, {"provider": "costly", "prompt": "p", "limits": {"maxCostUSD": 0.75}}))
    statuses = [api.wait_finished(n) for n in ("a", "b")]
    caps = sorted(s["budget"]["reservedUSD"] for s in statuses)
    assert caps == [0.25, 0.75], caps  # the second admitted gets only what the first left
    for status in statuses:
        assert status["reason"] == "CostLimitExceeded", status
        # Stopped at the first usage report over its cap: one $0.10 turn past it at most.
        assert (
            status["budget"]["reservedUSD"]
            < status["usage"]["costUSD"]
            <= status["budget"]["reservedUSD"] + 0.1
        )
    api.create(run_body("c", {"provider": "costly", "prompt": "p", "limits": {"maxCostUSD": 0.75}}))
    wait_until(
        lambda: reason(api, "c") == "BudgetExhausted",
        timeout=30,
        what="a third run to wait",
        diagnose=lambda: f"c: {api.status('c')}\nbudget: {budget_status(api, 'team')}",
    )
    spent = sum(s["usage"]["costUSD"] for s in statuses)
    wait_until(
        lambda: budget_status(api, "team").get("spentUSD") == pytest.approx(spent),
        timeout=30,
        what="the budget to show the spend",
    )
    assert budget_status(api, "team")["remainingUSD"] == 0
    metrics = operator.metrics()
    assert f'harness_budget_spent_usd{{budget="team",namespace="{api.ns}"}}' in metrics
    api.custom.patch_namespaced_custom_object(
        GROUP, VERSION, api.ns, "harnessruns", "c", {"spec": {"cancel": True}}
    )


def test_budget_spend_survives_sigkill_of_the_operator(
    api: Api, fake: Callable[..., None], operator: OperatorProcess
) -> None:
    fake("fake", "ok")
    create_budget(api, "daily", {"period": "daily", "limits": {"maxCostUSD": 1}})
    api.create(run_body("before", {"provider": "fake", "prompt": "p"}))
    assert api.wait_finished("before")["usage"]["costUSD"] == 0.01
    wait_until(
        lambda: budget_status(api, "daily").get("runs") == 1, timeout=30, what="the budget to count it"
    )
    operator.kill()
    # While the operator is down the run is deleted, and someone with status rights writes nonsense:
    # the ledger (in the operator's namespace) keeps the spend, and the status is only its view.
    api.custom.delete_namespaced_custom_object(GROUP, VERSION, api.ns, "harnessruns", "before")
    api.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, api.ns, BUDGETS, "daily", {"status": {"spentUSD": 99, "runs": 7}}
    )
    operator.start()
    wait_until(
        lambda: (
            (budget_status(api, "daily").get("spentUSD"), budget_status(api, "daily").get("runs"))
            == (0.01, 1)
        ),
        timeout=60,
        what="the spend read back from the ledger after the restart",
    )
    api.create(run_body("after", {"provider": "fake", "prompt": "p"}))
    api.wait_finished("after")
    wait_until(
        lambda: (
            (budget_status(api, "daily").get("spentUSD"), budget_status(api, "daily").get("runs"))
            == (0.02, 2)
        ),
        timeout=30,
        what="the second run counted once, the first not twice",
    )
    assert budget_status(api, "daily")["remainingUSD"] == pytest.approx(0.98)


def labelled(name: str, spec: dict[str, Any], team: str = "a") -> dict[str, Any]:
    body = run_body(name, spec)
    body["metadata"]["labels"] = {"team": team}
    return body


def gone(api: Api, name: str) -> bool:
    try:
        api.run(name)
    except client.ApiException as exc:
        return exc.status == 404
    return False


def test_deleting_or_relabelling_runs_gives_no_spend_back(
    api: Api, fake: Callable[..., None], operator: OperatorProcess
) -> None:
    fake("fake", "ok")  # reports $0.01 a run
    fake("slow", "hang")
    create_budget(
        api,
        "team-a",
        {
            "period": "daily",
            "selector": {"matchLabels": {"team": "a"}},
            "limits": {"maxCostUSD": 1},
            "defaultReservationUSD": 0.2,
        },
    )
    quick = {"provider": "fake", "prompt": "p"}
    api.create(labelled("kept", quick))
    api.create(labelled("relabelled", quick))
    api.create(labelled("expired", {**quick, "ttlSecondsAfterFinished": 0}))
    for name in ("kept", "relabelled"):
        assert api.wait_finished(name)["usage"]["costUSD"] == 0.01
    wait_until(
        lambda: gone(api, "expired"), timeout=60, what="the run with ttlSecondsAfterFinished 0 deleted"
    )
    api.custom.patch_namespaced_custom_object(
        GROUP, VERSION, api.ns, "harnessruns", "relabelled", {"metadata": {"labels": {"team": "b"}}}
    )
    api.custom.delete_namespaced_custom_object(GROUP, VERSION, api.ns, "harnessruns", "kept")
    # A run deleted while it runs: what it spent is unknown, so it stays charged at its cap.
    api.create(labelled("deleted-running", {"provider": "slow", "prompt": "p"}))
    wait_until(lambda: api.status("deleted-running").get("phase") == "Running", timeout=60, what="it to run")
    api.custom.delete_namespaced_custom_object(GROUP, VERSION, api.ns, "harnessruns", "deleted-running")
    expected = {"spentUSD": 0.23, "reservedUSD": 0, "remainingUSD": 0.77, "runs": 4, "unknownCostRuns": 1}

    def figures() -> dict[str, Any]:
        status = budget_status(api, "team-a")
        return {key: status.get(key) for key in expected}

    wait_until(
        lambda: figures() == expected, timeout=60, what="the spend kept", diagnose=lambda: str(figures())
    )
    # The ledger is in the operator's namespace, out of the tenant's reach.
    ledger = api.core.read_namespaced_config_map(ledger_name(api.ns, "team-a"), RELEASE_NAMESPACE)
    assert ledger.metadata.annotations["agentharness.dev/budget"] == f"{api.ns}/team-a"
    operator.kill()
    operator.start()
    api.create(labelled("after", quick))
    api.wait_finished("after")
    after = {**expected, "spentUSD": 0.24, "remainingUSD": 0.76, "runs": 5}
    wait_until(
        lambda: figures() == after,
        timeout=60,
        what="the spend kept over a restart",
        diagnose=lambda: str(figures()),
    )


def test_two_writers_of_one_ledger_keep_both_changes(kube: client.ApiClient, namespace: str) -> None:
    # Two stores (as two operator processes would be) over one ConfigMap on the real API server: the
    # second write's resourceVersion is stale, is refused (409), and is redone on the ledger read again.
    first, second = LedgerStore(Kube(kube), namespace), LedgerStore(Kube(kube), namespace)
    assert first.get("team", "b", "uid-1").open == []  # cached: the next write starts from this read
    second.update("team", "b", "uid-1", lambda ledger: reserve(ledger, "one", "one", 1.0, NOW))
    both = first.update("team", "b", "uid-1", lambda ledger: reserve(ledger, "two", "two", 2.0, NOW))
    assert [e.uid for e in both.open] == ["one", "two"]
    assert [e.uid for e in LedgerStore(Kube(kube), namespace).get("team", "b", "uid-1").open] == [
        "one",
        "two",
    ]
    # A budget re-created under the same name starts an empty ledger over the old one.
    assert LedgerStore(Kube(kube), namespace).get("team", "b", "uid-2").open == []
    first.forget("team", "b")
    assert Kube(kube).fetch_config_map(namespace, "budget-ledger.team.b") is None


def finalizers(api: Api, name: str) -> list[str]:
    budget = api.custom.get_namespaced_custom_object(GROUP, VERSION, api.ns, BUDGETS, name)
    return list(budget["metadata"].get("finalizers") or [])


def test_a_budgets_namespace_deletes_after_the_operator_is_uninstalled(
    api: Api, operator: OperatorProcess
) -> None:
    """Red team 49, item 16: kopf's timer held a finalizer on every HarnessBudget, which nobody removed
    once `helm uninstall` took the operator away: the namespace hung in Terminating."""
    create_budget(api, "kept", {"period": "daily", "limits": {"maxRuns": 5}})
    # A budget an older release ticked: it still bears that release's finalizer, which kopf takes off.
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HarnessBudget",
        "metadata": {"name": "older", "finalizers": [f"{GROUP}/finalizer"]},
        "spec": {"period": "daily", "limits": {"maxRuns": 5}},
    }
    api.custom.create_namespaced_custom_object(GROUP, VERSION, api.ns, BUDGETS, body)
    for name in ("kept", "older"):  # the operator has acted on both: their status is written
        wait_until(lambda n=name: budget_status(api, n).get("periodEnd"), timeout=30, what=f"{name}'s status")
    wait_until(lambda: finalizers(api, "older") == [], timeout=30, what="the older release's finalizer gone")
    assert finalizers(api, "kept") == []
    operator.stop()  # as `helm uninstall` takes the operator away
    try:
        api.core.delete_namespace(api.ns)

        def deleted() -> bool:
            try:
                api.core.read_namespace(api.ns)
            except client.ApiException as exc:
                return exc.status == 404
            return False

        wait_until(
            deleted,
            timeout=120,
            what=f"namespace {api.ns} deleted",
            diagnose=lambda: str(api.core.read_namespace(api.ns).status),
        )
    finally:
        operator.start()
