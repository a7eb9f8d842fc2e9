"""Definitions' reconciler: a HarnessDefinition's or ClusterHarnessDefinition's Ready condition."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from harness_operator.controller.kube import Kube
from harness_operator.core.status.status import compute_definition_status


class DefinitionReconciler:
    """Writes a definition's status when what it says changed."""

    def __init__(self, kube: Kube, clock: Callable[[], datetime]) -> None:
        self.kube = kube
        self.clock = clock

    def reconcile(self, plural: str, namespace: str | None, name: str) -> None:
        """Write a definition's Ready condition when it changed."""
        raw = self.kube.fetch_definition_object(plural, namespace, name)
        if raw is None or raw["metadata"].get("deletionTimestamp"):
            return
        status = compute_definition_status(raw, self.clock()).to_api()
        old = raw.get("status") or {}
        if old != status:
            patch = {**{key: None for key in old if key not in status}, **status}
            self.kube.patch_definition_status(plural, namespace, name, patch)
