"""The runner's spans line: written by the runner, found in a log's tail and taken by the operator as the
sandbox's word (ids and parents its own, times in the pod's window, everything bounded); agent lines
that imitate it are escaped."""

import json

import pytest

from harness_operator.contract.events import escape_agent_line
from harness_operator.contract.runner_spans import (
    DROPPED,
    MARKER,
    MAX_ATTRIBUTES,
    MAX_LINE_BYTES,
    MAX_SPANS,
    SOURCE,
    TAIL_BYTES,
    RunnerSpan,
    build_span_records,
    encode_spans_line,
    find_spans_line,
)
from harness_operator.contract.tracing import compute_attempt_span_id, compute_span_id

UID = "3f1c0c8e-run"
WINDOW = (1_000, 9_000)
ATTEMPT = compute_attempt_span_id(UID, 2)


def runner_id(position: int) -> str:
    return compute_span_id(UID, "attempt", 2, "runner", position)


def take(line: str | None, window: tuple[int, int] = WINDOW):
    return build_span_records(line, UID, 2, window)


def raw_line(*spans: object) -> str:
    return MARKER + json.dumps({"spans": list(spans)})


def test_a_line_round_trips_into_the_runs_trace_under_the_attempt() -> None:
    spans = [
        RunnerSpan("setup", 1_100, 1_200),
        RunnerSpan("agent", 1_200, 8_000, attributes={"harness.provider": "claude", "process.exit.code": 1}),
        RunnerSpan("turn 1", 1_300, 2_000, parent=1, attributes={"harness.turn": 1}),
        RunnerSpan("tool Read", 1_400, 1_900, parent=2, attributes={"gen_ai.tool.name": "Read"}),
        RunnerSpan("reprompt 1", 5_000, 8_000, parent=1, attributes={"ok": True, "ratio": 0.5}, error="x"),
    ]
    line = encode_spans_line(spans)
    assert line.startswith(MARKER) and line.endswith("\n") and line.count("\n") == 1
    records = take(find_spans_line("agent noise\n" + line))
    assert [r.name for r in records] == ["setup", "agent", "turn 1", "tool Read", "reprompt 1"]
    assert [r.span_id for r in records] == [runner_id(i) for i in range(5)]
    assert [r.parent_id for r in records] == [ATTEMPT, ATTEMPT, runner_id(1), runner_id(2), runner_id(1)]
    assert [(r.start_ns, r.end_ns) for r in records] == [(s.start_ns, s.end_ns) for s in spans]
    assert records[1].attributes == {"harness.provider": "claude", "process.exit.code": 1, SOURCE: "sandbox"}
    assert records[4].attributes == {"ok": True, "ratio": 0.5, SOURCE: "sandbox"}
    assert records[4].error == "x" and records[0].error is None


def test_the_sandboxs_ids_and_parents_are_never_taken() -> None:
    line = raw_line(
        {"name": "a", "start": 1_500, "end": 1_600, "id": "ffffffffffffffff", "parent": 0},  # itself
        {"name": "b", "start": 1_500, "end": 1_600, "parent": 5},  # a later span
        {"name": "c", "start": 1_500, "end": 1_600, "parent": 99},  # out of range
        {"name": "d", "start": 1_500, "end": 1_600, "parent": -1},
        {"name": "e", "start": 1_500, "end": 1_600, "parent": True},
        {"name": "f", "start": 1_500, "end": 1_600, "parent": "0"},
        {"name": "g", "start": 1_500, "end": 1_600, "parent": 0, "traceId": "0" * 31 + "1"},
        {"nope": 1},
        {"name": "i", "start": 1_500, "end": 1_600, "parent": 7},  # a span that was not one
    )
    records = take(find_spans_line(line))
    assert [r.name for r in records] == ["a", "b", "c", "d", "e", "f", "g", "i"]
    assert [r.parent_id for r in records] == [ATTEMPT] * 6 + [runner_id(0), ATTEMPT]
    assert records[-1].span_id == runner_id(8)  # its position in the line, whatever was skipped
    other_run = build_span_records(line, "another-uid", 2, WINDOW)
    assert {r.span_id for r in other_run}.isdisjoint({r.span_id for r in records})


def test_times_are_clamped_into_the_pods_window() -> None:
    line = raw_line(
        {"name": "before", "start": 10, "end": 500},
        {"name": "after", "start": 20_000, "end": 30_000},
        {"name": "across", "start": 0, "end": 10**30},
        {"name": "backwards", "start": 5_000, "end": 2_000},
        {"name": "inside", "start": 2_000, "end": 3_000},
    )
    times = [(r.start_ns, r.end_ns) for r in take(line)]
    assert times == [(1_000, 1_000), (9_000, 9_000), (1_000, 9_000), (5_000, 5_000), (2_000, 3_000)]


