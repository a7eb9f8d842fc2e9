"""Parser for `copilot --output-format json` (GitHub Copilot CLI JSONL events) (pure).

Text from assistant messages (the last one is the answer); `result` carries `sessionId` and the CLI's
`exitCode`; `model.call_start` and assistant messages name the model used. Tokens are only written to
`--usage-output-file`, so usage stays unknown here.
"""

from __future__ import annotations

from typing import Any

from harness_operator.contract.events import Event, short_argument, text_event
from harness_operator.runner.parsers.base import (
    Failure,
    Parser,
    as_int,
    as_str,
    classify_error,
)


class CopilotJsonParser(Parser):
    format = "copilot-json"

    def __init__(self) -> None:
        super().__init__()
        self._turns = 0
        self._tool_names: dict[str, str] = {}  # toolCallId -> tool name, to name a refused call

    def on_event(self, event: dict[str, Any]) -> None:
        kind = str(event.get("type") or "")
        data = event.get("data") if isinstance(event.get("data"), dict) else event
        assert isinstance(data, dict)
        if kind in ("model.call_start", "assistant.message") and (model := as_str(data.get("model"))):
            self.state = self.state.with_(model=model)
        if kind == "assistant.turn_start":
            self.emit_turn(self._turns + 1)
        elif kind == "tool.execution_start":
            name = as_str(data.get("toolName")) or "tool"
            self._tool_names[str(data.get("toolCallId"))] = name
            self.emit(Event("tool", tool=name, arg=short_argument(data.get("arguments"))))
        elif kind == "tool.execution_complete" and data.get("success") is False:
            error = data.get("error")
            if (
                isinstance(error, dict) and error.get("code") == "denied"
            ):  # refused by its permissions (--deny-tool, no approval)
                self.deny_tool(self._tool_names.get(str(data.get("toolCallId")), "unknown tool"))
        elif kind == "assistant.message":
            content = data.get("content")
            if isinstance(content, str) and content:
                self._turns += 1
                self.state = self.state.with_(text=content, turns=self._turns)
                self.emit_turn(self._turns)
                self.emit(text_event(content))
        elif kind == "session.error" or kind == "error":
            message = str(data.get("message") or "the CLI reported an error")
            self.state = self.state.with_(
                failure=classify_error(as_int(data.get("statusCode")), message), message=message
            )
        elif kind == "result":
            code = as_int(data.get("exitCode"))
            changes: dict[str, Any] = {"session_id": as_str(data.get("sessionId")), "finished": True}
            if code not in (None, 0) and self.state.failure is None:
                changes.update(failure=Failure.provider_error, message=f"the CLI reported exitCode {code}")
            self.state = self.state.with_(**changes)
