"""The runner's spans of an attempt, carried by its pod log (pure).

Nothing in the sandbox reaches the collector, so the runner writes its spans as one marked line, the last
it writes; when the attempt ends the operator reads that line from the log's tail (`find_spans_line`)
and takes the spans as the sandbox's word (`build_span_records`): the agent shares the log, so their
ids are derived from the run's uid, their parents are within the attempt's span, their times within
the pod's, and their names and attributes bounded. An agent line that begins with the marker is
escaped like the runner's other lines (events.py).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeGuard

from harness_operator.contract.tracing import SpanRecord, compute_attempt_span_id, compute_span_id

MARKER = "@harness-spans "
MAX_SPANS = 256
MAX_LINE_BYTES = 48 * 1024  # the whole line, marker and newline included
# What the operator reads at the attempt's end: the last lines of the runner's log, at most these bytes.
# A runtime splits a long line into entries of 8 or 16 KiB and tailLines counts entries; the lines before
# the spans are the output frame's (76 characters).
TAIL_LINES = 16
TAIL_BYTES = 64 * 1024
NAME_CHARS = 64
MAX_ATTRIBUTES = 16
VALUE_CHARS = 256
ERROR_CHARS = 256
SOURCE = "harness.source"  # on every span the operator takes from the sandbox: "sandbox"
DROPPED = "harness.spans_dropped"  # on the first span of a line that left spans out: how many
_KEY = re.compile(r"[a-z0-9_.]{1,64}")
_INT64 = 1 << 63
_ROOM = 64  # bytes kept free for the DROPPED attribute the first span may get

RunnerAttribute = str | int | float | bool


@dataclass(frozen=True)
class RunnerSpan:
    """One span as the runner saw it: wall-clock nanoseconds since the epoch; `parent` the index of an
    earlier span of the same line, None for the attempt's own span; `error` why it failed."""

    name: str
    start_ns: int
    end_ns: int
    parent: int | None = None
    attributes: Mapping[str, RunnerAttribute] = field(default_factory=dict)
    error: str | None = None


def encode_spans_line(spans: Sequence[RunnerSpan], dropped: int = 0) -> str:
    """The marked line for the log, newline included: the spans capped as the operator caps them, at most
    MAX_SPANS and MAX_LINE_BYTES; the newest beyond are left out, and the first span says how many
    (with the `dropped` ones its caller left out already)."""
    capped = [_capped_span(s) for s in spans[:MAX_SPANS]]
    room = MAX_LINE_BYTES - len((MARKER + _line([])).encode()) - _ROOM
    kept, used = 0, 0
    for span in capped:
        used += len(_dump(_span_doc(span)).encode()) + 1
        if used > room:
            break
        kept += 1
    dropped += len(spans) - kept
    out = capped[:kept]
    if dropped and out:
        first = out[0]
        out[0] = _capped_span(replace(first, attributes={DROPPED: dropped, **first.attributes}))
    return MARKER + _line(out)


def find_spans_line(log_tail: str) -> str | None:
    """The last line of `log_tail` that starts with the marker, without its line end; None if none."""
    at = log_tail.rfind("\n" + MARKER)
    if at >= 0:
        start = at + 1
    elif log_tail.startswith(MARKER):
        start = 0
    else:
        return None
    end = log_tail.find("\n", start)
    return log_tail[start : end if end >= 0 else None].rstrip("\r")


def build_span_records(
    line: str | None, run_uid: str, attempt_index: int, window: tuple[int, int]
) -> list[SpanRecord]:
    """The spans of a runner's line as the operator exports them, in the run's trace under attempt
    `attempt_index`'s span: ids the run's own (never the sandbox's), a parent that is the attempt's span
    or an earlier span of the line (any other reference: the attempt's span), times clamped into
    `window` (when the attempt's pod ran, in nanoseconds), names, attributes and errors capped, and
    harness.source "sandbox" on each. None, a line too long or anything not a line of spans: []."""
    raw = _parse(line)
    attempt_span = compute_attempt_span_id(run_uid, attempt_index)
    low, high = window
    ids: dict[int, str] = {}  # the spans taken so far by position: a reference to any other is none
    records: list[SpanRecord] = []
    for position, doc in enumerate(raw[:MAX_SPANS]):
        span = _read_span(doc)
        if span is None:
            continue
        span_id = compute_span_id(run_uid, "attempt", attempt_index, "runner", position)
        parent_id = attempt_span if span.parent is None else ids.get(span.parent, attempt_span)
        start = min(max(span.start_ns, low), high)
        end = min(max(span.end_ns, start), high)
        attributes = {**span.attributes, SOURCE: "sandbox"}
        records.append(SpanRecord(span.name, span_id, parent_id, start, end, attributes, span.error))
        ids[position] = span_id
    return records


def _parse(line: str | None) -> list[Any]:
    if line is None or not line.startswith(MARKER) or len(line) > MAX_LINE_BYTES:
        return []
    try:
        doc = json.loads(line[len(MARKER) :])
    except (ValueError, RecursionError):  # a deep nest of brackets exhausts the decoder's stack
        return []
    spans = doc.get("spans") if isinstance(doc, dict) else None
    return spans if isinstance(spans, list) else []


def _read_span(doc: Any) -> RunnerSpan | None:
    """One span of the line, capped; None when it is not one (no name, no integer times)."""
    if not isinstance(doc, dict):
        return None
    name, start, end, parent = doc.get("name"), doc.get("start"), doc.get("end"), doc.get("parent")
    if not isinstance(name, str) or not name or not _is_int(start) or not _is_int(end):
        return None
    attributes = doc.get("attributes")
    error = doc.get("error")
    return _capped_span(
        RunnerSpan(
            name,
            start,
            end,
            parent if _is_int(parent) and parent >= 0 else None,
            attributes if isinstance(attributes, dict) else {},
            error if isinstance(error, str) else None,
        )
    )


def _capped_span(span: RunnerSpan) -> RunnerSpan:
    """The span with its name, attributes and error within bounds: at most MAX_ATTRIBUTES attributes,
    the first that have a key of [a-z0-9_.] and a value of a kept type (a finite float, a 64-bit int)."""
    attributes: dict[str, RunnerAttribute] = {}
    for key, value in span.attributes.items():
        if len(attributes) == MAX_ATTRIBUTES:
            break
        kept = _capped_value(value)
        if isinstance(key, str) and _KEY.fullmatch(key) and kept is not None:
            attributes[key] = kept
    error = None if span.error is None else span.error[:ERROR_CHARS]
    return replace(span, name=span.name[:NAME_CHARS], attributes=attributes, error=error)


def _capped_value(value: Any) -> RunnerAttribute | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if -_INT64 <= value < _INT64 else None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return value[:VALUE_CHARS]
    return None


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _span_doc(span: RunnerSpan) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": span.name, "start": span.start_ns, "end": span.end_ns}
    if span.parent is not None:
        doc["parent"] = span.parent
    if span.attributes:
        doc["attributes"] = dict(span.attributes)
    if span.error is not None:
        doc["error"] = span.error
    return doc


def _line(spans: Sequence[RunnerSpan]) -> str:
    return _dump({"spans": [_span_doc(s) for s in spans]}) + "\n"


def _dump(doc: Any) -> str:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
