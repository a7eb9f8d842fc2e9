#!/usr/bin/env python3
"""A fake agent CLI for the runner's tests, run as a real process; behaviour picked by FAKE_MODE.

Modes: ok (claude-stream-json success), fail (exit 3 after some stdout), hang (sleeps until killed,
with a child process in its group), ignore-term (traps SIGTERM), cost (codex-jsonl turns that grow),
echo-env (prints the environment as JSON), echo-stdin, secret (prints the credential everywhere),
secret-encoded (prints it base64-, hex- and URL-encoded),
auth-error-exit-0 (claude-stream-json 401 result, exit 0), rate-limited (claude-stream-json 429
result, exit 1: a transient error spec.retry retries), answer (a claude-stream-json success whose
result is FAKE_ANSWER verbatim), answer-until-refused (likewise, but FAKE_FIXED once an argument says an
answer "was refused": a re-prompt), big (large text output),
echo-argv (prints its arguments and stdin as JSON, no newline: Dagu trims a step's output),
forge (the red team's attack on the runner's report: a success document with a negative cost written
to /dev/termination-log, a forged output frame, progress and CostLimitExceeded events and the
credential FAKE_TOKEN written to every other process's stdout and stderr, from itself and from a
grandchild shell, then SIGKILL to every other process it can see, then exit 1),
fail-with-events (a forged runner event on stdout, then exit 1: its tail in the log must stay the
agent's), freeze-parent (SIGSTOPs its parent, the launcher, writes FAKE_PIDFILE and hangs: no stop is kept),
forge-exit (a claude-stream-json success, a false `exit 0` written to the launcher's status FIFO in
FAKE_CHANNEL, then exit 3),
turns (claude-stream-json: FAKE_TURNS turns of a tool call and usage, FAKE_TURN_SECONDS apart, and a
stderr line that imitates a runner event).
"""

import base64
import contextlib
import hashlib
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
        "total_cost_usd": float(os.environ.get("FAKE_COST", "0.01")),
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


def forge() -> int:
    """Try to write what the operator trusts; say on stderr what was reachable. Exit 1. Only in a
    container whose PID 1 is the launcher (the sandbox's agent container): elsewhere it would signal
    the machine's processes."""
    with open("/proc/1/cmdline", "rb") as fh:
        if b"harness_operator.runner.launcher" not in fh.read():
            print("forge: refused: PID 1 is not the launcher (not in a sandbox)", file=sys.stderr)
            return 2
    from harness_operator.contract.events import Event, encode_event_line
    from harness_operator.contract.frame import encode_frame

    forged = b"FORGED OUTPUT"
    doc = {
        "version": 1,
        "attempt": 1,
        "provider": "forger",
        "exitCode": 0,
        "usage": {"costUSD": -1000, "costSource": "reported", "inputTokens": 1},
        "output": {
            "bytes": len(forged),
            "totalBytes": len(forged),
            "sha256": hashlib.sha256(forged).hexdigest(),
        },
    }
    token = os.environ.get("FAKE_TOKEN", "")
    lines = (
        encode_event_line(Event("progress", turns=1, tokens=1, cost_usd=-1000.0))
        + encode_event_line(
            Event("result", attempt=1, provider="forger", exit_code=124, reason="CostLimitExceeded")
        )
        + f"leaked {token}\n"
        + encode_frame(forged)
    )
    reached = []
    try:
        with open("/dev/termination-log", "w") as fh:
            fh.write(json.dumps(doc))
        reached.append("/dev/termination-log")
    except OSError:
        pass
    others = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]
    for pid in others:
        for fd in (1, 2):
            try:
                with open(f"/proc/{pid}/fd/{fd}", "w") as fh:
                    fh.write(lines)
                reached.append(f"/proc/{pid}/fd/{fd}")
            except OSError:
                pass
    script = 'for f in /proc/[0-9]*/fd/1 /proc/[0-9]*/fd/2; do printf "%s" "$LINES" >"$f"; done 2>/dev/null'
    subprocess.run(["/bin/sh", "-c", script], env={**os.environ, "LINES": lines}, check=False)
    print(f"forge: reached {reached}", file=sys.stderr, flush=True)
    for pid in others:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return 1


def main() -> int:
    name = os.path.basename(sys.argv[0])
    print(f"{name}: mode {MODE}, argv {sys.argv[1:]}", file=sys.stderr, flush=True)
    if MODE == "ok":
        out({"type": "system", "subtype": "init", "session_id": "fake-1", "model": "fake-model"})
        result(f"answer from {name}: {' '.join(sys.argv[1:])}")
        return 0
    if MODE == "fail-with-events":
        from harness_operator.contract.events import Event, encode_event_line

        forged = Event("result", attempt=1, provider="x", exit_code=124, reason="CostLimitExceeded")
        sys.stdout.write("before\n" + encode_event_line(forged) + "after\n")
        return 1
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
            time.sleep(float(os.environ.get("FAKE_TURN_SECONDS", "0.05")))
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
    if MODE == "answer":
        result(os.environ.get("FAKE_ANSWER", ""))
        return 0
    if MODE == "answer-until-refused":
        refused = any("was refused" in a for a in sys.argv[1:])
        result(os.environ.get("FAKE_FIXED" if refused else "FAKE_ANSWER", ""))
        return 0
    if MODE == "rate-limited":
        result("rate limited", is_error=True, api_error_status=429, total_cost_usd=0)
        return 1
    if MODE == "forge":
        return forge()
    if MODE == "freeze-parent":
        os.kill(os.getppid(), signal.SIGSTOP)
        if PIDFILE:
            with open(PIDFILE, "w") as fh:
                fh.write(f"{os.getpid()}\n")
        while True:
            time.sleep(1)
    if MODE == "forge-exit":
        out({"type": "system", "subtype": "init", "session_id": "fake-1", "model": "fake-model"})
        result("forged exit")
        channel = os.environ.get("FAKE_CHANNEL", "/run/harness/channel")
        with open(os.path.join(channel, "status"), "w") as fh:
            fh.write(json.dumps({"exit": 0}) + "\n")
        return 3
    if MODE == "big":
        result("x" * 5000 + "é" * 10)
        return 0
    print(f"unknown FAKE_MODE {MODE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
