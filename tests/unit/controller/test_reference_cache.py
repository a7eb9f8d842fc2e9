"""The caches of definitions and budgets: a definition's spec by (namespace, name), a cluster one's by
name, a namespace's valid budgets; a relist replaces its namespace only; each kind's reads wait for its
first list."""

from __future__ import annotations

from typing import Any

import pytest

from harness_operator.controller.reference_cache import (
    BUDGET_KIND,
    CLUSTER_DEFINITION_KIND,
    DEFINITION_KIND,
    ReferenceStore,
    build_budget_ref,
)


def obj(name: str, namespace: str | None, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, **meta}, "spec": spec}


def test_each_kinds_reads_wait_for_its_own_first_list() -> None:
    store = ReferenceStore()
    store.replace(DEFINITION_KIND, None, [obj("d", "team", {"binary": "x"})])
    assert store.definition("team", "d") == {"binary": "x"}
    with pytest.raises(TimeoutError, match="ClusterHarnessDefinitions has not synced"):
        store._wait_synced(CLUSTER_DEFINITION_KIND, 0.01)
    with pytest.raises(TimeoutError, match="HarnessBudgets has not synced"):
        store._wait_synced(BUDGET_KIND, 0.01)


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
