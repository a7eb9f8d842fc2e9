"""`harnessctl describe RUN`: what kubectl describe shows, for a run: spec summary, status, conditions,
attempts, cost, inputs (names, sources and sizes, never a Secret's value) and its Events (pure)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from harness_operator.api.v1alpha1 import HarnessRun, HarnessRunSpec, RunInput
from harness_operator.core.resolve.inputs import find_unknown_references, substitute_inputs


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


def describe_prompt(spec: HarnessRunSpec, values: Mapping[str, str]) -> str:
    """The prompt's size after substitution and its digest, when harnessctl could read every input it
    references; a prompt that takes a Secret's value gets neither (a digest of a guessable secret would
    tell it)."""
    if spec.prompt is None:
        return "from spec.promptFrom"
    template = len(spec.prompt.encode())
    if find_unknown_references(spec.prompt, list(values)):
        return f"{template} bytes before substitution (it takes an input harnessctl does not read)"
    prompt = substitute_inputs(spec.prompt, values).encode()
    digest = hashlib.sha256(prompt).hexdigest()[:16]
    return f"{len(prompt)} bytes after substitution, sha256:{digest} (the inputs as they read now)"


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


def describe_approval(run: HarnessRun) -> list[str]:
    """The approval lines: who decided, when and why; or, while the change waits, until when."""
    approval = run.status.approval if run.status else None
    if approval is None:
        return []
    if approval.decision is None:
        return [f"Approval:     awaiting a decision until {approval.deadline or '<unknown>'}"]
    why = f": {approval.reason}" if approval.reason else ""
    return [f"Approval:     {approval.decision} by {approval.user or '<unknown>'} at {approval.time}{why}"]


def build_description(
    run: HarnessRun,
    values: Mapping[str, str],
    events: Sequence[Mapping[str, Any]],
    now: datetime,
) -> str:
    """The text of `harnessctl describe`: `values` holds each input harnessctl could read (literal,
    ConfigMap, another run's output; never a Secret's), shown by size; `events` the run's Events (by its
    uid)."""
    meta, spec, status = run.metadata, run.spec, run.status
    providers = [spec.provider, *(f.provider for f in spec.fallback or [])]
    lines = [
        f"Name:         {meta.get('name')}",
        f"Namespace:    {meta.get('namespace')}",
        f"UID:          {meta.get('uid')}",
        f"Created:      {meta.get('creationTimestamp')}",
        f"Providers:    {', '.join(providers)}",
        f"Prompt:       {describe_prompt(spec, values)}",
        f"Cancel:       {'requested' if spec.cancel else 'no'}",
        f"Phase:        {(status.phase if status else None) or 'Pending'}",
    ]
    if status is not None and (status.reason or status.message):
        lines += [f"Reason:       {status.reason or ''}", f"Message:      {status.message or ''}"]
    if status is not None and status.usage is not None and status.usage.cost_usd is not None:
        lines.append(f"Cost:         ${status.usage.cost_usd:.4f} ({status.usage.cost_source})")
    lines += describe_approval(run)
    lines.append("Inputs:" + ("" if spec.inputs else "       <none>"))
    if spec.inputs:
        rows = [["Name", "Source", "Size"]]
        for item in spec.inputs:
            value = values.get(item.name)
            size = "-" if value is None else f"{len(value.encode())} bytes"
            rows.append([item.name, describe_input_source(item), size])
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
