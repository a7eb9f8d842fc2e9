"""The sandbox entrypoint as a real process: plan in, termination message and framed output out,
exit code, and for a traced run its spans last; SIGTERM to the runner cancels (exit 124, Cancelled, no
process left). Every test runs twice:
the agent as the runner's child, and (`--channel`, the pod) started by a real launcher process beside
the runner, which must end by itself once the runner is done, with the agent's exit code."""

import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.unit.runner.test_network import free_port, listening_after

from harness_operator.contract.frame import decode_frame
from harness_operator.contract.plan import REPROMPT_TEXT, AttemptPlan
from harness_operator.contract.result import TERMINATION_LIMIT, ResultDocument, parse_termination_message
from harness_operator.contract.runner_spans import MARKER, build_span_records, find_spans_line
from harness_operator.contract.tracing import build_traceparent, compute_attempt_span_id, compute_trace_id

AGENT = str(Path(__file__).parents[2] / "fakes" / "agent.py")
ROOT = Path(__file__).parents[3]
UID = "run-uid"
TRACED = build_traceparent(compute_trace_id(UID), compute_attempt_span_id(UID, 2))


def write_plan(tmp_path: Path, mode: str, **fields: Any) -> Path:
    env = [{"name": "FAKE_MODE", "value": mode}, *fields.pop("env", [])]
    plan = AttemptPlan.model_validate(
        {
            "attempt": 2,
            "total_attempts": 3,
            "provider": "fake",
            "binary": sys.executable,
            "args": [AGENT, "hi"],
            "output_format": "claude-stream-json",
            "env": env,
            **fields,
        }
    )
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    return path


LAUNCHERS: list[subprocess.Popen[bytes]] = []
MODE: list[str] = ["local"]


@pytest.fixture(autouse=True, params=["local", "channel"])
def through(request):
    """Without or with the launcher; afterwards, every launcher started has ended by itself."""
    MODE[0] = request.param
    yield request.param
    while LAUNCHERS:
        launcher = LAUNCHERS.pop()
        try:
            launcher.wait(timeout=30)
        except subprocess.TimeoutExpired:
            launcher.kill()
            raise AssertionError("the launcher did not end after the runner") from None


