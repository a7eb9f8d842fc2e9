"""Handing a run's Jobs to Kueue (pure): a run labelled with a queue gets suspended Jobs Kueue admits."""

from __future__ import annotations

from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.core.naming import KUEUE_QUEUE_LABEL

KUEUE_GROUP = "kueue.x-k8s.io"


def queue_of(run: HarnessRun) -> str | None:
    """The Kueue LocalQueue the run's label names, if any."""
    return run.metadata.get("labels", {}).get(KUEUE_QUEUE_LABEL) or None


def describe_missing_kueue(queue: str) -> str:
    """Why a run naming `queue` cannot start on a cluster that serves no Kueue API."""
    return (
        f'metadata.labels["{KUEUE_QUEUE_LABEL}"] names the queue "{queue}", but this cluster serves no '
        f"Kueue API ({KUEUE_GROUP}): its Job would wait suspended forever; install Kueue, or remove the label"
    )
