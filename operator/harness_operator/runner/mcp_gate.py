"""An MCP server's gate: a stdio MCP server that passes the agent's messages to the real one (a command
it starts, or a remote endpoint over streamable HTTP) and lets through only the tools the run lists:
tools/list answers name only those, a tools/call of any other is answered with an error and never
reaches the server (I/O).

    python3 -I -m harness_operator.runner.mcp_gate --tool search [--tool ...] \\
        (--url URL [--header 'Name: value'] ... | -- COMMAND [ARG ...])

A header's `$(NAME)` is the gate's variable NAME, read when it starts: the secret is in no argument, and
the gate is not dumpable, so the agent (the same user) cannot read it from its environ or memory. An ACP
agent is given each run's server through its gate (ACP's server entries cannot name tools), and the
variables its headers name are the gate's alone.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import IO, Any

from harness_operator.contract.variables import HEADER_VARIABLE
from harness_operator.runner.stops import make_undumpable

REQUEST_SECONDS = 600.0  # one tool call may take long; the attempt's own timeout bounds the rest
Message = dict[str, Any]


class Gate:
    """The filter, between the agent (`say` writes to it) and the server (`send` writes to it)."""

    def __init__(self, tools: set[str], say: Callable[[Message], None], log: IO[str]) -> None:
        self.tools = tools
        self.say = say
        self.log = log
        self.listing: set[Any] = set()  # ids of the agent's tools/list requests in flight

    def from_agent(self, message: Message) -> Message | None:
        """What goes on to the server (None: answered here)."""
        method, ident = message.get("method"), message.get("id")
        if method == "tools/list" and ident is not None:
            self.listing.add(ident)
        if method == "tools/call":
            name = str((message.get("params") or {}).get("name", ""))
            if name not in self.tools:
                self.log.write(f"harness-mcp-gate: refused tools/call {name!r}: not a listed tool\n")
                self.log.flush()
                if ident is not None:
                    self.say(refusal(ident, name))
                return None
        return message

    def from_server(self, message: Message) -> Message:
        """The server's message as the agent gets it: a tools/list answer names only the listed tools."""
        ident = message.get("id")
        if "method" not in message and ident in self.listing:
            self.listing.discard(ident)
            result = message.get("result")
            if isinstance(result, dict) and isinstance(result.get("tools"), list):
                kept = [t for t in result["tools"] if isinstance(t, dict) and t.get("name") in self.tools]
                message = {**message, "result": {**result, "tools": kept}}
        return message


def refusal(ident: Any, name: str) -> Message:
    return {
        "jsonrpc": "2.0",
        "id": ident,
        "error": {"code": -32602, "message": f"Unknown tool: {name} (not one this run allows)"},
    }


def expand_header(line: str, env: dict[str, str]) -> tuple[str, str]:
    """'Name: value' with each $(NAME) replaced by the variable; ValueError names a missing one."""
    name, sep, value = line.partition(":")
    if not sep or not name.strip():
        raise ValueError(f"header {line!r} is not 'Name: value'")

    def variable(match: re.Match[str]) -> str:
        if match.group(1) not in env:
            raise ValueError(f"header {name.strip()}: variable {match.group(1)} is not set")
        return env[match.group(1)]

    return name.strip(), HEADER_VARIABLE.sub(variable, value.strip())


def read_messages(stream: IO[bytes]) -> Iterator[Message]:
    """Newline-delimited JSON-RPC messages (MCP's stdio transport); a line that is not one is skipped."""
    for line in stream:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict):
            yield message


