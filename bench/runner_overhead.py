"""What the runner adds to one agent invocation, measured side by side in one run.

    .venv/bin/python bench/runner_overhead.py [--rounds 20]

Runs the same fake agent CLI (tests/fakes/agent.py, Claude-style stream-json) directly with subprocess,
then through the runner's executor (binary resolution, env allowlist, stdout spool, streaming parser,
redaction, result document), alternating the two so machine noise hits both alike, and prints the
medians and their ratio. A second pair compares parsing a long stream with the claude-stream-json
parser against bare json.loads of every line.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from harness_operator.api.v1alpha1 import EnvVar  # noqa: E402
from harness_operator.contract.plan import AttemptPlan  # noqa: E402
from harness_operator.runner.executor import execute  # noqa: E402
from harness_operator.runner.parsers import build_parser  # noqa: E402

AGENT = ROOT / "tests" / "fakes" / "agent.py"


def direct() -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, str(AGENT), "hi"],
        env={**os.environ, "FAKE_MODE": "ok"},
        capture_output=True,
        check=True,
    )
    return time.perf_counter() - start


def through_runner(plan: AttemptPlan) -> float:
    start = time.perf_counter()
    result = execute(plan, {"FAKE_TOKEN": "secret-value"}, stderr=io.BytesIO())
    assert result.succeeded, result
    return time.perf_counter() - start


def stream(lines: int) -> list[str]:
    events = [
        json.dumps(
            {
                "type": "assistant",
                "message": {
                    "content": [{"type": "text", "text": f"step {i}"}],
                    "usage": {"input_tokens": i, "output_tokens": 1},
                },
            }
        )
        for i in range(lines)
    ]
    return [
        *events,
        json.dumps(
            {
                "type": "result",
                "subtype": "success",
                "is_error": False,
                "result": "done",
                "usage": {"input_tokens": lines, "output_tokens": lines},
                "total_cost_usd": 0.5,
                "session_id": "s",
                "num_turns": lines,
            }
        ),
    ]


def parse_with_parser(lines: list[str]) -> float:
    start = time.perf_counter()
    parser = build_parser("claude-stream-json")
    for line in lines:
        parser.feed(line)
    parser.finish("")
    return time.perf_counter() - start


def parse_bare(lines: list[str]) -> float:
    start = time.perf_counter()
    for line in lines:
        json.loads(line)
    return time.perf_counter() - start


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--rounds", type=int, default=20)
    rounds = args.parse_args().rounds
    plan = AttemptPlan(
        attempt=1,
        total_attempts=1,
        provider="fake",
        binary=sys.executable,
        args=[str(AGENT), "hi"],
        env=[EnvVar(name="FAKE_MODE", value="ok")],
        credential_envs=["FAKE_TOKEN"],
        output_format="claude-stream-json",
    )
    pairs = [(direct(), through_runner(plan)) for _ in range(rounds)]
    plain, runner = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
    print(
        f"agent run, median of {rounds}: direct {plain * 1000:.1f} ms, through the runner "
        f"{runner * 1000:.1f} ms, ratio {runner / plain:.2f}"
    )
    lines = stream(20_000)
    parsed = [(parse_bare(lines), parse_with_parser(lines)) for _ in range(5)]
    bare, ours = statistics.median(p[0] for p in parsed), statistics.median(p[1] for p in parsed)
    print(
        f"parse {len(lines)} stream-json lines, median of 5: json.loads {bare * 1000:.1f} ms, "
        f"claude parser {ours * 1000:.1f} ms, ratio {ours / bare:.2f}"
    )


if __name__ == "__main__":
    main()
