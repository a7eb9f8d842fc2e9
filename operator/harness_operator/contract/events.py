"""Normalized run events: what the parsers saw, one line each in the pod log, rendered for people (pure).

The runner writes each event as one marked JSON line on its stderr, which is the pod log; `harnessctl
logs` and the operator's progress reader take them back with `decode_event_line`. The agent shares that
log, so the runner escapes agent lines that begin with the marker (`escape_agent_line`): a marked line
at the start of a log line is the runner's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from harness_operator.contract.frame import FRAME_MARKER
from harness_operator.contract.runner_spans import MARKER as SPANS_MARKER

MARKER = "@harness-event "
# What starts the runner's own lines that readers parse: its events, the output frame's lines, its spans.
LINE_MARKERS = (MARKER.encode(), FRAME_MARKER.encode(), SPANS_MARKER.encode())
TEXT_CHARS = 500  # assistant text kept in an event; the whole answer travels in the output frame
ARG_CHARS = 80
# Argument keys that say most about a tool call, in order of preference.
_ARG_KEYS = ("command", "cmd", "file_path", "filePath", "path", "pattern", "url", "query", "description")


@dataclass(frozen=True)
class Event:
    """One thing a person watching a run cares about. Unset fields are absent from the JSON line.

    kinds: `attempt` (attempt, total, provider, retry: which retry of the provider, unset for none),
    `session` (session, model), `turn` (turn), `tool`
    (tool, arg), `text` (text), `progress` (turns, tokens, cost_usd, last_tool: all so far, this
    attempt), `result` (attempt, exit_code, reason, message, turns, tokens, cost_usd), and, from
    `harnessctl logs` only, `run` (phase, reason, exit_code, message, turns, tokens, cost_usd, changes:
    the run's status; changes is the published change in one line) and `waiting` (reason, message: why
    the run has not started or goes on, while it waits).
    """

    kind: str
    attempt: int | None = None
    total: int | None = None
    provider: str | None = None
    session: str | None = None
    model: str | None = None
    turn: int | None = None
    tool: str | None = None
    arg: str | None = None
    text: str | None = None
    turns: int | None = None
    tokens: int | None = None
    cost_usd: float | None = None
    last_tool: str | None = None
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None
    phase: str | None = None
    retry: int | None = None
    changes: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {_camel(k): v for k, v in asdict(self).items() if v is not None}


_FIELDS = {_f.name for _f in fields(Event)}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.upper() if part == "usd" else part.title() for part in rest)


_SNAKE = {_camel(name): name for name in _FIELDS}


def encode_event_line(event: Event) -> str:
    """The marked line for the log, newline included."""
    return MARKER + json.dumps(event.to_json(), ensure_ascii=False, separators=(",", ":")) + "\n"


def decode_event_line(line: str) -> Event | None:
    """The event of one log line, or None when the line is not a well-formed event."""
    if not line.startswith(MARKER):
        return None
    try:
        raw = json.loads(line[len(MARKER) :])
    except ValueError:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("kind"), str):
        return None
    try:
        return Event(**{_SNAKE[k]: v for k, v in raw.items() if k in _SNAKE})
    except TypeError:
        return None


def decode_events(lines: Iterable[str]) -> list[Event]:
    """Every event in a log, in order; other lines (the agent's stderr, the output frame) are skipped."""
    return [e for e in (decode_event_line(line.rstrip("\r\n")) for line in lines) if e is not None]


def escape_agent_line(data: bytes, at_line_start: bool) -> bytes:
    """Agent bytes for the log with any line that could read as a runner event, a line of the output
    frame or the runner's spans indented by a space (the container runtime may reorder stdout and
    stderr, so an agent's frame could otherwise come after the runner's).

    A chunk that starts a line and is a prefix of a marker is escaped too, since the rest of the
    marker may follow in the next chunk."""
    out = bytearray()
    for index, piece in enumerate(data.split(b"\n")):
        starts_line = at_line_start if index == 0 else True
        if starts_line and piece and any(piece.startswith(m) or m.startswith(piece) for m in LINE_MARKERS):
            out += b" "
        out += piece
        out += b"\n"
    return bytes(out[:-1])


def short_text(text: str, limit: int) -> str:
    """The first line of `text`, at most `limit` characters, with an ellipsis when cut."""
    stripped = text.strip()
    first = stripped.split("\n", 1)[0]
    if len(first) > limit:
        return first[: limit - 1] + "…"
    return first + (" …" if len(first) < len(stripped) else "")


def short_argument(arguments: Any) -> str | None:
    """A short, readable argument of a tool call: the command, path or query when there is one."""
    if isinstance(arguments, str):
        return short_text(arguments, ARG_CHARS) or None
    if not isinstance(arguments, Mapping):
        return None
    for key in _ARG_KEYS:
        value = arguments.get(key)
        if isinstance(value, list):
            value = " ".join(str(v) for v in value)
        if isinstance(value, str) and value.strip():
            return short_text(value, ARG_CHARS)
    for value in arguments.values():
        if isinstance(value, str) and value.strip():
            return short_text(value, ARG_CHARS)
    return None


def text_event(text: str) -> Event | None:
    """A `text` event of assistant text, cut to TEXT_CHARS; None for blank text."""
    stripped = text.strip()
    if not stripped:
        return None
    return Event("text", text=stripped if len(stripped) <= TEXT_CHARS else stripped[: TEXT_CHARS - 1] + "…")


def _figures(turns: int | None, tokens: int | None, cost: float | None) -> str:
    parts = []
    if turns is not None:
        parts.append(f"{turns} turn{'s' if turns != 1 else ''}")
    if tokens is not None:
        parts.append(f"{tokens:,} tokens")
    if cost is not None:
        parts.append(f"${cost:.4f}")
    return ", ".join(parts) or "usage unknown"


def render_event(event: Event) -> str | None:
    """One line for a person, or None for events that add nothing on their own."""
    if event.kind == "attempt":
        label = f"attempt {event.attempt}/{event.total} with {event.provider}"
        if event.retry:
            return f"↻ retry {event.retry}: {label}"
        return f"▶ {label}" if (event.attempt or 1) == 1 else f"↪ fallback: {label}"
    if event.kind == "session":
        return f"  session {event.session or '?'}" + (f", model {event.model}" if event.model else "")
    if event.kind == "turn":
        return f"● turn {event.turn}"
    if event.kind == "tool":
        return f"  ⚙ {event.tool}" + (f": {event.arg}" if event.arg else "")
    if event.kind == "text" and event.text:
        return "  " + short_text(event.text, 160)
    if event.kind == "progress":
        return "  · " + _figures(event.turns, event.tokens, event.cost_usd) + " so far"
    if event.kind == "result":
        outcome = "succeeded" if event.exit_code == 0 and not event.reason else f"failed: {event.reason}"
        line = f"■ attempt {event.attempt} {outcome} (exit {event.exit_code}); "
        line += _figures(event.turns, event.tokens, event.cost_usd)
        if event.reason and event.message:
            line += f"\n  {short_text(event.message, 200)}"
        return line
    if event.kind == "waiting":
        return f"… waiting: {event.reason}" + (f": {event.message}" if event.message else "")
    if event.kind == "run":
        line = f"{event.phase} ({event.reason}, exit {event.exit_code}); "
        line += _figures(event.turns, event.tokens, event.cost_usd)
        if event.phase not in ("Succeeded", "Running") and event.message:
            line += f"\n  {short_text(event.message, 200)}"
        if event.changes:
            line += f"\n  change: {event.changes}"
        return line
    return None


def render_events(events: Iterable[Event]) -> list[str]:
    return [line for line in (render_event(e) for e in events) if line is not None]


def latest_progress(events: Iterable[Event]) -> Event | None:
    """The last `progress` or `result` event: the attempt's figures so far."""
    latest = None
    for event in events:
        if event.kind in ("progress", "result"):
            latest = event
    return latest
