"""Stub of the Anthropic Messages API, for running the real Claude Code CLI offline.

    from tests.stubs.anthropic import AnthropicStub
    with AnthropicStub(mode="ok") as stub:
        env = {"ANTHROPIC_BASE_URL": stub.base_url, "ANTHROPIC_API_KEY": "sk-test-stub"}
        ...
        stub.model_calls()      # the POST /v1/messages requests it saw

    python -m tests.stubs.anthropic --mode ok        # prints the base URL, logs requests
    python -m tests.stubs.anthropic --mode bash --command 'printf "hi\\n" > edited.txt'

Modes:
  ok            every /v1/messages call answers TEXT with USAGE (streaming SSE or plain JSON)
  tool_use      the first call that offers tools answers a tool_use block (a harmless Glob /
                Read / LS call, whichever is offered); later calls answer TEXT. With
                ``--max-turns 1`` this drives Claude Code to ``error_max_turns``.
  tool_turns    the first TOOL_TURNS calls that offer tools each answer a tool_use block (the safe
                tools in turn), later calls answer TEXT: a run of several turns to watch
  bash          the first call that offers the Bash tool answers a tool_use block running
                ``command`` (a constructor keyword, ``--command`` on the command line) with Bash;
                every later call answers TEXT: an agent that edits its workspace. With
                ``force_bash=True`` (``--force-bash``) the first call that offers any tool asks for
                Bash even when Bash is not offered: a model that ignores its tool list (a tool policy
                must still refuse it)
  call          the first call that offers tools answers a tool_use block of ``call`` (a constructor
                keyword: the tool's name and input), offered or not (an MCP server's tool); later
                calls answer TEXT
  unauthorized  every /v1/messages call answers 401 authentication_error
  overloaded    every /v1/messages call answers 529 overloaded_error (a provider down: fallback)
  hang          /v1/messages calls are accepted and never answered (until the stub stops)

In any mode, ``answers=[...]`` answers the agent's turns (calls that offer tools) with those texts in
turn, the last one again once they run out, instead of TEXT; and while Claude Code's ``--json-schema``
tool (StructuredOutput) is offered and not accepted yet, an answer that is a JSON object comes as that
tool's input (a model that obeys the schema option), any other as text.

In any mode, ``overloaded_calls=N`` (``--overloaded-calls N``) answers the first N /v1/messages calls
with 529 overloaded_error and the mode's answer after that: a provider that is down for a while (retry).

Anything else (``/v1/messages/count_tokens``, ``/v1/models``, unknown paths) is logged and answered
sensibly: count_tokens with a fixed count, models with a one-entry list, other paths with an empty
JSON object.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

from ._base import RecordedRequest, Response, StubServer, serve_main

TEXT = "Hello from the Anthropic stub."
MODEL_FALLBACK = "claude-sonnet-4-5-20250929"
USAGE = {
    "input_tokens": 1234,
    "output_tokens": 56,
    "cache_read_input_tokens": 100,
    "cache_creation_input_tokens": 10,
}
TOOL_TURNS = 3
# The tool Claude Code's `--json-schema` offers and asks the model to call with its answer.
STRUCTURED_TOOL = "StructuredOutput"
# Tools the tool_use mode may call, in order of preference, with inputs that touch nothing.
_SAFE_TOOLS = (
    ("Glob", {"pattern": "**/*.no-such-extension-harness-stub"}),
    ("LS", {"path": "/nonexistent-harness-stub"}),
    ("Read", {"file_path": "/nonexistent-harness-stub/file.txt"}),
)


class AnthropicStub(StubServer):
    name = "anthropic"
    modes = ("ok", "tool_use", "tool_turns", "bash", "call", "unauthorized", "overloaded", "hang")
    text = TEXT
    usage = USAGE

    def __init__(
        self,
        *args: Any,
        command: str = "",
        force_bash: bool = False,
        call: tuple[str, dict[str, Any]] | None = None,
        overloaded_calls: int = 0,
        answers: list[str] | None = None,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.command = command  # what the bash mode runs
        self.force_bash = force_bash  # the bash mode asks for Bash whether or not it is offered
        self.call = call  # the call mode's tool and input
        self.answers = list(answers or [])
        self._overloaded_left = overloaded_calls
        self._tool_use_sent = False
        self._tool_turns_sent = 0

    def rearm(self) -> None:
        """The next call that offers tools counts as the first again: the bash and call modes answer it with
        their tool once more (a second run of the same stub that edits too)."""
        with self._lock:
            self._tool_use_sent = False

    def is_model_call(self, req: RecordedRequest) -> bool:
        return req.method == "POST" and req.path.rstrip("/") == "/v1/messages"

    def is_known(self, req: RecordedRequest) -> bool:
        return self.is_model_call(req) or req.path.rstrip("/") in ("/v1/messages/count_tokens", "/v1/models")

    # -------------------------------------------------------------------------------------
    def handle(self, req: RecordedRequest) -> Response:
        path = req.path.rstrip("/")
        if self.is_model_call(req):
            return self._messages(req)
        if path == "/v1/messages/count_tokens":
            return Response(200, {"input_tokens": USAGE["input_tokens"]})
        if path == "/v1/models" and req.method == "GET":
            return Response(
                200,
                {
                    "data": [
                        {
                            "type": "model",
                            "id": MODEL_FALLBACK,
                            "display_name": "Stub Sonnet",
                            "created_at": "2025-01-01T00:00:00Z",
                        }
                    ],
                    "has_more": False,
                    "first_id": MODEL_FALLBACK,
                    "last_id": MODEL_FALLBACK,
                },
            )
        if req.method == "HEAD":
            return Response(200, None)
        return Response(200, {})

    def _messages(self, req: RecordedRequest) -> Response:
        with self._lock:  # the server answers each request on a thread of its own
            overloaded, self._overloaded_left = self._overloaded_left > 0, max(0, self._overloaded_left - 1)
        if self.mode == "overloaded" or overloaded:
            return Response(
                529,
                {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
                headers={"request-id": "req_stub_529"},
            )
        if self.mode == "unauthorized":
            return Response(
                401,
                {
                    "type": "error",
                    "error": {"type": "authentication_error", "message": "invalid x-api-key"},
                },
                headers={"request-id": "req_stub_401"},
            )
        body = req.body if isinstance(req.body, dict) else {}
        model = body.get("model") or MODEL_FALLBACK
        content = self._content_for(body)
        stop_reason = "tool_use" if content[0]["type"] == "tool_use" else "end_turn"
        msg_id = "msg_stub_" + uuid.uuid4().hex[:16]
        # As the API does, never more output than the request's max_tokens.
        cap = body.get("max_tokens")
        usage = {
            **USAGE,
            "output_tokens": min(USAGE["output_tokens"], cap if isinstance(cap, int) else 10**9),
        }
        if body.get("stream"):
            return Response(
                200,
                sse=self._sse(msg_id, model, content, stop_reason, usage),
                headers={"request-id": "req_stub"},
            )
        return Response(
            200,
            {
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": stop_reason,
                "stop_sequence": None,
                "usage": usage,
            },
            headers={"request-id": "req_stub"},
        )

    def _content_for(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        offered_tools = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
        structured = self._structured_answer(body, offered_tools)
        if structured is not None:
            return structured
        if self.mode == "bash" and ("Bash" in offered_tools or (self.force_bash and offered_tools)):
            with self._lock:
                first, self._tool_use_sent = not self._tool_use_sent, True
            if first:
                tool_input = {"command": self.command, "description": "harness stub edit"}
                tool_id = "toolu_stub_" + uuid.uuid4().hex[:12]
                return [{"type": "tool_use", "id": tool_id, "name": "Bash", "input": tool_input}]
        if self.mode == "call" and self.call is not None and offered_tools:
            with self._lock:
                first, self._tool_use_sent = not self._tool_use_sent, True
            if first:
                name, tool_input = self.call
                return [
                    {
                        "type": "tool_use",
                        "id": "toolu_stub_" + uuid.uuid4().hex[:12],
                        "name": name,
                        "input": tool_input,
                    }
                ]
        if self.mode == "tool_turns" and offered_tools:
            safe = [(n, i) for n, i in _SAFE_TOOLS if n in offered_tools]
            with self._lock:
                turn = self._tool_turns_sent
                self._tool_turns_sent += 1 if safe and turn < TOOL_TURNS else 0
            if safe and turn < TOOL_TURNS:
                name, tool_input = safe[turn % len(safe)]
                tool_id = "toolu_stub_" + uuid.uuid4().hex[:12]
                return [{"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}]
        if self.mode == "tool_use" and not self._tool_use_sent:
            offered = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
            for name, tool_input in _SAFE_TOOLS:
                if name in offered:
                    with self._lock:
                        self._tool_use_sent = True
                    return [
                        {
                            "type": "tool_use",
                            "id": "toolu_stub_" + uuid.uuid4().hex[:12],
                            "name": name,
                            "input": tool_input,
                        }
                    ]
        return [{"type": "text", "text": self._next_text(offered_tools)}]

    def _structured_answer(self, body: dict[str, Any], offered: set[Any]) -> list[dict[str, Any]] | None:
        """In any mode, a model that obeys Claude Code's `--json-schema`: while the StructuredOutput tool
        is offered and not yet accepted (none of it answered, or the CLI refused the last call), the next
        answer comes as that tool's input when it is a JSON object, else as text."""
        if STRUCTURED_TOOL not in offered:
            return None
        last = (body.get("messages") or [{}])[-1]
        content = last.get("content") if isinstance(last, dict) else None
        results = (
            [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
            if isinstance(content, list)
            else []
        )
        if results and not any(b.get("is_error") for b in results):
            return None
        text = self._next_text(offered)
        try:
            value = json.loads(text)
        except ValueError:
            return [{"type": "text", "text": text}]
        if not isinstance(value, dict):
            return [{"type": "text", "text": text}]
        tool_id = "toolu_stub_" + uuid.uuid4().hex[:12]
        return [{"type": "tool_use", "id": tool_id, "name": STRUCTURED_TOOL, "input": value}]

    def _next_text(self, offered: set[Any]) -> str:
        """The answer of a call: the next of ANSWERS for a call that offers tools (an agent's turn, not a
        CLI's side call such as a title), the last one again once they run out; TEXT without them."""
        with self._lock:
            if not self.answers or not offered:
                return self.text
            return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def _sse(
        self, msg_id: str, model: str, content: list[dict[str, Any]], stop_reason: str, usage: dict[str, int]
    ) -> Iterator[tuple[str, Any]]:
        start_usage = dict(usage)
        start_usage["output_tokens"] = 1
        yield (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": start_usage,
                },
            },
        )
        for i, block in enumerate(content):
            if block["type"] == "text":
                yield (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": i,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
                yield "ping", {"type": "ping"}
                yield (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "text_delta", "text": block["text"]},
                    },
                )
            else:
                yield (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": i,
                        "content_block": {
                            "type": "tool_use",
                            "id": block["id"],
                            "name": block["name"],
                            "input": {},
                        },
                    },
                )
                yield (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])},
                    },
                )
            yield "content_block_stop", {"type": "content_block_stop", "index": i}
        yield (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": dict(usage),
            },
        )
        yield "message_stop", {"type": "message_stop"}


def main(argv: list[str] | None = None) -> int:
    import argparse

    # ``--command`` and ``--force-bash`` (the bash mode's) and ``--overloaded-calls`` are this stub's own;
    # serve_main parses the rest.
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--command", default="")
    pre.add_argument("--force-bash", action="store_true")
    pre.add_argument("--overloaded-calls", type=int, default=0)
    args, rest = pre.parse_known_args(argv)

    class _Stub(AnthropicStub):
        def __init__(self, *a: Any, **kw: Any):
            super().__init__(
                *a,
                command=args.command,
                force_bash=args.force_bash,
                overloaded_calls=args.overloaded_calls,
                **kw,
            )

    return serve_main(_Stub, rest)


if __name__ == "__main__":
    raise SystemExit(main())
