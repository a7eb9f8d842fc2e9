"""Why an attempt's pod has not started yet, in the scheduler's or the kubelet's words (pure)."""

from __future__ import annotations

from typing import Any

# Waits every pod goes through on its way to start: nothing to explain.
ROUTINE_WAITS = frozenset({"ContainerCreating", "PodInitializing"})
STATUS_KEYS = ("initContainerStatuses", "containerStatuses")  # init containers run, and so wait, first


def describe_pod_wait(pod: dict[str, Any] | None) -> str | None:
    """Why the pod waits, or None when it waits as every pod does (or there is none yet): the scheduler
    cannot place it (its PodScheduled condition, e.g. Unschedulable: 0/1 nodes are available: 1
    Insufficient cpu), or a container cannot start (ErrImagePull, ImagePullBackOff,
    CreateContainerConfigError, ... with the kubelet's message)."""
    if pod is None:
        return None
    name = pod["metadata"]["name"]
    status = pod.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            reason = cond.get("reason") or "Unschedulable"
            said = cond.get("message") or "the scheduler gave no message"
            return f"the scheduler cannot place pod {name} ({reason}): {said}"
    for key in STATUS_KEYS:
        for container in status.get(key) or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            reason = waiting.get("reason")
            if reason and reason not in ROUTINE_WAITS:
                said = waiting.get("message") or "the kubelet gave no message"
                return f"container {container.get('name')} of pod {name} cannot start ({reason}): {said}"
    return None
