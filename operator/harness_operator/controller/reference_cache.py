"""Watch caches of what a run refers to by name: HarnessDefinitions, ClusterHarnessDefinitions and
HarnessBudgets, listed and watched by `cache.Watcher` threads like Jobs, Pods and runs.

They were kopf indexes, which kopf fills only after it has started and only in the replica running it:
a run's reconcile would have to wait on kopf, and a standby would take over cold. Here they are warm in
every replica before it leads, and a reconcile waits only for their first list. A change notifies
nothing: a definition's status and a budget's ledger are kopf's handlers' (handlers.py).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from harness_operator.api.v1alpha1 import HarnessBudgetSpec
from harness_operator.controller.cache import SYNC_WAIT_SECONDS
from harness_operator.core.queue.budget import BudgetRef

DEFINITION_KIND = "HarnessDefinition"
CLUSTER_DEFINITION_KIND = "ClusterHarnessDefinition"
BUDGET_KIND = "HarnessBudget"
KINDS = (DEFINITION_KIND, CLUSTER_DEFINITION_KIND, BUDGET_KIND)


def build_budget_ref(budget: Mapping[str, Any]) -> BudgetRef | None:
    """The budget as the reconciler reads it; None for one the CRD's rules would refuse (an old object
    is skipped, not fatal)."""
    meta = budget.get("metadata") or {}
    try:
        spec = HarnessBudgetSpec.model_validate(dict(budget.get("spec") or {}))
    except ValidationError:
        return None
    return BudgetRef(str(meta.get("name") or ""), spec, meta.get("generation"), str(meta.get("uid") or ""))


def _keep(kind: str, obj: Mapping[str, Any]) -> Any:
    """What is kept of an object: a definition's spec, a budget's BudgetRef (None: nothing)."""
    if kind == BUDGET_KIND:
        return build_budget_ref(obj)
    return copy.deepcopy(dict(obj.get("spec") or {}))


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class ReferenceStore:
    """Definitions' specs and budgets by (namespace, name) per kind ("" for cluster-scoped); thread-safe.
    Each read waits for its kind's first full list."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[str, dict[tuple[str, str], Any]] = {kind: {} for kind in KINDS}
        self._synced = {kind: threading.Event() for kind in KINDS}

    # --- reads ---------------------------------------------------------------------------------------

    def definition(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A HarnessDefinition's spec."""
        spec: dict[str, Any] | None = self._get(DEFINITION_KIND, (namespace, name))
        return spec

    def cluster_definition(self, name: str) -> dict[str, Any] | None:
        """A ClusterHarnessDefinition's spec."""
        spec: dict[str, Any] | None = self._get(CLUSTER_DEFINITION_KIND, ("", name))
        return spec

    def budgets(self, namespace: str) -> list[BudgetRef]:
        """Every valid HarnessBudget of the namespace."""
        self._wait_synced(BUDGET_KIND)
        with self._lock:
            return [ref for (ns, _), ref in self._objects[BUDGET_KIND].items() if ns == namespace]

    def _get(self, kind: str, key: tuple[str, str]) -> Any:
        self._wait_synced(kind)
        with self._lock:
            return self._objects[kind].get(key)

    def _wait_synced(self, kind: str, timeout: float = SYNC_WAIT_SECONDS) -> None:
        if not self._synced[kind].wait(timeout):
            raise TimeoutError(f"the watch cache of {kind}s has not synced yet")

    # --- writes (the watch threads) ------------------------------------------------------------------

    def apply(self, kind: str, type_: str, obj: Mapping[str, Any]) -> None:
        """One watch event (ADDED, MODIFIED, DELETED)."""
        kept = None if type_ == "DELETED" else _keep(kind, obj)
        with self._lock:
            if kept is None:
                self._objects[kind].pop(_key(obj), None)
            else:
                self._objects[kind][_key(obj)] = kept

    def replace(self, kind: str, namespace: str | None, items: Iterable[dict[str, Any]]) -> list[None]:
        """A full list of `kind` in `namespace` (None: all): it replaces what was held there."""
        listed = {_key(item): _keep(kind, item) for item in items}
        with self._lock:
            held = self._objects[kind]
            for key in [k for k in held if namespace is None or k[0] == namespace]:
                del held[key]
            held.update({key: kept for key, kept in listed.items() if kept is not None})
            self._synced[kind].set()
        return []
