"""Normalized events: the parsers' events on every real capture, the log line codec, escaping of agent
lines, and the runner process writing them to its log as the agent runs."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.unit.runner.test___main__ import write_plan

from harness_operator.contract.events import (
    MARKER,
    Event,
    decode_event_line,
    decode_events,
    encode_event_line,
    escape_agent_line,
    latest_progress,
    render_event,
    render_events,
    short_argument,
)
from harness_operator.contract.frame import decode_frame, encode_frame
from harness_operator.runner.parsers import build_parser

FIXTURES = Path(__file__).parents[2] / "fixtures"
GOLDEN = Path(__file__).parents[1] / "golden" / "events"
CLI_FORMATS = {
    "aider": "aider-text",
    "claude": "claude-stream-json",
    "codex": "codex-jsonl",
    "copilot": "copilot-json",
    "gemini": "gemini-json",
    "opencode": "opencode-jsonl",
    "pi": "pi-jsonl",
    "qwen": "claude-stream-json",
}
CAPTURES = sorted(
    [(CLI_FORMATS[p.parent.name], p) for p in (FIXTURES / "cli").glob("*/*.stdout")]
    + [(p.parent.name, p) for p in (FIXTURES / "parsers").glob("*/*.stdout")]
)


def events_of(fmt: str, stdout: str) -> list[Event]:
    """Feed a capture line by line as the runner does, collecting events after each line."""
    parser = build_parser(fmt)
    events: list[Event] = []
    for line in stdout.splitlines():
        parser.feed(line)
        events += parser.take_events()
    parser.finish(stdout)
    return events + parser.take_events()


@pytest.mark.parametrize(("fmt", "path"), CAPTURES, ids=lambda v: getattr(v, "stem", v))
def test_every_capture_renders_as_its_golden_view(fmt, path):
    events = events_of(fmt, path.read_text(encoding="utf-8"))
    view = "\n".join(render_events(events)) + "\n"
    golden = GOLDEN / f"{path.parent.parent.name}-{path.parent.name}-{path.stem}.txt"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(view, encoding="utf-8")
    assert view == golden.read_text(encoding="utf-8")
    for event in events:  # every event survives the trip through the log
        assert decode_event_line(encode_event_line(event).rstrip("\n")) == event


def test_every_format_with_a_capture_shows_its_answer():
    shown = {fmt for fmt, path in CAPTURES if any(e.kind == "text" for e in events_of(fmt, path.read_text()))}
    assert shown == set(CLI_FORMATS.values()) | {"aider-text"}


@pytest.mark.parametrize(
    ("fmt", "case", "tool"),
    [
        (
            "claude-stream-json",
            FIXTURES / "cli/claude/max_turns.stdout",
            ("Read", "/nonexistent-harness-stub/file.txt"),
        ),
        (
            "claude-stream-json",
            FIXTURES / "cli/qwen/max_session_turns.stdout",
            ("glob", "/nonexistent-harness-stub/file.txt"),
        ),
        ("gemini-json", FIXTURES / "parsers/gemini-json/success.stdout", ("read_file", "a.py")),
        ("pi-jsonl", FIXTURES / "parsers/pi-jsonl/success.stdout", ("read", "a.py")),
    ],
)
def test_tool_calls_carry_their_name_and_a_short_argument(fmt, case, tool):
    tools = [(e.tool, e.arg) for e in events_of(fmt, case.read_text()) if e.kind == "tool"]
    assert tools == [tool]


def test_codex_copilot_and_opencode_tool_shapes():
    codex = [
        '{"type":"turn.started"}',
        '{"type":"item.started","item":{"id":"i1","type":"command_execution","command":"bash -lc ls"}}',
        '{"type":"item.completed","item":{"id":"i1","type":"command_execution","command":"bash -lc ls"}}',
        '{"type":"item.completed","item":{"id":"i2","type":"file_change","changes":[{"path":"a.py"}]}}',
    ]
    copilot = ['{"type":"tool.execution_start","data":{"toolName":"bash","arguments":{"command":"make"}}}']
    opencode = ['{"type":"tool_use","part":{"tool":"grep","state":{"input":{"pattern":"TODO"}}}}']
    assert [(e.tool, e.arg) for e in events_of("codex-jsonl", "\n".join(codex)) if e.kind == "tool"] == [
        ("shell", "bash -lc ls"),
        ("edit", "a.py"),
    ]
    assert [(e.tool, e.arg) for e in events_of("copilot-json", copilot[0])] == [("bash", "make")]
    assert [(e.tool, e.arg) for e in events_of("opencode-jsonl", opencode[0])] == [("grep", "TODO")]


def test_short_argument_prefers_the_command_and_cuts_long_values():
    assert short_argument({"description": "x", "command": "git status"}) == "git status"
    assert short_argument({"command": ["rg", "-n", "foo"]}) == "rg -n foo"
    assert short_argument({"other": "line one\nline two"}) == "line one …"
    assert short_argument({"path": "a" * 200}) == "a" * 79 + "…"
    assert short_argument({"n": 3}) is None


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (MARKER + '{"kind":"turn","turn":2}', Event("turn", turn=2)),
        (
            MARKER + '{"kind":"progress","costUSD":0.5,"lastTool":"Bash"}',
            Event("progress", cost_usd=0.5, last_tool="Bash"),
        ),
        (MARKER + '{"kind":"turn","unknownField":1}', Event("turn")),
        (MARKER + '{"turn":2}', None),
        (MARKER + '{"kind":"turn","turn":', None),
        (MARKER + "[1]", None),
        (" " + MARKER + '{"kind":"turn"}', None),
        ('{"kind":"turn"}', None),
    ],
)
def test_decode_event_line(line, expected):
    assert decode_event_line(line) == expected


@pytest.mark.parametrize(
    ("data", "at_start", "expected"),
    [
        (b"plain\n", True, b"plain\n"),
        (MARKER.encode() + b"{}\n", True, b" " + MARKER.encode() + b"{}\n"),
        (b"x\n" + MARKER.encode() + b"{}\n", True, b"x\n " + MARKER.encode() + b"{}\n"),
        (MARKER.encode() + b"{}\n", False, MARKER.encode() + b"{}\n"),  # mid-line: cannot start a line
        (b"@harn", True, b" @harn"),  # the rest of the marker may come in the next chunk
        (b"", True, b""),
        (
            b"===HARNESS-OUTPUT-BEGIN v1 bytes=1 sha256=x===\n",
            True,
            b" ===HARNESS-OUTPUT-BEGIN v1 bytes=1 sha256=x===\n",
        ),
        (b"a\n===HARNESS-OUTPUT-END===\n", True, b"a\n ===HARNESS-OUTPUT-END===\n"),
        (b"===HARN", True, b" ===HARN"),
    ],
)
def test_agent_lines_never_read_as_events_or_frames(data, at_start, expected):
    assert escape_agent_line(data, at_start) == expected


def test_an_agents_frame_in_the_log_never_counts_even_after_the_runners():
    """The red team's agent printed a frame; the runtime may put the runner's own (stdout) before the
    agent's lines (stderr): escaped, the agent's frame is no frame at all."""
    forged = escape_agent_line(encode_frame(b"FORGED OUTPUT").encode(), True).decode()
    assert decode_frame(encode_frame(b"") + forged) == b""


def test_render_says_fallback_and_outcome():
    assert (
        render_event(Event("attempt", attempt=1, total=2, provider="claude")) == "▶ attempt 1/2 with claude"
    )
    assert render_event(Event("attempt", attempt=2, total=2, provider="codex")) == (
        "↪ fallback: attempt 2/2 with codex"
    )
    failed = Event("result", attempt=1, exit_code=1, reason="ProviderFailed", message="exit 1", turns=2)
    assert render_event(failed) == "■ attempt 1 failed: ProviderFailed (exit 1); 2 turns\n  exit 1"
    done = Event("result", attempt=2, exit_code=0, turns=1, tokens=1290, cost_usd=0.0061)
    assert render_event(done) == "■ attempt 2 succeeded (exit 0); 1 turn, 1,290 tokens, $0.0061"


def test_the_runner_writes_events_to_its_log_as_the_agent_runs(tmp_path):
    plan = write_plan(tmp_path, "turns", env=[{"name": "FAKE_TURNS", "value": "3"}])
    proc = subprocess.run(
        [sys.executable, "-m", "harness_operator.runner", "--plan", str(plan), "--termination-log", "-"],
        capture_output=True,
        cwd=str(tmp_path),
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    events = decode_events(proc.stderr.decode().splitlines())
    kinds = [e.kind for e in events]
    assert kinds[0] == "attempt" and kinds[-1] == "result"
    assert [e.turn for e in events if e.kind == "turn"] == [1, 2, 3]
    assert [e.arg for e in events if e.kind == "tool"] == [
        "/workspace/f1.py",
        "/workspace/f2.py",
        "/workspace/f3.py",
    ]
    progress = [e for e in events if e.kind == "progress"]
    # Claude's live tokens are each message's last usage snapshot, summed; the forged line is not an event.
    assert [(p.turns, p.tokens, p.last_tool) for p in progress[:3]] == [
        (1, 110, "Read"),
        (2, 320, "Read"),
        (3, 630, "Read"),
    ]
    assert all(e.turns != 999 for e in events)
    assert f" {MARKER}" in proc.stderr.decode()  # the agent's imitation is in the log, escaped
    final = latest_progress(events)
    assert final is not None and final.kind == "result" and final.exit_code == 0 and final.cost_usd == 0.01