def start_runner(
    tmp_path: Path, plan: Path, extra_env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    env = {**os.environ, **(extra_env or {})}
    channel: list[str] = []
    if MODE[0] == "channel":
        folder = tmp_path / "run" / "channel"
        folder.parent.mkdir()
        channel = ["--channel", str(folder)]
        launcher = [sys.executable, "-I", "-m", "harness_operator.runner.launcher", *channel]
        LAUNCHERS.append(subprocess.Popen(launcher, cwd="/", stdin=subprocess.DEVNULL))
    return subprocess.Popen(
        [
            sys.executable,
            "-I",
            "-m",
            "harness_operator.runner",
            "--plan",
            str(plan),
            "--termination-log",
            str(tmp_path / "termination-log"),
            "--result-file",
            str(tmp_path / "result.json"),
            *channel,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=str(tmp_path),
    )


def test_success_reports_through_termination_message_and_log(tmp_path):
    proc = start_runner(tmp_path, write_plan(tmp_path, "ok"))
    log, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    message = (tmp_path / "termination-log").read_text()
    assert len(message.encode()) <= TERMINATION_LIMIT
    doc = parse_termination_message(message)
    assert isinstance(doc, ResultDocument) and doc.exit_code == 0 and doc.attempt == 2
    assert doc.usage.cost_source == "reported"
    output = decode_frame(log.decode(), doc.output.sha256)
    assert output == b"answer from agent.py: hi"
    assert (
        json.loads((tmp_path / "result.json").read_text())["output"]["sha256"]
        == hashlib.sha256(output).hexdigest()
    )
    assert "harness: attempt 2/3 with fake" in log.decode()


def test_failure_exits_with_the_agents_code_and_an_empty_frame(tmp_path):
    proc = start_runner(tmp_path, write_plan(tmp_path, "fail"))
    log, _ = proc.communicate(timeout=60)
    assert proc.returncode == 3
    doc = parse_termination_message((tmp_path / "termination-log").read_text())
    assert isinstance(doc, ResultDocument) and doc.reason == "ProviderFailed"
    assert decode_frame(log.decode(), doc.output.sha256) == b""


def test_credentials_come_from_the_runners_env_and_are_redacted(tmp_path):
    plan = write_plan(tmp_path, "secret", credential_envs=["FAKE_TOKEN"])
    proc = start_runner(tmp_path, plan, {"FAKE_TOKEN": "pod-secret-value"})
    log, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert b"pod-secret-value" not in log
    assert decode_frame(log.decode()) == b"output has [REDACTED]"


def test_unreadable_plan_is_a_setup_error(tmp_path):
    proc = start_runner(tmp_path, tmp_path / "missing.json")
    log, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert b"cannot read the plan" in log
    doc = parse_termination_message((tmp_path / "termination-log").read_text())
    assert isinstance(doc, ResultDocument) and doc.reason == "SetupFailed"


def test_sigterm_to_the_runner_cancels_the_agent(tmp_path):
    pidfile = tmp_path / "pids"
    plan = write_plan(
        tmp_path,
        "hang",
        env=[{"name": "FAKE_PIDFILE", "value": str(pidfile)}],
        limits={"gracePeriodSeconds": 2},
        trace_parent=TRACED,
    )
    proc = start_runner(tmp_path, plan)
    deadline = time.monotonic() + 20
    while not (pidfile.exists() and pidfile.read_text().endswith("\n")):
        assert time.monotonic() < deadline, "the agent never started"
        time.sleep(0.02)
    # A pod's deletion signals every container, in no set order. The launcher, signalled first, leaves
    # the agent alone: the runner decides the stop, so its report says why (Cancelled, not a crash).
    for launcher in LAUNCHERS:
        launcher.send_signal(signal.SIGTERM)
        agent_pids = [int(x) for x in pidfile.read_text().split()]
        deadline = time.monotonic() + 1
        while time.monotonic() < deadline:
            assert all(alive(pid) for pid in agent_pids), "the launcher passed SIGTERM on to the agent"
            time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    log, _ = proc.communicate(timeout=30)
    assert proc.returncode == 124
    assert b"cancelled; stopping the agent" in log
    doc = parse_termination_message((tmp_path / "termination-log").read_text())
    assert isinstance(doc, ResultDocument) and doc.reason == "Cancelled"
    spans = json.loads(log.decode().rstrip("\n").rsplit("\n", 1)[-1].removeprefix(MARKER))["spans"]
    assert [s["name"] for s in spans] == ["setup", "agent"] and spans[1]["error"] == "Cancelled"
    pids = [int(x) for x in pidfile.read_text().split()]
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids):  # SIGKILL lands asynchronously: wait, bounded
        assert time.monotonic() < deadline, "the agent's processes outlived the runner"
        time.sleep(0.02)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def test_a_plan_that_cannot_be_executed_still_ends_with_a_result(tmp_path):
    """A NUL byte in an argument used to crash the runner ("ended without a result")."""
    proc = start_runner(tmp_path, write_plan(tmp_path, "ok", args=[AGENT, "with\x00nul"]))
    log, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1
    doc = parse_termination_message((tmp_path / "termination-log").read_text())
    assert isinstance(doc, ResultDocument) and doc.reason == "SetupFailed"
    assert decode_frame(log.decode(), doc.output.sha256) == b""


def test_the_plan_env_reaches_the_agent_only(tmp_path):
    """PYTHONPATH from a run's env loads a sitecustomize in the agent (a Python program here), never in
    the runner: the runner's own interpreter starts before it reads the plan and passes the env on."""
    site = tmp_path / "site"
    site.mkdir()
    marker = tmp_path / "loaded-by"
    (site / "sitecustomize.py").write_text(
        f"import sys\nopen({str(marker)!r}, 'a').write(' '.join(sys.argv) + '\\n')\n"
    )
    plan = write_plan(tmp_path, "ok", env=[{"name": "PYTHONPATH", "value": str(site)}])
    proc = start_runner(tmp_path, plan)
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    loaded = marker.read_text().splitlines()
    assert loaded == [f"{AGENT} hi"]


def test_the_agent_starts_only_once_the_policy_refuses_the_probe(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as sock:
        port = sock.getsockname()[1]  # closed again: refused, as a policy in force refuses
    plan = write_plan(tmp_path, "ok", confinement={"host": "127.0.0.1", "port": port})
    proc = start_runner(tmp_path, plan)
    log, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, log
    assert f"network policy enforced: 127.0.0.1:{port} refused" in log.decode()


@pytest.mark.parametrize(("required", "code"), [(True, 1), (False, 0)])
def test_an_unenforced_policy_fails_the_attempt_before_the_agent_or_warns(tmp_path, required, code):
    with socket.create_server(("127.0.0.1", 0)) as sock:
        sock.listen(64)  # still reachable: the policy is not enforced
        probe = {
            "host": "127.0.0.1",
            "port": sock.getsockname()[1],
            "timeout_seconds": 1,
            "required": required,
        }
        plan = write_plan(tmp_path, "ok", confinement=probe)
        proc = start_runner(tmp_path, plan)
        log, _ = proc.communicate(timeout=60)
    assert proc.returncode == code, log
    assert b"does not enforce NetworkPolicy" in log
    doc = parse_termination_message((tmp_path / "termination-log").read_text())
    assert isinstance(doc, ResultDocument) and doc.output is not None
    output = decode_frame(log.decode(), doc.output.sha256)
    if required:
        assert doc.reason == "NetworkNotConfined" and output == b""
    else:
        assert doc.exit_code == 0 and output == b"answer from agent.py: hi"


@pytest.mark.parametrize("named_by", ["ANTHROPIC_BASE_URL", "model destination"])
def test_the_agent_starts_only_once_its_first_destination_answers(tmp_path, named_by):
    """The pod's network not ready at start (the model's address refusing for a second): the runner waits,
    then starts the agent, which finds it ready. The address named by the agent's environment (Claude
    Code's base URL) or only by the plan's model destinations (Codex's, OpenCode's, Pi's: in options or a
    file); what a URL may hold besides its host and port is never shown."""
    port = free_port()
    url = f"http://user:s3cret@127.0.0.1:{port}/anthropic?key=s3cret"
    if named_by == "ANTHROPIC_BASE_URL":
        plan = write_plan(tmp_path, "ok", env=[{"name": "ANTHROPIC_BASE_URL", "value": url}])
    else:
        plan = write_plan(tmp_path, "ok", model_destinations=[url])
    proc = start_runner(tmp_path, plan)
    assert proc.stdout is not None
    first = proc.stdout.readline()  # the runner has started: its wait is next
    with listening_after(port, 1.0):
        rest, _ = proc.communicate(timeout=60)
    log = first + rest
    assert proc.returncode == 0, log
    ready = re.search(
        rf"network ready: 127.0.0.1:{port} \({named_by}\) answered after ([0-9.]+) s", log.decode()
    )
    assert ready and float(ready.group(1)) >= 0.9, log
    assert b"s3cret" not in log
    doc = parse_termination_message((tmp_path / "termination-log").read_text())
    assert isinstance(doc, ResultDocument) and doc.exit_code == 0


def test_a_cli_attempt_never_imports_the_acp_sdk() -> None:
    """The SDK's schema was most of the runner's start-up CPU in every sandbox (0.8 s -> 0.25 s)."""
    code = "import sys, harness_operator.runner.__main__; print(sorted(m for m in sys.modules if m == 'acp'))"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"


def traced(tmp_path: Path, mode: str, **fields: Any) -> tuple[bytes, list[dict[str, Any]], tuple[int, int]]:
    """Run a traced attempt: its log, the spans of its last line as written, and when it ran."""
    before = time.time_ns()
    proc = start_runner(tmp_path, write_plan(tmp_path, mode, trace_parent=TRACED, **fields))
    log, _ = proc.communicate(timeout=60)
    after = time.time_ns()
    last = log.decode().rstrip("\n").rsplit("\n", 1)[-1]
    assert last.startswith(MARKER), log
    assert find_spans_line(log.decode()) == last
    return log, json.loads(last[len(MARKER) :])["spans"], (before, after)


def test_a_traced_run_ends_its_log_with_its_spans_nested_in_order(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as sock:
        port = sock.getsockname()[1]  # closed again: the policy refuses, the probe passes at once
    env = [{"name": "FAKE_TURNS", "value": "2"}, {"name": "FAKE_TURN_SECONDS", "value": "0.05"}]
    log, spans, (before, after) = traced(
        tmp_path, "turns", env=env, confinement={"host": "127.0.0.1", "port": port}
    )
    doc = parse_termination_message((tmp_path / "termination-log").read_text())
    assert isinstance(doc, ResultDocument) and doc.exit_code == 0 and doc.output is not None
    assert decode_frame(log.decode(), doc.output.sha256) == b"all turns done"  # the frame reads as before
    assert [(s["name"], s.get("parent")) for s in spans] == [
        ("setup", None),
        ("confinement probe", 0),
        ("agent", None),
        ("turn 1", 2),
        ("tool Read", 3),
        ("turn 2", 2),
        ("tool Read", 5),
    ]
    for index, span in enumerate(spans):
        assert before <= span["start"] <= span["end"] <= after
        if "parent" in span:
            parent = spans[span["parent"]]
            assert parent["start"] <= span["start"] and span["end"] <= parent["end"], (index, spans)
        assert "error" not in span
    assert [s["start"] for s in spans] == sorted(s["start"] for s in spans)
    assert spans[0]["end"] == spans[2]["start"]  # the setup lasts until the agent's launch
    assert spans[4]["end"] == spans[5]["start"] and spans[5]["end"] - spans[5]["start"] >= 40_000_000
    assert spans[2]["attributes"] == {
        "harness.provider": "fake",
        "harness.model": "fake-model",
        "process.exit.code": 0,
    }
    assert "/workspace/f1.py" not in json.dumps(spans)  # a tool's argument never
    records = build_span_records(find_spans_line(log.decode()), UID, 2, (before, after))
    attempt = compute_attempt_span_id(UID, 2)
    assert [r.parent_id for r in records] == [
        attempt,
        records[0].span_id,
        attempt,
        records[2].span_id,
        records[3].span_id,
        records[2].span_id,
        records[5].span_id,
    ]


@pytest.mark.parametrize(
    ("mode", "limits", "reason", "code"),
    [
        ("fail", {}, "ProviderFailed", 3),
        ("hang", {"timeoutSeconds": 1, "gracePeriodSeconds": 1}, "Timeout", 143),
    ],
)
def test_a_traced_failure_says_why_on_the_agents_span(tmp_path, mode, limits, reason, code):
    _, spans, _ = traced(tmp_path, mode, limits=limits)
    assert [s["name"] for s in spans] == ["setup", "agent"]
    assert spans[1]["error"] == reason and spans[1]["attributes"]["process.exit.code"] == code


def test_a_traced_reprompt_is_a_span_of_the_agent(tmp_path):
    schema = {"type": "object", "required": ["verdict"], "properties": {"verdict": {"enum": ["ok"]}}}
    env = [
        {"name": "FAKE_ANSWER", "value": '{"verdict": "maybe"}'},
        {"name": "FAKE_FIXED", "value": '{"verdict": "ok"}'},
    ]
    fields = {"output_schema": schema, "output_reprompts": 2, "reprompt_args": [AGENT, REPROMPT_TEXT]}
    _, spans, _ = traced(tmp_path, "answer-until-refused", env=env, **fields)
    assert [(s["name"], s.get("parent")) for s in spans] == [
        ("setup", None),
        ("agent", None),
        ("reprompt 1", 1),
    ]
    assert spans[2]["end"] == spans[1]["end"] and "error" not in spans[1]


def test_a_run_not_traced_writes_no_spans(tmp_path):
    proc = start_runner(tmp_path, write_plan(tmp_path, "turns"))
    log, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert MARKER.encode() not in log
