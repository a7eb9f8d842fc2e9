"""`harnessctl triggers [NAME]`'s text: the triggers of a namespace, or one trigger's recent deliveries
(its Events, newest first) and the runs it started (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from harness_operator.cli.describe import build_age, build_table

TRIGGER_LABEL = "agentharness.dev/trigger"
THREAD_LABEL = "agentharness.dev/forge-thread"
THREAD_KIND_ANNOTATION = "agentharness.dev/forge-thread-kind"
EVENT_ANNOTATION = "agentharness.dev/forge-event"
DEFAULT_LIMIT = 20


def _get(obj: Mapping[str, Any], *path: str) -> Any:
    """obj[path[0]][path[1]]..., None where a step is missing or not a mapping."""
    value: Any = obj
    for step in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(step)
    return value


def _created(obj: Mapping[str, Any]) -> str:
    return str(_get(obj, "metadata", "creationTimestamp") or "")


def _event_time(event: Mapping[str, Any]) -> str:
    """When an Event last happened: lastTimestamp (core/v1), else eventTime (events.k8s.io), else its
    creation."""
    return str(event.get("lastTimestamp") or event.get("eventTime") or _created(event))


def describe_thread(run: Mapping[str, Any]) -> str:
    """The issue or pull request the run came from: `issue 12`, `pull 7`, or `-`."""
    number = _get(run, "metadata", "labels", THREAD_LABEL)
    if not number:
        return "-"
    kind = _get(run, "metadata", "annotations", THREAD_KIND_ANNOTATION) or "issue"
    return f"{kind} {number}"


def describe_pull_request(run: Mapping[str, Any]) -> str:
    """The run's pull request as status.changes reports it: its URL (with the head's checks once the
    reporting step saw them), or `-`."""
    changes = _get(run, "status", "changes") or {}
    url = changes.get("pullRequestURL") if isinstance(changes, Mapping) else None
    if not url:
        return "-"
    checks = changes.get("checks")
    state = checks.get("state") if isinstance(checks, Mapping) else None
    return f"{url} (checks {state})" if state else str(url)


def describe_cost(run: Mapping[str, Any]) -> str:
    cost = _get(run, "status", "usage", "costUSD")
    return "-" if cost is None else f"${float(cost):.4f}"


def build_delivery_rows(events: Sequence[Mapping[str, Any]], now: datetime, limit: int) -> list[list[str]]:
    """The trigger's Events as rows (Age, Type, Reason, Message), newest first, at most `limit`; an Event
    the API server aggregated says how many times it happened, as kubectl describe does."""
    ordered = sorted(events, key=_event_time, reverse=True)[:limit]
    rows = [["Age", "Type", "Reason", "Message"]]
    for event in ordered:
        count = int(event.get("count") or 1)
        age = build_age(_event_time(event) or None, now)
        rows.append(
            [
                age if count == 1 else f"{age} (x{count})",
                str(event.get("type") or ""),
                str(event.get("reason") or ""),
                str(event.get("message") or ""),
            ]
        )
    return rows


def build_run_rows(runs: Sequence[Mapping[str, Any]], now: datetime, limit: int) -> list[list[str]]:
    """The trigger's runs as rows (Name, Thread, Event: what started it, Phase, PR, Cost, Age), newest
    first, at most `limit`."""
    ordered = sorted(runs, key=_created, reverse=True)[:limit]
    rows = [["Name", "Thread", "Event", "Phase", "PR", "Cost", "Age"]]
    for run in ordered:
        rows.append(
            [
                str(_get(run, "metadata", "name") or ""),
                describe_thread(run),
                str(_get(run, "metadata", "annotations", EVENT_ANNOTATION) or "-"),
                str(_get(run, "status", "phase") or "Pending"),
                describe_pull_request(run),
                describe_cost(run),
                build_age(_created(run) or None, now),
            ]
        )
    return rows


def describe_last_delivery(trigger: Mapping[str, Any], now: datetime) -> str:
    """status.lastDelivery as one line: `3m ago: Command, created fix-12-0a1b2c3d4e`, or `<none>`."""
    last = _get(trigger, "status", "lastDelivery")
    if not isinstance(last, Mapping) or not last:
        return "<none>"
    what = ", ".join(str(last[k]) for k in ("event", "result") if last.get(k))
    run = f" {last['run']}" if last.get("run") else ""
    return f"{build_age(last.get('time'), now)} ago: {what}{run}"


def describe_events(trigger: Mapping[str, Any]) -> str:
    """spec.events as `IssueLabeled(agent), Command(/agent), ReviewComment`."""
    parts = []
    for event in _get(trigger, "spec", "events") or []:
        argument = event.get("label") or event.get("command")
        parts.append(f"{event.get('type')}({argument})" if argument else str(event.get("type")))
    return ", ".join(parts) or "<none>"


def describe_authors(trigger: Mapping[str, Any]) -> str:
    """spec.authors as `users alice, bob; associations OWNER; teams acme/platform`; `nobody` when every
    list is empty."""
    authors = _get(trigger, "spec", "authors") or {}
    keys = ("users", "associations", "teams")
    parts = [f"{key} {', '.join(authors[key])}" for key in keys if authors.get(key)]
    return "; ".join(parts) or "nobody (spec.authors lists no one)"


def build_trigger_description(
    trigger: Mapping[str, Any],
    events: Sequence[Mapping[str, Any]],
    runs: Sequence[Mapping[str, Any]],
    now: datetime,
    limit: int = DEFAULT_LIMIT,
) -> str:
    """The text of `harnessctl triggers NAME`: the trigger's spec in brief, its last delivery, its
    recent deliveries (`events`: the Events on it, by uid) and its runs (labelled with its name)."""
    meta = trigger.get("metadata") or {}
    forge = _get(trigger, "spec", "forge") or {}
    lines = [
        f"Name:            {meta.get('name')}",
        f"Namespace:       {meta.get('namespace')}",
        f"Forge:           {forge.get('type')} {forge.get('url') or ''}".rstrip(),
        f"Repositories:    {', '.join(_get(trigger, 'spec', 'repositories') or []) or '<none>'}",
        f"Events:          {describe_events(trigger)}",
        f"Authors:         {describe_authors(trigger)}",
        f"ServiceAccount:  {_get(trigger, 'spec', 'serviceAccountName') or '<none>'}",
        f"Concurrency:     {_get(trigger, 'spec', 'concurrencyPolicy') or 'Forbid'}",
        f"Last delivery:   {describe_last_delivery(trigger, now)}",
    ]
    shown = f" (newest {limit} of {len(events)})" if len(events) > limit else ""
    lines.append("Deliveries:" + (shown if events else "      <none>"))
    if events:
        lines += build_table(build_delivery_rows(events, now, limit))
    shown = f" (newest {limit} of {len(runs)})" if len(runs) > limit else ""
    lines.append("Runs:" + (shown if runs else "            <none>"))
    if runs:
        lines += build_table(build_run_rows(runs, now, limit))
    return "\n".join(lines) + "\n"


def build_trigger_list(
    triggers: Sequence[Mapping[str, Any]], runs: Sequence[Mapping[str, Any]], now: datetime
) -> str:
    """The text of `harnessctl triggers`: one line per trigger (Name, Forge, Repositories, Runs, Last
    delivery, Age), `runs` being the namespace's runs that carry a trigger label."""
    if not triggers:
        return ""
    counts: dict[str, int] = {}
    for run in runs:
        name = _get(run, "metadata", "labels", TRIGGER_LABEL)
        if name:
            counts[str(name)] = counts.get(str(name), 0) + 1
    rows = [["NAME", "FORGE", "REPOSITORIES", "RUNS", "LAST DELIVERY", "AGE"]]
    for trigger in sorted(triggers, key=lambda t: str(_get(t, "metadata", "name"))):
        name = str(_get(trigger, "metadata", "name") or "")
        rows.append(
            [
                name,
                str(_get(trigger, "spec", "forge", "type") or ""),
                ",".join(_get(trigger, "spec", "repositories") or []),
                str(counts.get(name, 0)),
                describe_last_delivery(trigger, now),
                build_age(_created(trigger) or None, now),
            ]
        )
    return "\n".join(build_table(rows, indent="")) + "\n"
