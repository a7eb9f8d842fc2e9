"""The caches of definitions and budgets: a definition's spec by (namespace, name), a cluster one's by
name, a namespace's valid budgets; a relist replaces its namespace only; each kind's reads wait for its
first list."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from harness_operator.controller.reference_cache import (
    BUDGET_KIND,
    CLUSTER_DEFINITION_KIND,
    DEFINITION_KIND,
    ReferenceStore,
    build_budget_ref,
)


def obj(name: str, namespace: str | None, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, **meta}, "spec": spec}


def read_in_thread(read: Callable[[], Any]) -> tuple[threading.Event, list[Any]]:
    """Run `read` in a thread: the event is set once it has returned, with its value in the list."""
    done, value = threading.Event(), []

    def call() -> None:
        value.append(read())
        done.set()

    threading.Thread(target=call, daemon=True).start()
    return done, value


def test_each_kinds_reads_wait_for_its_own_first_list() -> None:
    store = ReferenceStore()
    store.replace(DEFINITION_KIND, None, [obj("d", "team", {"binary": "x"})])
    assert store.definition("team", "d") == {"binary": "x"}
    cluster_read, cluster_value = read_in_thread(lambda: store.cluster_definition("claude"))
    budget_read, budget_value = read_in_thread(lambda: store.budgets("team"))
    assert not cluster_read.wait(0.2) and not budget_read.wait(0.01)  # their kinds have not been listed
    store.replace(CLUSTER_DEFINITION_KIND, None, [obj("claude", None, {"binary": "claude"})])
    assert cluster_read.wait(5) and cluster_value == [{"binary": "claude"}]
    assert not budget_read.wait(0.2)  # another kind's list is not its own
    store.replace(BUDGET_KIND, None, [])
    assert budget_read.wait(5) and budget_value == [[]]


def test_definitions_are_kept_by_namespace_and_name_and_follow_their_events() -> None:
    store = ReferenceStore()
    store.replace(
        DEFINITION_KIND, None, [obj("d", "team", {"binary": "x"}), obj("d", "other", {"binary": "y"})]
    )
    store.replace(CLUSTER_DEFINITION_KIND, None, [obj("claude", None, {"binary": "claude"})])
    assert store.definition("other", "d") == {"binary": "y"}
    assert (
        store.cluster_definition("claude") == {"binary": "claude"}
        and store.definition("team", "claude") is None
    )
    store.apply(DEFINITION_KIND, "MODIFIED", obj("d", "team", {"binary": "z"}))
    store.apply(CLUSTER_DEFINITION_KIND, "DELETED", obj("claude", None, {"binary": "claude"}))
    assert store.definition("team", "d") == {"binary": "z"} and store.cluster_definition("claude") is None
    store.replace(DEFINITION_KIND, "team", [])  # one namespace's relist
    assert store.definition("team", "d") is None and store.definition("other", "d") == {"binary": "y"}


def test_only_valid_budgets_are_kept() -> None:
    store = ReferenceStore()
    good = obj("b", "team", {"period": "daily", "limits": {"maxRuns": 3}}, uid="u", generation=4)
    store.replace(BUDGET_KIND, None, [good, obj("bad", "team", {"limits": {"maxRuns": 0}})])
    assert [(b.name, b.uid, b.generation, b.spec.limits.max_runs) for b in store.budgets("team")] == [
        ("b", "u", 4, 3)
    ]
    assert build_budget_ref(obj("bad", "team", {"limits": {"maxRuns": 0}})) is None
    store.apply(BUDGET_KIND, "MODIFIED", obj("b", "team", {"limits": {"maxRuns": 0}}))  # now invalid
    assert store.budgets("team") == []
    store.apply(BUDGET_KIND, "ADDED", good)
    store.apply(BUDGET_KIND, "DELETED", good)
    assert store.budgets("team") == [] and store.budgets("other") == []
