"""Stub of the OpenAI HTTP API: the Responses API (Codex) and Chat Completions (Qwen Code,
OpenCode, Pi, Aider and other OpenAI-compatible clients).

    from tests.stubs.openai import OpenAIStub
    with OpenAIStub(mode="ok") as stub:
        env = {"OPENAI_BASE_URL": stub.base_url + "/v1", "OPENAI_API_KEY": "sk-test-stub"}

    python -m tests.stubs.openai --mode ok

Paths are matched by their ending, so a client may put any prefix (``/v1``, ``/api/v1``) in its
base URL: ``.../responses``, ``.../chat/completions``, ``.../models``.

Modes:
  ok            a fixed text answer (TEXT) with fixed usage (USAGE)
  tool_use      the first call that offers tools answers a call of one of them (arguments for a
                harmless shell/read call); later calls answer TEXT
  shell         the first call (Chat Completions: the first that offers tools) answers a call of the
                shell tool ``shell_tool`` (Codex's ``exec_command`` by default; Qwen Code's
                ``run_shell_command``, Copilot's ``bash``) running ``command`` (constructor keywords),
                whether the tool is offered or not (a model that ignores its tool list: a tool policy
                must still refuse it); later calls answer TEXT
  call          the same with ``call`` (a constructor keyword: the tool's name and arguments), e.g. an
                MCP server's tool
  unauthorized  401 ``invalid_api_key``
  hang          model calls are accepted and never answered
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

from ._base import RecordedRequest, Response, StubServer, serve_main

TEXT = "Hello from the OpenAI stub."
MODEL_FALLBACK = "gpt-stub"
# Fixed numbers, in the Anthropic stub's spirit: 1234 prompt tokens of which 100 cached, 56 out.
USAGE = {"input_tokens": 1234, "cached_tokens": 100, "output_tokens": 56, "reasoning_tokens": 0}


def responses_usage() -> dict[str, Any]:
    return {
        "input_tokens": USAGE["input_tokens"],
        "input_tokens_details": {"cached_tokens": USAGE["cached_tokens"]},
        "output_tokens": USAGE["output_tokens"],
        "output_tokens_details": {"reasoning_tokens": USAGE["reasoning_tokens"]},
        "total_tokens": USAGE["input_tokens"] + USAGE["output_tokens"],
    }


def chat_usage(answers: int = 1) -> dict[str, Any]:
    """Chat Completions' usage of `answers` choices (`n`): the prompt billed once, each answer's output."""
    return {
        "prompt_tokens": USAGE["input_tokens"],
        "completion_tokens": USAGE["output_tokens"] * answers,
        "total_tokens": USAGE["input_tokens"] + USAGE["output_tokens"] * answers,
        "prompt_tokens_details": {"cached_tokens": USAGE["cached_tokens"]},
        "completion_tokens_details": {"reasoning_tokens": USAGE["reasoning_tokens"]},
    }


def _tool_names(body: dict[str, Any]) -> list[str]:
    names = []
    for t in body.get("tools") or []:
        if not isinstance(t, dict):
            continue
        if isinstance(t.get("function"), dict):
            names.append(t["function"].get("name"))
        else:
            names.append(t.get("name"))
    return [n for n in names if n]


def _harmless_args(name: str) -> dict[str, Any]:
    low = name.lower()
    if "shell" in low or low in ("bash", "exec_command", "run_shell_command"):
        return {"command": ["echo", "harness-stub"] if low == "shell" else "echo harness-stub"}
    missing = "/nonexistent-harness-stub/file.txt"
    return {"path": missing, "file_path": missing, "absolute_path": missing, "pattern": "*.no-such-ext"}


class OpenAIStub(StubServer):
    name = "openai"
    modes = ("ok", "tool_use", "shell", "call", "unauthorized", "hang")
    text = TEXT

    def __init__(
        self,
        *args: Any,
        command: str = "",
        shell_tool: str = "exec_command",
        call: tuple[str, dict[str, Any]] | None = None,
        namespace: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.command, self.shell_tool = command, shell_tool  # what the shell mode runs, with which tool
        self.call = call  # the call mode's tool and arguments
        self.namespace = namespace  # the Responses API namespace of its tool (Codex: mcp__<server>)
        self._tool_use_sent = False

    def is_model_call(self, req: RecordedRequest) -> bool:
        p = req.path.rstrip("/")
        return req.method == "POST" and (
            p.endswith("/responses") or p.endswith("/chat/completions") or p.endswith("/completions")
        )

    def is_known(self, req: RecordedRequest) -> bool:
        return self.is_model_call(req) or req.path.rstrip("/").endswith("/models")

    def handle(self, req: RecordedRequest) -> Response:
        p = req.path.rstrip("/")
        if self.is_model_call(req):
            if self.mode == "unauthorized":
                return Response(
                    401,
                    {
                        "error": {
                            "message": "Incorrect API key provided: sk-test-***. (stub)",
                            "type": "invalid_request_error",
                            "param": None,
                            "code": "invalid_api_key",
                        }
                    },
                )
            body = req.body if isinstance(req.body, dict) else {}
            if p.endswith("/responses"):
                return self._responses(body)
            return self._chat(body)
        if req.method == "GET" and p.endswith("/responses"):
            # Codex tries a Responses WebSocket first; refusing the upgrade makes it fall back to
            # HTTPS streaming (it still retries the socket a few times first).
            return Response(
                404,
                {
                    "error": {
                        "message": "websocket transport not supported by the stub",
                        "type": "invalid_request_error",
                        "code": None,
                        "param": None,
                    }
                },
            )
        if p.endswith("/models"):
            return Response(
                200,
                {
                    "object": "list",
                    "data": [{"id": MODEL_FALLBACK, "object": "model", "created": 0, "owned_by": "stub"}],
                },
            )
        return Response(200, {})

    def _want_tool(self, body: dict[str, Any]) -> str | None:
        if self.mode != "tool_use" or self._tool_use_sent:
            return None
        names = _tool_names(body)
        if not names:
            return None
        # Read-only tools first (their call fails harmlessly on a missing file), then a shell
        # (the arguments only echo), else whatever is offered first.
        for keys in (("read_file", "read", "glob", "list_directory", "ls"), ("shell", "bash", "exec")):
            pref = [n for n in names if any(k in n.lower() for k in keys)]
            if pref:
                break
        with self._lock:
            self._tool_use_sent = True
        return (pref or names)[0]

    # -- Responses API ---------------------------------------------------------------------
    def _responses(self, body: dict[str, Any]) -> Response:
        model = body.get("model") or MODEL_FALLBACK
        rid = "resp_stub_" + uuid.uuid4().hex[:16]
        tool = self._want_tool(body)
        arguments = _harmless_args(tool) if tool else {}
        if self.mode in ("shell", "call"):
            tool, arguments = self._forced_shell()
        if tool:
            item = {
                "type": "function_call",
                "id": "fc_stub_" + uuid.uuid4().hex[:12],
                "call_id": "call_stub_" + uuid.uuid4().hex[:12],
                "name": tool,
                "arguments": json.dumps(arguments),
                "status": "completed",
            }
            if self.mode == "call" and self.namespace:
                item["namespace"] = self.namespace
        else:
            item = {
                "type": "message",
                "id": "msg_stub_" + uuid.uuid4().hex[:12],
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": self.text, "annotations": []}],
            }
        full = {
            "id": rid,
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": model,
            "output": [item],
            "usage": responses_usage(),
        }
        if not body.get("stream"):
            return Response(200, full)
        return Response(200, sse=self._responses_sse(full, item))

    def _responses_sse(self, full: dict[str, Any], item: dict[str, Any]) -> Iterator[tuple[str, Any]]:
        created = dict(full, status="in_progress", output=[], usage=None)
        seq = iter(range(10_000))
        yield (
            "response.created",
            {"type": "response.created", "sequence_number": next(seq), "response": created},
        )
        yield (
            "response.in_progress",
            {"type": "response.in_progress", "sequence_number": next(seq), "response": created},
        )
        added = dict(item, status="in_progress")
        if item["type"] == "message":
            added["content"] = []
        yield (
            "response.output_item.added",
            {
                "type": "response.output_item.added",
                "sequence_number": next(seq),
                "output_index": 0,
                "item": added,
            },
        )
        if item["type"] == "message":
            part = {"type": "output_text", "text": "", "annotations": []}
            yield (
                "response.content_part.added",
                {
                    "type": "response.content_part.added",
                    "sequence_number": next(seq),
                    "item_id": item["id"],
                    "output_index": 0,
                    "content_index": 0,
                    "part": part,
                },
            )
            yield (
                "response.output_text.delta",
                {
                    "type": "response.output_text.delta",
                    "sequence_number": next(seq),
                    "item_id": item["id"],
                    "output_index": 0,
                    "content_index": 0,
                    "delta": self.text,
                },
            )
            yield (
                "response.output_text.done",
                {
                    "type": "response.output_text.done",
                    "sequence_number": next(seq),
                    "item_id": item["id"],
                    "output_index": 0,
                    "content_index": 0,
                    "text": self.text,
                },
            )
            yield (
                "response.content_part.done",
                {
                    "type": "response.content_part.done",
                    "sequence_number": next(seq),
                    "item_id": item["id"],
                    "output_index": 0,
                    "content_index": 0,
                    "part": dict(part, text=self.text),
                },
            )
        else:
            yield (
                "response.function_call_arguments.delta",
                {
                    "type": "response.function_call_arguments.delta",
                    "sequence_number": next(seq),
                    "item_id": item["id"],
                    "output_index": 0,
                    "delta": item["arguments"],
                },
            )
            yield (
                "response.function_call_arguments.done",
                {
                    "type": "response.function_call_arguments.done",
                    "sequence_number": next(seq),
                    "item_id": item["id"],
                    "output_index": 0,
                    "arguments": item["arguments"],
                },
            )
        yield (
            "response.output_item.done",
            {
                "type": "response.output_item.done",
                "sequence_number": next(seq),
                "output_index": 0,
                "item": item,
            },
        )
        yield (
            "response.completed",
            {"type": "response.completed", "sequence_number": next(seq), "response": full},
        )

    # -- Chat Completions ------------------------------------------------------------------
    def _forced_shell(self) -> tuple[str | None, dict[str, Any]]:
        """The shell (or call) mode's one call: the shell tool with the command (Codex names it `cmd`), or
        the call mode's tool."""
        with self._lock:
            first, self._tool_use_sent = not self._tool_use_sent, True
        if not first:
            return None, {}
        if self.mode == "call" and self.call is not None:
            return self.call
        if self.shell_tool == "exec_command":
            return self.shell_tool, {"cmd": self.command}
        return self.shell_tool, {"command": self.command, "description": "harness stub edit"}

    def _chat(self, body: dict[str, Any]) -> Response:
        model = body.get("model") or MODEL_FALLBACK
        cid = "chatcmpl-stub" + uuid.uuid4().hex[:12]
        created = int(time.time())
        tool = self._want_tool(body)
        arguments = _harmless_args(tool) if tool else {}
        if self.mode in ("shell", "call") and body.get("tools"):
            tool, arguments = self._forced_shell()
        if tool:
            call = {
                "id": "call_stub_" + uuid.uuid4().hex[:12],
                "type": "function",
                "function": {"name": tool, "arguments": json.dumps(arguments)},
            }
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": self.text}
            finish = "stop"
        # As the API does, `n` answers, each billed.
        answers = body["n"] if isinstance(body.get("n"), int) and body["n"] > 1 else 1
        if not body.get("stream"):
            return Response(
                200,
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [
                        {"index": i, "message": message, "finish_reason": finish, "logprobs": None}
                        for i in range(answers)
                    ],
                    "usage": chat_usage(answers),
                },
            )

        def chunks() -> Iterator[tuple[None, Any]]:
            base = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model}
            yield (
                None,
                dict(
                    base,
                    choices=[
                        {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                    ],
                ),
            )
            if tool:
                tc = dict(message["tool_calls"][0], index=0)
                yield (
                    None,
                    dict(base, choices=[{"index": 0, "delta": {"tool_calls": [tc]}, "finish_reason": None}]),
                )
            else:
                yield (
                    None,
                    dict(
                        base, choices=[{"index": 0, "delta": {"content": self.text}, "finish_reason": None}]
                    ),
                )
            yield None, dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": finish}])
            # usage chunk, as with stream_options.include_usage (sent whether asked or not)
            yield None, dict(base, choices=[], usage=chat_usage(answers))
            yield None, "[DONE]"

        return Response(200, sse=chunks())


def main(argv: list[str] | None = None) -> int:
    return serve_main(OpenAIStub, argv)


if __name__ == "__main__":
    raise SystemExit(main())
