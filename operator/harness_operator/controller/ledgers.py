"""The budgets' ledgers, kept as ConfigMaps in the operator's own namespace (no tenant can write there,
not even one allowed to write a budget's status): read once per process, then changed by compare-and-swap
on their resourceVersion, one budget at a time."""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any, Protocol

from harness_operator.api.v1alpha1 import GROUP
from harness_operator.core.objects.naming import LABEL_MANAGED_BY, MANAGED_BY, fit_name
from harness_operator.core.queue.budget import Ledger

LABEL_LEDGER = f"{GROUP}/budget-ledger"
ANNOTATION_BUDGET = f"{GROUP}/budget"  # namespace/name of the budget
ANNOTATION_BUDGET_UID = f"{GROUP}/budget-uid"
KEY = "ledger.json"
MAX_CONFIG_MAP_NAME = 253
CAS_ATTEMPTS = 8  # a conflict means another write came first: read again, redo, write again


class LedgerConflict(RuntimeError):
    """The ledger changed under every attempt to write it (a temporary error: the event is retried)."""


class ConfigMaps(Protocol):
    def fetch_config_map(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def write_config_map(self, body: dict[str, Any]) -> str | None: ...

    def delete_config_map(self, namespace: str, name: str) -> None: ...


def ledger_name(namespace: str, budget: str) -> str:
    """The ConfigMap of a budget's ledger (namespaces have no dots, so no two budgets share one)."""
    return fit_name(f"budget-ledger.{namespace}.{budget}", "", MAX_CONFIG_MAP_NAME)


def build_ledger_config_map(
    ledger_namespace: str, namespace: str, budget: str, budget_uid: str, ledger: Ledger, resource_version: str
) -> dict[str, Any]:
    """The ConfigMap holding a ledger; `resource_version` empty: a create, else a compare-and-swap."""
    metadata: dict[str, Any] = {
        "name": ledger_name(namespace, budget),
        "namespace": ledger_namespace,
        "labels": {LABEL_LEDGER: "true", LABEL_MANAGED_BY: MANAGED_BY},
        "annotations": {ANNOTATION_BUDGET: f"{namespace}/{budget}", ANNOTATION_BUDGET_UID: budget_uid},
    }
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "data": {KEY: json.dumps(ledger.to_api(), separators=(",", ":"), sort_keys=True)},
    }


def parse_ledger_config_map(found: dict[str, Any] | None, budget_uid: str) -> tuple[Ledger, str]:
    """(ledger, resourceVersion) from the ConfigMap; a ledger of an earlier budget of the same name (another
    uid) or none yet: an empty ledger, written over that ConfigMap."""
    if found is None:
        return Ledger(), ""
    meta = found.get("metadata") or {}
    version = str(meta.get("resourceVersion") or "")
    if (meta.get("annotations") or {}).get(ANNOTATION_BUDGET_UID) != budget_uid:
        return Ledger(), version
    return Ledger.model_validate(json.loads((found.get("data") or {}).get(KEY) or "{}")), version


class LedgerStore:
    """Each budget's ledger, cached after its first read; every change is a compare-and-swap."""

    def __init__(self, kube: ConfigMaps, ledger_namespace: str) -> None:
        self.kube = kube
        self.ledger_namespace = ledger_namespace
        self._cache: dict[tuple[str, str], tuple[str, Ledger, str]] = {}  # key: (budget uid, ledger, rv)
        self._locks: dict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)

    def _read(self, namespace: str, budget: str, budget_uid: str) -> tuple[Ledger, str]:
        cached = self._cache.get((namespace, budget))
        if cached is not None and cached[0] == budget_uid:
            return cached[1], cached[2]
        found = self.kube.fetch_config_map(self.ledger_namespace, ledger_name(namespace, budget))
        ledger, version = parse_ledger_config_map(found, budget_uid)
        self._cache[(namespace, budget)] = (budget_uid, ledger, version)
        return ledger, version

    def get(self, namespace: str, budget: str, budget_uid: str) -> Ledger:
        with self._locks[(namespace, budget)]:
            return self._read(namespace, budget, budget_uid)[0]

    def update(
        self, namespace: str, budget: str, budget_uid: str, change: Callable[[Ledger], Ledger]
    ) -> Ledger:
        """Apply `change` to the stored ledger and write it (unchanged: no write); on a conflict, read the
        ledger again and redo the change on it."""
        key = (namespace, budget)
        with self._locks[key]:
            for _ in range(CAS_ATTEMPTS):
                ledger, version = self._read(namespace, budget, budget_uid)
                changed = change(ledger)
                if changed == ledger:
                    return ledger
                body = build_ledger_config_map(
                    self.ledger_namespace, namespace, budget, budget_uid, changed, version
                )
                written = self.kube.write_config_map(body)
                if written is not None:
                    self._cache[key] = (budget_uid, changed, written)
                    return changed
                self._cache.pop(key, None)
            raise LedgerConflict(f"the ledger of HarnessBudget {namespace}/{budget} kept changing; retrying")

    def forget(self, namespace: str, budget: str) -> None:
        """Delete a deleted budget's ledger."""
        with self._locks[(namespace, budget)]:
            self._cache.pop((namespace, budget), None)
            self.kube.delete_config_map(self.ledger_namespace, ledger_name(namespace, budget))
