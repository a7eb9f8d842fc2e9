"""`harnessctl triggers`' text: a namespace's triggers with their run counts and last delivery, and one
trigger's deliveries (its Events, newest first, aggregated counts) and runs (thread, phase, PR, cost)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from harness_operator.cli.triggers import (
    build_delivery_rows,
    build_run_rows,
    build_trigger_description,
    build_trigger_list,
    describe_authors,
)

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def make_trigger(name: str = "payments", **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "agentharness.dev/v1alpha1",
        "kind": "HarnessTrigger",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": "t-1",
            "creationTimestamp": "2026-12-05T12:00:00Z",
        },
        "spec": {
            "forge": {"type": "gitea", "url": "http://gitea.example:3000"},
            "repositories": ["acme/payments", "acme/ledger"],
            "serviceAccountName": "agent-trigger",
            "events": [{"type": "IssueLabeled", "label": "agent"}, {"type": "ReviewComment"}],
            "authors": {"users": ["alice", "bob"]},
            "concurrencyPolicy": "Replace",
        },
        "status": status,
    }


def make_event(
    reason: str, message: str, stamp: str, type_: str = "Normal", count: int = 1
) -> dict[str, Any]:
    return {"type": type_, "reason": reason, "message": message, "lastTimestamp": stamp, "count": count}


def make_run(
    name: str,
    stamp: str,
    thread: str | None = "12",
    kind: str = "issue",
    event: str | None = "IssueLabeled",
    **status: Any,
) -> dict[str, Any]:
    labels = {"agentharness.dev/trigger": "payments"}
    if thread:
        labels["agentharness.dev/forge-thread"] = thread
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": stamp,
            "labels": labels,
            "annotations": {
                "agentharness.dev/forge-thread-kind": kind,
                **({"agentharness.dev/forge-event": event} if event else {}),
            },
        },
        "status": status,
    }


def test_deliveries_newest_first_with_counts_and_limit() -> None:
    events = [
        make_event("RunCreated", "created payments-12-aa", "2026-12-07T11:00:00Z"),
        make_event("BadSignature", "refused: signature", "2026-12-07T11:58:00Z", "Warning", count=3),
        make_event("DeliverySkipped", "payments-12-aa exists", "2026-12-07T11:30:00Z"),
    ]
    assert build_delivery_rows(events, NOW, limit=2) == [
        ["Age", "Type", "Reason", "Message"],
        ["2m (x3)", "Warning", "BadSignature", "refused: signature"],
        ["30m", "Normal", "DeliverySkipped", "payments-12-aa exists"],
    ]


def test_an_event_with_only_an_event_time_is_ordered_by_it() -> None:
    events = [
        {"type": "Normal", "reason": "Old", "message": "", "eventTime": "2026-12-07T10:00:00.000000Z"},
        make_event("New", "", "2026-12-07T11:59:00Z"),
    ]
    assert [row[2] for row in build_delivery_rows(events, NOW, limit=5)[1:]] == ["New", "Old"]


def test_runs_newest_first_with_thread_phase_pr_and_cost() -> None:
    runs = [
        make_run(
            "payments-12-aa",
            "2026-12-07T10:00:00Z",
            phase="Succeeded",
            usage={"costUSD": 0.0123},
            changes={
                "pullRequestURL": "http://gitea.example:3000/acme/payments/pulls/13",
                "checks": {"state": "success", "sha": "a" * 40, "total": 2, "passed": 2},
            },
        ),
        make_run(
            "payments-13-bb",
            "2026-12-07T11:00:00Z",
            thread="13",
            kind="pull",
            event="Command",
            phase="Running",
        ),
        make_run("payments-manual", "2026-12-07T09:00:00Z", thread=None, event=None),
    ]
    assert build_run_rows(runs, NOW, limit=10) == [
        ["Name", "Thread", "Event", "Phase", "PR", "Cost", "Age"],
        ["payments-13-bb", "pull 13", "Command", "Running", "-", "-", "1h"],
        [
            "payments-12-aa",
            "issue 12",
            "IssueLabeled",
            "Succeeded",
            "http://gitea.example:3000/acme/payments/pulls/13 (checks success)",
            "$0.0123",
            "2h",
        ],
        ["payments-manual", "-", "-", "Pending", "-", "-", "3h"],
    ]


def test_description_shows_the_spec_the_last_delivery_and_both_tables() -> None:
    trigger = make_trigger(
        lastDelivery={
            "time": "2026-12-07T11:58:00Z",
            "event": "IssueLabeled",
            "result": "created",
            "run": "payments-12-aa",
        },
    )
    events = [make_event("RunCreated", "created payments-12-aa", "2026-12-07T11:58:00Z")]
    runs = [make_run("payments-12-aa", "2026-12-07T11:58:00Z", phase="Running")]
    text = build_trigger_description(trigger, events, runs, NOW)
    assert text.splitlines() == [
        "Name:            payments",
        "Namespace:       team-a",
        "Forge:           gitea http://gitea.example:3000",
        "Repositories:    acme/payments, acme/ledger",
        "Events:          IssueLabeled(agent), ReviewComment",
        "Authors:         users alice, bob",
        "ServiceAccount:  agent-trigger",
        "Concurrency:     Replace",
        "Last delivery:   2m ago: IssueLabeled, created payments-12-aa",
        "Deliveries:",
        "  Age  Type    Reason      Message",
        "  2m   Normal  RunCreated  created payments-12-aa",
        "Runs:",
        "  Name            Thread    Event         Phase    PR  Cost  Age",
        "  payments-12-aa  issue 12  IssueLabeled  Running  -   -     2m",
    ]


def test_description_of_a_trigger_that_never_received_anything() -> None:
    text = build_trigger_description(make_trigger(), [], [], NOW)
    assert "Last delivery:   <none>\n" in text
    assert "Deliveries:      <none>\nRuns:            <none>\n" in text


def test_description_says_when_it_shows_only_the_newest() -> None:
    events = [make_event("RunCreated", f"run {i}", f"2026-12-07T11:{i:02d}:00Z") for i in range(5)]
    runs = [make_run(f"r-{i}", f"2026-12-07T11:{i:02d}:00Z") for i in range(3)]
    text = build_trigger_description(make_trigger(), events, runs, NOW, limit=2)
    assert "Deliveries: (newest 2 of 5)\n" in text and "Runs: (newest 2 of 3)\n" in text
    assert "run 4" in text and "run 3" in text and "run 2" not in text
    assert "r-2" in text and "r-1" in text and "r-0" not in text


def test_authors_who_may_trigger() -> None:
    trigger = make_trigger()
    trigger["spec"]["authors"] = {"users": [], "associations": ["OWNER", "MEMBER"]}
    assert describe_authors(trigger) == "associations OWNER, MEMBER"
    trigger["spec"]["authors"] = {"users": ["alice"], "teams": ["acme/platform", "acme/sre"]}
    assert describe_authors(trigger) == "users alice; teams acme/platform, acme/sre"
    trigger["spec"]["authors"] = {"users": []}
    assert describe_authors(trigger) == "nobody (spec.authors lists no one)"


def test_list_counts_each_triggers_runs() -> None:
    other = make_trigger("ledger")
    other["spec"]["forge"]["type"] = "github"
    other["spec"]["repositories"] = ["acme/ledger"]
    runs = [make_run("a", "2026-12-07T11:00:00Z"), make_run("b", "2026-12-07T11:00:00Z")]
    payments = make_trigger(
        lastDelivery={"time": "2026-12-07T11:00:00Z", "event": "Command", "result": "skipped"}
    )
    assert build_trigger_list([payments, other], runs, NOW).splitlines() == [
        "NAME      FORGE   REPOSITORIES               RUNS  LAST DELIVERY             AGE",
        "ledger    github  acme/ledger                0     <none>                    2d",
        "payments  gitea   acme/payments,acme/ledger  2     1h ago: Command, skipped  2d",
    ]
