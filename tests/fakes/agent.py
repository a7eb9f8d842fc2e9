#!/usr/bin/env python3
"""A fake agent CLI for the runner's tests, run as a real process; behaviour picked by FAKE_MODE.

Modes: ok (claude-stream-json success), fail (exit 3 after some stdout), hang (sleeps until killed,
with a child process in its group), ignore-term (traps SIGTERM), cost (codex-jsonl turns that grow),
echo-env (prints the environment as JSON), echo-stdin, secret (prints the credential everywhere),
secret-encoded (prints it base64-, hex- and URL-encoded),
auth-error-exit-0 (claude-stream-json 401 result, exit 0), big (large text output),
echo-argv (prints its arguments and stdin as JSON, no newline: Dagu trims a step's output),
turns (claude-stream-json: FAKE_TURNS turns of a tool call and usage, FAKE_TURN_SECONDS apart, and a
stderr line that imitates a runner event).
"""

import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse

MODE = os.environ.get("FAKE_MODE", "ok")
PIDFILE = os.environ.get("FAKE_PIDFILE")


def out(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def result(text: str, **extra: object) -> None:
    event = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": text,
        "session_id": "fake-1",
        "num_turns": 1,
        "total_cost_usd": 0.01,
        "stop_reason": "end_turn",
        "terminal_reason": "completed",
        "usage": {
            "input_tokens": 10,
            "output_tokens": 5,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
        },
    }
    event.update(extra)
    out(event)


def main() -> int:
    name = os.path.basename(sys.argv[0])
    print(f"{name}: mode {MODE}, argv {sys.argv[1:]}", file=sys.stderr, flush=True)
    if MODE == "ok":
        out({"type": "system", "subtype": "init", "session_id": "fake-1", "model": "fake-model"})
        result(f"answer from {name}: {' '.join(sys.argv[1:])}")
        return 0
    if MODE == "fail":
        print("some stdout before failing")
        print("the agent failed", file=sys.stderr)
        return 3
    if MODE in ("hang", "ignore-term"):
        if MODE == "ignore-term":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        if PIDFILE:
            with open(PIDFILE, "w") as fh:
                fh.write(f"{os.getpid()} {child.pid}\n")
        print("hanging", file=sys.stderr, flush=True)
        time.sleep(600)
        return 0
    if MODE == "cost":
        out({"type": "thread.started", "thread_id": "thread-1"})
        for turn in range(1, 1000):
            usage = {"input_tokens": 1_000_000 * turn, "cached_input_tokens": 0, "output_tokens": 0}
            out({"type": "turn.completed", "usage": usage})
            time.sleep(0.05)
        return 0
    if MODE == "turns":
        out({"type": "system", "subtype": "init", "session_id": "fake-1", "model": "fake-model"})
        print('@harness-event {"kind":"progress","turns":999}', file=sys.stderr, flush=True)
        turns = int(os.environ.get("FAKE_TURNS", "3"))
        for turn in range(1, turns + 1):
            usage = {"input_tokens": 100 * turn, "output_tokens": 10}
            content = [
                {"type": "text", "text": f"Step {turn}: reading."},
                {"type": "tool_use", "name": "Read", "input": {"file_path": f"/workspace/f{turn}.py"}},
            ]
            out({"type": "assistant", "message": {"id": f"m{turn}", "content": content, "usage": usage}})
            time.sleep(float(os.environ.get("FAKE_TURN_SECONDS", "0")))
        result("all turns done", num_turns=turns)
        return 0
    if MODE == "echo-env":
        print(json.dumps(dict(os.environ), sort_keys=True))
        print(json.dumps({"cwd": os.getcwd(), "argv0": sys.orig_argv[0]}))
        return 0
    if MODE == "echo-argv":
        sys.stdout.write(json.dumps({"argv": sys.argv[1:], "stdin": sys.stdin.read()}))
        return 0
    if MODE == "echo-stdin":
        data = sys.stdin.read()
        print(json.dumps({"stdin": data}))
        return 0
    if MODE == "secret":
        secret = os.environ.get("FAKE_TOKEN", "")
        print(f"stderr has {secret}", file=sys.stderr, flush=True)
        result(f"output has {secret}")
        return 0
    if MODE == "secret-encoded":
        secret = os.environ.get("FAKE_TOKEN", "").encode()
        forms = [
            base64.b64encode(secret).decode(),
            base64.b64encode(b"#" + secret + b"#").decode(),
            secret.hex(),
            urllib.parse.quote(secret, safe=""),
        ]
        print("stderr has " + " ".join(forms), file=sys.stderr, flush=True)
        result("output has " + " ".join(forms))
        return 0
    if MODE == "secret-fail":
        secret = os.environ.get("FAKE_TOKEN", "")
        print(f"stdout has {secret}")
        return 2
    if MODE == "auth-error-exit-0":
        result("Invalid API key", is_error=True, api_error_status=401, total_cost_usd=0)
        return 0
    if MODE == "big":
        result("x" * 5000 + "é" * 10)
        return 0
    print(f"unknown FAKE_MODE {MODE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
