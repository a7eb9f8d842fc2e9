"""The MCP gate as a real process between a client (this test, speaking MCP's stdio transport) and a real
server: the local stdio fake it starts, or the remote HTTP stub. Listed tools are listed and called;
any other is neither listed nor ever reaches the server; a header's $(NAME) is read from the gate's
environment, never from its arguments."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.stubs.mcp import McpStub

from harness_operator.runner.mcp_gate import expand_header

FAKE_SERVER = str(Path(__file__).parents[2] / "fakes" / "mcp_stdio.py")
GATE = [sys.executable, "-I", "-m", "harness_operator.runner.mcp_gate"]
SESSION = [
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "hi"}},
    },
]


def converse(args: list[str], env: dict[str, str] | None = None) -> tuple[dict[Any, dict], str]:
    """The gate's answers by id to the session above, and its stderr."""
    stdin = "".join(json.dumps(m) + "\n" for m in SESSION)
    done = subprocess.run(
        [*GATE, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ["PATH"], **(env or {})},
    )
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    return {a.get("id"): a for a in answers}, done.stderr


def listed(answers: dict[Any, dict]) -> list[str]:
    return [t["name"] for t in answers[2]["result"]["tools"]]


@pytest.mark.parametrize("tools", [["echo"], ["other"]])
def test_a_local_server_offers_and_runs_only_the_listed_tools(tmp_path: Path, tools: list[str]) -> None:
    calls = tmp_path / "calls.jsonl"
    answers, err = converse([f"--tool={t}" for t in tools] + ["--", sys.executable, FAKE_SERVER, str(calls)])
    assert answers[1]["result"]["serverInfo"]
    if tools == ["echo"]:
        assert listed(answers) == ["echo"]
        assert "error" not in answers[3] and calls.read_text().count("hi") == 1
    else:
        assert listed(answers) == []
        assert answers[3]["error"]["message"] == "Unknown tool: echo (not one this run allows)"
        assert not calls.exists() or "hi" not in calls.read_text()  # the server never saw the call
        assert "refused tools/call 'echo'" in err


@pytest.mark.parametrize("tools", [["echo"], ["other"]])
def test_a_remote_server_offers_and_runs_only_the_listed_tools(tools: list[str]) -> None:
    with McpStub() as server:
        args = [f"--tool={t}" for t in tools]
        args += ["--url", server.url, "--header", "Authorization: Bearer $(DOCS_TOKEN)"]
        answers, _ = converse(args, {"DOCS_TOKEN": "tok-123"})
        methods = [r.body.get("method") for r in server.requests if isinstance(r.body, dict)]
        auth = {tuple(r.auth_sha256) for r in server.requests}
        session_ids = [r.headers.get("mcp-session-id") for r in server.requests]
    assert answers[1]["result"]["serverInfo"]["name"] == "harness-mcp-stub"
    assert auth == {(hashlib.sha256(b"tok-123").hexdigest(),)}
    assert session_ids[0] is None and set(session_ids[1:]) == {"stub-session"}
    if tools == ["echo"]:
        assert listed(answers) == ["echo"] and "tools/call" in methods
        assert answers[3]["result"]["content"][0]["text"] == "ECHO: hi"
    else:
        assert listed(answers) == [] and "tools/call" not in methods
        assert "error" in answers[3]


def test_a_header_names_its_variable_and_a_missing_one_is_refused() -> None:
    assert expand_header("Authorization: Bearer $(T)", {"T": "x"}) == ("Authorization", "Bearer x")
    assert expand_header("X-Plain: text", {}) == ("X-Plain", "text")
    with pytest.raises(ValueError, match="header Authorization: variable T is not set"):
        expand_header("Authorization: Bearer $(T)", {})
    done = subprocess.run(
        [*GATE, "--tool=a", "--url", "http://127.0.0.1:9/mcp", "--header", "Authorization: $(T)"],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": os.environ["PATH"]},
    )
    assert done.returncode == 2 and "variable T is not set" in done.stderr


NOBODY = 65534
OPERATOR = str(Path(__file__).parents[3] / "operator")


@pytest.mark.skipif(os.geteuid() != 0, reason="starting processes as another user needs root")
def test_the_gates_environment_is_not_readable_by_its_own_user(tmp_path: Path) -> None:
    """Run as one unprivileged user, the gate's header secrets stay out of reach of another process of
    that user (the agent's shell): /proc/<pid>/environ is refused, as it is not for a plain process."""
    code = f"import sys; sys.path.insert(0, {OPERATOR!r}); from harness_operator.runner.mcp_gate import main; main()"
    env = {"PATH": "/usr/bin:/bin", "DOCS_TOKEN": "gated-secret"}
    gate = subprocess.Popen(  # the system python: the user cannot reach this suite's interpreter
        ["/usr/bin/python3", "-c", code, "--tool=echo", "--", "sleep", "60"],
        stdin=subprocess.PIPE,
        env=env,
        user=NOBODY,
        cwd=tmp_path,
    )
    plain = subprocess.Popen(["sleep", "60"], env=env, user=NOBODY)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not _children_of(gate.pid):
            time.sleep(0.05)  # the gate has started its server: it made itself undumpable before
        assert _children_of(gate.pid), "the gate never started its server"
        read = [
            subprocess.run(["cat", f"/proc/{p.pid}/environ"], capture_output=True, user=NOBODY)
            for p in (gate, plain)
        ]
    finally:
        for p in (gate, plain):
            p.kill()
            p.wait()
    assert read[1].returncode == 0 and b"gated-secret" in read[1].stdout  # the check can see a leak
    assert read[0].returncode != 0 and b"gated-secret" not in read[0].stdout
    assert b"Permission denied" in read[0].stderr


def _children_of(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
