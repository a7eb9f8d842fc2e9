"""The runner's span recorder, driven as the executor drives it (launches through the spawn it wraps,
events as the parsers emit them) on a clock of its own: the spans' tree, re-prompts, failures, an agent
the runner does not launch, bounds and redaction; nothing at all for a run not traced."""

import itertools
import json
from typing import Any

from harness_operator.contract.events import Event
from harness_operator.contract.plan import AttemptPlan
from harness_operator.contract.runner_spans import DROPPED, MARKER, MAX_SPANS
from harness_operator.contract.tracing import build_traceparent
from harness_operator.runner.attempt import AttemptResult
from harness_operator.runner.launch import Launch
from harness_operator.runner.parsers import Report
from harness_operator.runner.spans import SpanRecorder

TRACED = build_traceparent("a" * 32, "b" * 16)


def plan(trace_parent: str | None = TRACED, **fields: Any) -> AttemptPlan:
    return AttemptPlan.model_validate(
        {
            "attempt": 1,
            "total_attempts": 1,
            "provider": "fake",
            "binary": "fake",
            "trace_parent": trace_parent,
        }
        | fields
    )


def recorder(the_plan: AttemptPlan, credentials: dict[str, str] | None = None) -> SpanRecorder:
    ticks = itertools.count(100, 10)
    spans = SpanRecorder(clock=lambda: next(ticks))
    spans.begin(the_plan, credentials or {})
    return spans


LAUNCH = Launch(["fake"], "fake", {}, "/", False)


def launched(spans: SpanRecorder) -> object:
    return spans.launching(lambda launch: "the process")(LAUNCH)


def decoded(line: str | None) -> list[dict[str, Any]]:
    assert line is not None and line.startswith(MARKER)
    return json.loads(line[len(MARKER) :])["spans"]


def succeeded(**fields: Any) -> AttemptResult:
    return AttemptResult(1, "fake", 0, None, "", agent_exit_code=0, **fields)


def test_setup_agent_turns_and_tools_nest_in_order() -> None:
    spans = recorder(plan())
    with spans.step("confinement probe") as said:
        said["harness.confined"] = True
    assert launched(spans) == "the process"
    for event in [
        Event("attempt", attempt=1),  # the runner's, not the agent's: nothing
        Event("session", session="s", model="m"),
        Event("turn", turn=1),
        Event("text", text="reading"),
        Event("tool", tool="Read", arg="/secret/path"),
        Event("progress", turns=1),  # from the tool's own line: the call goes on
        Event("turn", turn=2),
        Event("tool", tool="mcp__docs__search", arg="q"),
        Event("text", text="done"),
    ]:
        spans.on_event(event)
    found = decoded(spans.finish(succeeded(report=Report(model="opus", cli_version="2.1"))))
    names = [(s["name"], s.get("parent")) for s in found]
    assert names == [
        ("setup", None),
        ("confinement probe", 0),
        ("agent", None),
        ("turn 1", 2),
        ("tool Read", 3),
        ("turn 2", 2),
        ("tool mcp__docs__search", 5),
    ]
    by_name = {s["name"]: s for s in found}
    assert by_name["setup"]["start"] == 100 and by_name["setup"]["end"] == by_name["agent"]["start"]
    assert by_name["confinement probe"]["attributes"] == {"harness.confined": True}
    assert by_name["agent"]["attributes"] == {
        "harness.provider": "fake",
        "harness.cli.version": "2.1",
        "harness.model": "opus",
        "process.exit.code": 0,
    }
    tool = by_name["tool Read"]
    assert tool["attributes"] == {"gen_ai.tool.name": "Read"} and "/secret/path" not in json.dumps(found)
    assert tool["end"] == by_name["turn 2"]["start"]  # the progress event did not end it
    assert by_name["tool mcp__docs__search"]["end"] < by_name["agent"]["end"]  # the text event did
    assert by_name["turn 2"]["end"] == by_name["agent"]["end"]
    assert all("error" not in s for s in found)


