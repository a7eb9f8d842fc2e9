"""`harnessctl describe RUN`: what kubectl describe shows, for a run: spec summary, status, conditions,
attempts, cost, inputs (names, sources and sizes, never a Secret's value) and its Events (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from harness_operator.api.v1alpha1 import HarnessRun, RunInput


def describe_input_source(item: RunInput) -> str:
    """Where an input's value comes from, as spec.inputs[] says (a Secret named, its value never read)."""
    if item.secret_key_ref is not None:
        return f"Secret {item.secret_key_ref.name}/{item.secret_key_ref.key} (value not shown)"
    if item.config_map_key_ref is not None:
        return f"ConfigMap {item.config_map_key_ref.name}/{item.config_map_key_ref.key}"
    if item.run_output is not None:
        path = f" .{item.run_output.path}" if item.run_output.path else ""
        return f"output of HarnessRun {item.run_output.name}{path}"
    return "value"


def build_table(rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    """Rows as left-aligned columns, as kubectl describe lays out its tables."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def build_age(stamp: str | None, now: datetime) -> str:
    """How long ago, in its largest whole unit (45s, 3m, 2h, 4d); <unknown> without a time."""
    if not stamp:
        return "<unknown>"
    seconds = int((now - datetime.fromisoformat(stamp.replace("Z", "+00:00"))).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def build_description(
    run: HarnessRun,
    input_sizes: Mapping[str, int | None],
    events: Sequence[Mapping[str, Any]],
    now: datetime,
) -> str:
    """The text of `harnessctl describe`: `input_sizes` holds the byte size of each input whose value
    harnessctl could read (literal, ConfigMap, another run's output; None: not readable), `events` the
    run's Events by its uid."""
    meta, spec, status = run.metadata, run.spec, run.status
    providers = [spec.provider, *(f.provider for f in spec.fallback or [])]
    lines = [
        f"Name:         {meta.get('name')}",
        f"Namespace:    {meta.get('namespace')}",
        f"UID:          {meta.get('uid')}",
        f"Created:      {meta.get('creationTimestamp')}",
        f"Providers:    {', '.join(providers)}",
        f"Prompt:       {len((spec.prompt or '').encode())} bytes before substitution",
        f"Cancel:       {'requested' if spec.cancel else 'no'}",
        f"Phase:        {(status.phase if status else None) or 'Pending'}",
    ]
    if status is not None and (status.reason or status.message):
        lines += [f"Reason:       {status.reason or ''}", f"Message:      {status.message or ''}"]
    if status is not None and status.usage is not None and status.usage.cost_usd is not None:
        lines.append(f"Cost:         ${status.usage.cost_usd:.4f} ({status.usage.cost_source})")
    lines.append("Inputs:" + ("" if spec.inputs else "       <none>"))
    if spec.inputs:
        rows = [["Name", "Source", "Size"]]
        for item in spec.inputs:
            size = input_sizes.get(item.name)
            rows.append([item.name, describe_input_source(item), "-" if size is None else f"{size} bytes"])
        lines += build_table(rows)
    conditions = status.conditions if status else []
    lines.append("Conditions:" + ("" if conditions else "   <none>"))
    if conditions:
        rows = [["Type", "Status", "Reason", "Message"]]
        rows += [[c.type, c.status, c.reason or "", c.message or ""] for c in conditions]
        lines += build_table(rows)
    attempts = status.attempts if status else []
    lines.append("Attempts:" + ("" if attempts else "     <none>"))
    if attempts:
        rows = [["#", "Provider", "Exit", "Reason", "Model", "Cost", "Denied tools"]]
        for a in attempts:
            cost = a.usage.cost_usd if a.usage else None
            rows.append(
                [
                    str(a.index),
                    a.provider,
                    "" if a.exit_code is None else str(a.exit_code),
                    a.reason or "",
                    a.model or "",
                    "" if cost is None else f"${cost:.4f}",
                    ", ".join(a.denied_tools or []),
                ]
            )
        lines += build_table(rows)
    lines.append("Events:" + ("" if events else "       <none>"))
    if events:
        rows = [["Type", "Reason", "Age", "Message"]]
        ordered = sorted(events, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
        for event in ordered:
            stamp = event.get("lastTimestamp") or event.get("eventTime")
            rows.append(
                [
                    str(event.get("type") or ""),
                    str(event.get("reason") or ""),
                    build_age(stamp, now),
                    str(event.get("message") or ""),
                ]
            )
        lines += build_table(rows)
    return "\n".join(lines) + "\n"
