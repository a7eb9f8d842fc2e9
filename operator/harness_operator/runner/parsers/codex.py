"""Parser for `codex exec --json` (codex 0.17x JSONL events) (pure).

Tokens in `turn.completed.usage` are cumulative for the thread: a resumed thread starts from the
previous total, which is subtracted (`baseline`). `input_tokens` includes the cached ones; the Report
splits them into input (uncached) and cache read, as the Anthropic CLIs do. No cost is reported.
"""

from __future__ import annotations

from typing import Any

from harness_operator.contract.events import Event, short_argument, text_event
from harness_operator.contract.usage import Tokens
from harness_operator.runner.parsers.base import (
    Parser,
    Report,
    as_int,
    as_str,
    classify_error,
)

_TOOL_ITEMS = {
    "command_execution": "shell",
    "file_change": "edit",
    "mcp_tool_call": "mcp",
    "web_search": "web_search",
}


class CodexJsonlParser(Parser):
    format = "codex-jsonl"

    def __init__(self, baseline: Tokens | None = None) -> None:
        super().__init__()
        self._baseline = baseline or Tokens()
        self._turns = 0
        self._errors: list[str] = []
        self.warnings: list[str] = []
        self._started_turns = 0
        self._tool_items: set[str] = set()

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "thread.started":
            self.state = self.state.with_(session_id=as_str(event.get("thread_id")))
            self.emit(Event("session", session=self.state.session_id))
        elif kind == "turn.started":
            self._started_turns += 1
            self.emit_turn(self._started_turns)
        elif kind == "item.started":
            self._emit_tool(event.get("item"))
        elif kind == "item.completed":
            item = event.get("item")
            if not isinstance(item, dict):
                return
            self._emit_tool(item)
            if item.get("type") == "agent_message" and isinstance(item.get("text"), str):
                self.state = self.state.with_(text=item["text"])
                self.emit(text_event(item["text"]))
            elif item.get("type") == "error":
                self.warnings.append(str(item.get("message", "")))
        elif kind == "turn.completed":
            self._turns += 1
            usage = event.get("usage") if isinstance(event.get("usage"), dict) else {}
            assert isinstance(usage, dict)
            total_input = as_int(usage.get("input_tokens"))
            cached = as_int(usage.get("cached_input_tokens"))
            cumulative = Tokens(
                input=None if total_input is None else total_input - (cached or 0),
                output=as_int(usage.get("output_tokens")),
                cache_read=cached,
            )
            self.state = self.state.with_(
                tokens=cumulative.minus(self._baseline), turns=self._turns, finished=True
            )
        elif kind == "turn.failed":
            error = event.get("error") if isinstance(event.get("error"), dict) else {}
            assert isinstance(error, dict)
            message = str(error.get("message") or "the turn failed")
            self.state = self.state.with_(
                failure=classify_error(None, message), message=message, finished=True
            )
        elif kind == "error":
            self._errors.append(str(event.get("message") or "error"))

    def _emit_tool(self, item: Any) -> None:
        """One `tool` event per command, file change, MCP call or web search (started or completed)."""
        if not isinstance(item, dict) or item.get("type") not in _TOOL_ITEMS:
            return
        item_id = str(item.get("id") or len(self._tool_items))
        if item_id in self._tool_items:
            return
        self._tool_items.add(item_id)
        kind = str(item["type"])
        name = as_str(item.get("tool")) or _TOOL_ITEMS[kind]
        changes = item.get("changes")
        arg = (
            short_argument({"path": " ".join(str(c.get("path")) for c in changes if isinstance(c, dict))})
            if isinstance(changes, list)
            else short_argument(item)
        )
        self.emit(Event("tool", tool=name, arg=arg))

    def finish(self, stdout: str) -> Report:
        if self.state.failure is None and not self.state.finished and self._errors:
            message = self._errors[-1]
            return self.state.with_(failure=classify_error(None, message), message=message)
        return self.state