def test_each_reprompt_is_a_span_of_the_agent_with_its_own_turns() -> None:
    spans = recorder(plan())
    launched(spans)
    spans.on_event(Event("turn", turn=1))
    spans.on_event(Event("tool", tool="Bash"))
    launched(spans)
    spans.on_event(Event("turn", turn=1))
    launched(spans)
    found = decoded(spans.finish(succeeded()))
    assert [(s["name"], s.get("parent")) for s in found] == [
        ("setup", None),
        ("agent", None),
        ("turn 1", 1),
        ("tool Bash", 2),
        ("reprompt 1", 1),
        ("turn 1", 4),
        ("reprompt 2", 1),
    ]
    assert found[3]["end"] == found[4]["start"] and found[2]["end"] == found[4]["start"]
    assert found[4]["end"] == found[6]["start"]
    assert found[4]["attributes"] == {"harness.reprompt": 1}


def test_a_failure_is_the_agents_error_or_the_setups_when_no_agent_started() -> None:
    spans = recorder(plan())
    launched(spans)
    failed = AttemptResult(1, "fake", 124, "Timeout", "harness: timed out", agent_exit_code=143)
    found = decoded(spans.finish(failed))
    assert "error" not in found[0] and found[1]["error"] == "Timeout"
    assert found[1]["attributes"]["process.exit.code"] == 143

    spans = recorder(plan())
    with spans.step("model destinations") as said:
        said["harness.unreachable"] = 1
    found = decoded(spans.finish(AttemptResult(1, "fake", 1, "ProviderUnavailable", "no route")))
    assert [s["name"] for s in found] == ["setup", "model destinations"]
    assert found[0]["error"] == "ProviderUnavailable" and "error" not in found[1]
    assert found[0]["end"] == found[1]["end"] + 10  # the setup ended with the attempt


def test_an_agent_the_runner_does_not_launch_starts_at_its_first_event() -> None:
    spans = recorder(plan())  # a remote ACP agent: no spawn, its session's events only
    spans.on_event(Event("progress", turns=1))
    spans.on_event(Event("session", session="s"))
    spans.on_event(Event("tool", tool="Read file /etc/passwd"))
    found = decoded(spans.finish(succeeded()))
    assert [(s["name"], s.get("parent")) for s in found] == [
        ("setup", None),
        ("agent", None),
        ("tool Read", 1),
    ]
    assert found[0]["end"] == found[1]["start"]


def test_a_tools_title_is_cut_to_its_name_and_redacted() -> None:
    spans = recorder(plan(redacted_values=["from-a-secret"]), {"TOKEN": "tok-123456789"})
    launched(spans)
    for title in ["`curl -H 'x: tok-123456789'`", "tok-123456789", "Run tok-123456789", "from-a-secret"]:
        spans.on_event(Event("tool", tool=title))
    found = decoded(spans.finish(succeeded(report=Report(model="model-tok-123456789"))))
    assert [s["name"] for s in found[2:]] == ["tool tool", "tool tool", "tool Run", "tool tool"]
    line = json.dumps(found)
    assert "tok-123456789" not in line and "from-a-secret" not in line
    assert found[1]["attributes"]["harness.model"] == "model-[REDACTED]"


def test_spans_past_the_bound_are_counted_not_kept() -> None:
    spans = recorder(plan())
    launched(spans)
    for turn in range(1, MAX_SPANS):
        spans.on_event(Event("turn", turn=turn))
        spans.on_event(Event("tool", tool="Read"))
    found = decoded(spans.finish(succeeded()))
    assert len(found) == MAX_SPANS
    assert found[0]["attributes"][DROPPED] == 2 + 2 * (MAX_SPANS - 1) - MAX_SPANS  # opened, less kept
    assert all(s.get("parent", -1) < i for i, s in enumerate(found))


def test_a_run_not_traced_records_nothing() -> None:
    for trace_parent in [None, build_traceparent("a" * 32, "b" * 16, sampled=False), "garbage"]:
        spans = recorder(plan(trace_parent))
        with spans.step("confinement probe") as said:
            said["harness.confined"] = True
        spawn = spans.launching(lambda launch: "the process")
        spans.on_event(Event("turn", turn=1))
        assert spawn(LAUNCH) == "the process"
        assert spans.finish(succeeded()) is None and spans.spans == []