class Writer:
    """One JSON message per line to a stream, from any thread."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.lock = threading.Lock()

    def __call__(self, message: Message) -> None:
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        with self.lock:
            self.stream.write(data)
            self.stream.flush()


def serve_command(gate: Gate, command: list[str], agent: IO[bytes]) -> int:
    """Start the local server and pass messages both ways until the agent's input ends and the server's
    last answer has been passed on."""
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert server.stdin is not None and server.stdout is not None
    to_server = Writer(server.stdin)
    out = server.stdout

    def pump() -> None:
        for message in read_messages(out):
            gate.say(gate.from_server(message))

    pumping = threading.Thread(target=pump, daemon=True)
    pumping.start()
    try:
        for message in read_messages(agent):
            if (passed := gate.from_agent(message)) is not None:
                to_server(passed)
    except BrokenPipeError:
        pass
    finally:
        server.stdin.close()
    try:
        code = server.wait(timeout=5)
    except subprocess.TimeoutExpired:
        server.kill()
        code = server.wait()
    pumping.join(timeout=5)  # the server's last answers, still in its pipe, reach the agent first
    return code


def serve_url(gate: Gate, url: str, headers: dict[str, str], agent: IO[bytes]) -> int:
    """Post each message to the remote server (streamable HTTP); its answers, JSON or an event stream,
    go back to the agent."""
    import httpx  # only a remote server needs it

    session: dict[str, str] = {}
    with httpx.Client(timeout=httpx.Timeout(REQUEST_SECONDS, connect=30.0)) as client:
        for message in read_messages(agent):
            passed = gate.from_agent(message)
            if passed is None:
                continue
            sent = {
                **headers,
                **session,
                "Accept": "application/json, text/event-stream",
                "Content-Type": "application/json",
            }
            try:
                with client.stream("POST", url, json=passed, headers=sent) as response:
                    if sid := response.headers.get("mcp-session-id"):
                        session["Mcp-Session-Id"] = sid
                    for answer in answers_of(response, passed):
                        gate.say(gate.from_server(answer))
            except httpx.HTTPError as exc:
                if passed.get("id") is not None and "method" in passed:
                    gate.say(server_error(passed["id"], f"the MCP server failed: {type(exc).__name__}"))
    return 0


def answers_of(response: Any, request: Message) -> Iterator[Message]:
    """The messages an HTTP answer carries: none (202), one or a batch of JSON, or an event stream's."""
    if response.status_code == 202:
        return
    if response.status_code >= 400:
        if request.get("id") is not None and "method" in request:
            yield server_error(request["id"], f"the MCP server answered HTTP {response.status_code}")
        return
    kind = response.headers.get("content-type", "")
    if kind.startswith("text/event-stream"):
        data: list[str] = []
        for line in response.iter_lines():
            if line.startswith("data:"):
                data.append(line[5:].lstrip())
            elif not line and data:
                yield from _parsed("\n".join(data))
                data = []
        if data:
            yield from _parsed("\n".join(data))
        return
    yield from _parsed(response.read().decode("utf-8", "replace"))


def _parsed(text: str) -> Iterator[Message]:
    try:
        value = json.loads(text)
    except ValueError:
        return
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, dict):
            yield item


def server_error(ident: Any, message: str) -> Message:
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": -32603, "message": message}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="harness-mcp-gate", description=__doc__)
    parser.add_argument("--tool", action="append", default=[], help="a tool the agent may call")
    parser.add_argument("--url", help="the remote server's endpoint (streamable HTTP)")
    parser.add_argument("--header", action="append", default=[], help="'Name: value', $(NAME) expanded")
    parser.add_argument("command", nargs="*", help="the local server's argv (after --)")
    args = parser.parse_args(argv)
    make_undumpable()  # its headers' secrets: the agent, the same user, cannot read its environ or memory
    if bool(args.url) == bool(args.command):
        parser.error("give exactly one of --url or a command after --")
    try:
        headers = dict(expand_header(h, dict(os.environ)) for h in args.header)
    except ValueError as exc:
        parser.error(str(exc))
    gate = Gate(set(args.tool), Writer(sys.stdout.buffer), sys.stderr)
    if args.url:
        return serve_url(gate, args.url, headers, sys.stdin.buffer)
    return serve_command(gate, args.command, sys.stdin.buffer)


if __name__ == "__main__":
    sys.exit(main())