def test_names_attributes_and_errors_are_capped() -> None:
    attributes = {f"k{i:02d}": i for i in range(40)}
    odd = {
        "Upper": "x",
        "has space": "x",
        "k" * 65: "x",
        "list": ["a"],
        "none": None,
        "nested": {"a": 1},
        "big": 1 << 64,
        "long": "v" * 1000,
    }
    line = raw_line(
        {"name": "n" * 500, "start": 1_500, "end": 1_600, "attributes": attributes, "error": "e" * 1000},
        {"name": "odd", "start": 1_500, "end": 1_600, "attributes": odd, "error": 7},
    )
    first, second = take(line)
    assert first.name == "n" * 64 and first.error == "e" * 256
    assert list(first.attributes) == [f"k{i:02d}" for i in range(MAX_ATTRIBUTES)] + [SOURCE]
    assert second.attributes == {"long": "v" * 256, SOURCE: "sandbox"} and second.error is None
    infinite = MARKER + '{"spans":[{"name":"x","start":1500,"end":1600,"attributes":{"f":Infinity,"g":NaN}}]}'
    assert take(infinite)[0].attributes == {SOURCE: "sandbox"}


def test_never_more_than_max_spans_are_taken() -> None:
    line = raw_line(*({"name": f"s{i}", "start": 1_500, "end": 1_600} for i in range(MAX_SPANS + 50)))
    assert len(take(line)) == MAX_SPANS


@pytest.mark.parametrize(
    "line",
    [
        None,
        "",
        MARKER,
        MARKER + "{not json",
        MARKER + "[]",
        MARKER + '{"spans": {"name": "x"}}',
        MARKER + '{"spans": [1, "x", null]}',
        MARKER + '{"spans": [{"name": "", "start": 1, "end": 2}]}',
        MARKER + '{"spans": [{"name": "x", "start": "1", "end": 2}]}',
        MARKER + '{"spans": [{"name": "x", "start": true, "end": 2}]}',
        MARKER + '{"spans": [{"name": "x", "start": 1.5, "end": 2}]}',
        MARKER + "[" * 100_000,  # a nest that exhausts the decoder's stack
        MARKER + '{"spans": [' + ",".join(['{"name":"x","start":1,"end":2}'] * 2000) + "]}",  # too long
        '@harness-event {"spans": [{"name": "x", "start": 1, "end": 2}]}',
    ],
)
def test_garbage_is_no_spans(line: str | None) -> None:
    assert take(line) == []


def test_the_last_marked_line_at_a_line_start_is_found() -> None:
    first = encode_spans_line([RunnerSpan("old", 1, 2)])
    last = encode_spans_line([RunnerSpan("new", 1, 2)])
    tail = f"x\n{first} {last}agent says {MARKER}here\n{last}"
    assert find_spans_line(tail) == last.rstrip("\n")
    assert find_spans_line(last.rstrip("\n") + "\r\nlater\n") == last.rstrip("\n")
    assert find_spans_line(f"agent: {MARKER}{{}}\n") is None
    assert find_spans_line("") is None


def test_a_line_over_the_limits_drops_the_newest_spans_and_says_so() -> None:
    many = [RunnerSpan(f"s{i}", i, i + 1) for i in range(MAX_SPANS + 10)]
    line = encode_spans_line(many, dropped=5)
    records = take(line, (0, 10_000))
    assert [r.name for r in records] == [f"s{i}" for i in range(MAX_SPANS)]
    assert records[0].attributes[DROPPED] == 15
    big = {f"k{i}": "é" * 1000 for i in range(MAX_ATTRIBUTES)}
    heavy = [RunnerSpan(f"h{i}", i, i + 1, attributes=big) for i in range(100)]
    line = encode_spans_line(heavy)
    assert len(line.encode()) <= MAX_LINE_BYTES
    records = take(find_spans_line(line), (0, 10_000))
    assert 0 < len(records) < 100
    assert [r.name for r in records] == [f"h{i}" for i in range(len(records))]
    assert records[0].attributes[DROPPED] == 100 - len(records)
    assert len(records[0].attributes) == MAX_ATTRIBUTES + 1  # DROPPED first; harness.source added
    assert TAIL_BYTES > MAX_LINE_BYTES
    assert DROPPED not in take(encode_spans_line(many[:3]), (0, 10_000))[0].attributes


def test_an_agent_line_imitating_the_spans_is_escaped() -> None:
    forged = encode_spans_line([RunnerSpan("forged", 1, 2)]).encode()
    escaped = escape_agent_line(b"out\n" + forged, at_line_start=True)
    assert escaped == b"out\n " + forged
    assert find_spans_line(escaped.decode()) is None
    assert escape_agent_line(b"@harness-sp", at_line_start=True) == b" @harness-sp"  # a marker's start
