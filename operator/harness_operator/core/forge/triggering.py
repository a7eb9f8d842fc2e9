"""What a verified forge delivery does for a HarnessTrigger: the run it creates, or why none (pure).

The run is the trigger's runTemplate with the event's fields substituted; its name is fixed by the
delivery's body, so a replayed or redelivered body names the same run and its second create fails
AlreadyExists. A comment, review or failed check on a pull request that a run of the trigger opened
continues the newest run of that pull request on its branch (resumeFrom, fast-forward publish).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness_operator.api.v1alpha1 import (
    GROUP,
    HarnessTrigger,
    TriggerEvent,
    TriggerEventType,
)
from harness_operator.core.forge.events import ForgeEvent
from harness_operator.core.objects.conditions import FALSE, SUCCEEDED, TRUE

LABEL_TRIGGER = f"{GROUP}/trigger"
LABEL_THREAD = f"{GROUP}/forge-thread"
LABEL_PULL_REQUEST = f"{GROUP}/pull-request"
ANNOTATION_REPOSITORY = f"{GROUP}/forge-repository"
ANNOTATION_THREAD_KIND = f"{GROUP}/forge-thread-kind"
ANNOTATION_DELIVERY = f"{GROUP}/forge-delivery"
ANNOTATION_HEAD = f"{GROUP}/forge-head"
ANNOTATION_COMMENT_ID = f"{GROUP}/forge-comment-id"
THREAD_ISSUE = "issue"
THREAD_PULL = "pull"
TRIGGER_NAME_CUT = 30

CREATED = "created"
DUPLICATE = "duplicate"
SKIPPED = "skipped"
IGNORED = "ignored"
REFUSED = "refused"

_PARAMETER = re.compile(r"\$\(event\.([A-Za-z]+)\)")


@dataclass(frozen=True)
class TriggerRun:
    """A run of the trigger (labelled agentharness.dev/trigger=<name>), as the receiver lists it."""

    name: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    creation_timestamp: str
    finished: bool
    branch: str | None  # status.changes.branch: the branch it pushed
    succeeded: bool = False


@dataclass(frozen=True)
class TriggerDecision:
    """What the receiver does: create `create` after deleting `delete`, or nothing, and why."""

    result: str  # created | duplicate | skipped | ignored | refused
    reason: str  # one sentence for the Event and the HTTP answer; never echoes the delivery's text
    create: dict[str, Any] | None = None
    delete: tuple[str, ...] = ()


def build_trigger_run(body: Mapping[str, Any]) -> TriggerRun:
    """A HarnessRun object (as the API returns it) as decide_delivery reads it."""
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    succeeded = next(
        (c.get("status") for c in status.get("conditions") or [] if c.get("type") == SUCCEEDED), None
    )
    return TriggerRun(
        name=str(meta.get("name", "")),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        creation_timestamp=str(meta.get("creationTimestamp") or ""),
        finished=succeeded in (TRUE, FALSE),
        branch=(status.get("changes") or {}).get("branch"),
        succeeded=succeeded == TRUE,
    )


def trigger_run_name(trigger: str, number: int, delivery_key: str) -> str:
    """`<trigger cut to 30>-<number>-<10 hex of the body's sha256>`: a replay names the same run."""
    return f"{trigger[:TRIGGER_NAME_CUT].rstrip('-.')}-{number}-{delivery_key[:10]}"


def decide_delivery(
    trigger: HarnessTrigger, event: ForgeEvent, runs: Sequence[TriggerRun]
) -> TriggerDecision:
    """What a verified delivery does, given the runs of this trigger in its namespace."""
    return TriggerDecision(IGNORED, "not decided yet")


def _matching_event(trigger: HarnessTrigger, event: ForgeEvent) -> TriggerEvent | None:
    return next((e for e in trigger.spec.events if e.type == TriggerEventType(event.kind)), None)
