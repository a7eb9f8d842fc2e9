"""Run retention: when a finished run expires (pure), and the expiries due (a DueQueue, no I/O of its own)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from harness_operator.contract.times import parse_time
from harness_operator.controller.due import DueQueue

RETRY_SECONDS = 30.0  # a failed deletion is tried again this much later, until it succeeds or the run is gone
# What Argo CD (label or annotation tracking), Flux (kustomize-controller, helm-controller) and Helm put on
# the objects they apply: a run carrying one would be applied again, and so run again, once deleted.
APPLIED_BY_LABELS = (
    "argocd.argoproj.io/instance",
    "app.kubernetes.io/instance",
    "kustomize.toolkit.fluxcd.io/name",
    "helm.toolkit.fluxcd.io/name",
)
APPLIED_BY_ANNOTATIONS = ("argocd.argoproj.io/tracking-id", "meta.helm.sh/release-name")


def is_applied_by_a_tool(meta: Mapping[str, Any]) -> bool:
    """The run carries a GitOps tool's or Helm's tracking label or annotation."""
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    return any(k in labels for k in APPLIED_BY_LABELS) or any(
        k in annotations for k in APPLIED_BY_ANNOTATIONS
    )


def compute_expiry(
    run: Mapping[str, Any], default: int | None, now: datetime, spare_applied: bool = True
) -> float | None:
    """Seconds from `now` until a finished run is to be deleted (0: due already), or None to keep it:
    not finished, no TTL (its own spec.ttlSecondsAfterFinished, else `default`, which with
    `spare_applied` does not reach a run a tool applies), or already deleting."""
    meta = run.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return None
    own = (run.get("spec") or {}).get("ttlSecondsAfterFinished")
    if not _is_seconds(own) and spare_applied and is_applied_by_a_tool(meta):
        return None
    ttl: int | None = own if _is_seconds(own) else default
    if ttl is None or not _is_seconds(ttl):
        return None
    finished = parse_time((run.get("status") or {}).get("completionTime"))
    if finished is None:
        return None
    return max(0.0, ttl - (now - finished).total_seconds())


def _is_seconds(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class ExpiryQueue:
    """Finished runs with a TTL, due for deletion in one DueQueue. `delete(namespace, name, uid)` deletes
    the run only if it still has that uid (a run re-created under the same name is a new run); an
    exception retries the deletion RETRY_SECONDS later."""

    def __init__(
        self,
        delete: Callable[[str, str, str], None],
        clock: Callable[[], float] = time.monotonic,
        on_error: Callable[[str, str, Exception], None] | None = None,
    ) -> None:
        self._delete = delete
        self._on_error = on_error
        self._due = DueQueue("run-retention", clock)

    def __len__(self) -> int:
        return len(self._due)

    def schedule(self, namespace: str, name: str, uid: str, delay: float) -> None:
        """Delete the run `delay` seconds from now (replacing what was scheduled for it)."""
        self._due.schedule((namespace, name), delay, lambda: self._expire(namespace, name, uid), tag=uid)

    def forget(self, namespace: str, name: str) -> None:
        """The run is gone or keeps no TTL: nothing to delete."""
        self._due.forget((namespace, name))

    def start(self) -> None:
        self._due.start()

    def run_due(self) -> float | None:
        """Delete every run due now; returns the seconds until the next is due (None: none scheduled)."""
        return self._due.run_due()

    def _expire(self, namespace: str, name: str, uid: str) -> float | None:
        try:
            self._delete(namespace, name, uid)
        except Exception as exc:  # the API server is away: try again later, never drop the expiry
            if self._on_error is not None:
                self._on_error(namespace, name, exc)
            return RETRY_SECONDS
        return None
