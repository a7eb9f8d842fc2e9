"""Parser for `pi --mode json` (pi coding agent JSONL events) (pure).

The `session` header carries the id; each assistant `message_end` carries text, usage and cost, which
are summed; the last one's `stopReason` is the outcome (`error` fails although pi exits 0).
"""

from __future__ import annotations

from typing import Any

from harness_operator.contract.events import Event, short_argument, text_event
from harness_operator.contract.usage import Tokens
from harness_operator.runner.parsers.base import (
    Failure,
    Parser,
    as_float,
    as_int,
    as_str,
    classify_error,
)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(c.get("text", "")) for c in content if isinstance(c, dict) and c.get("type") == "text"
        )
    return ""


class PiJsonlParser(Parser):
    format = "pi-jsonl"

    def __init__(self) -> None:
        super().__init__()
        self._turns = 0
        self._cost: float | None = None

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "session":
            self.state = self.state.with_(session_id=as_str(event.get("id")))
            self.emit(Event("session", session=self.state.session_id))
            return
        if kind == "turn_start":
            self.emit_turn(self._turns + 1)
            return
        if kind == "tool_execution_end" and event.get("isError"):
            name = as_str(event.get("toolName")) or "tool"
            result = event.get("result")
            if f"Tool {name} not found" in _text(result.get("content") if isinstance(result, dict) else None):
                self.deny_tool(name)  # not among --tools (its tool policy's allow list)
            return
        if kind != "message_end":
            return
        message = event.get("message")
        if not isinstance(message, dict) or message.get("role") != "assistant":
            return
        self._turns += 1
        self.emit_turn(self._turns)
        self._emit_content(message.get("content"))
        usage = message.get("usage") if isinstance(message.get("usage"), dict) else {}
        assert isinstance(usage, dict)
        step = Tokens(
            input=as_int(usage.get("input")),
            output=as_int(usage.get("output")),
            cache_read=as_int(usage.get("cacheRead")),
            cache_write=as_int(usage.get("cacheWrite")),
        )
        cost = usage.get("cost")
        total = as_float(cost.get("total")) if isinstance(cost, dict) else None
        if total is not None:
            self._cost = (self._cost or 0.0) + total
        stop = as_str(message.get("stopReason")) or ""
        failure: Failure | None = None
        detail: str | None = None
        if stop == "error":
            detail = as_str(message.get("errorMessage")) or "the model call failed"
            failure = classify_error(None, detail)
        elif stop == "aborted":
            failure, detail = Failure.provider_error, "the agent run was aborted"
        elif stop == "length":
            failure, detail = Failure.truncated, "the model stopped at its output token limit"
        self.state = self.state.with_(
            text=_text(message.get("content")),
            model=as_str(message.get("model")) or self.state.model,
            tokens=self.state.tokens.plus(step),
            cost_usd=self._cost,
            turns=self._turns,
            failure=failure,
            message=detail,
            finished=True,
        )

    def _emit_content(self, content: Any) -> None:
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "text":
                self.emit(text_event(str(block.get("text", ""))))
            elif isinstance(block, dict) and block.get("type") == "toolCall":
                name = as_str(block.get("name")) or "tool"
                self.emit(Event("tool", tool=name, arg=short_argument(block.get("arguments"))))
