"""Parser for `codex exec --json` (codex 0.17x JSONL events) (pure).

Tokens in `turn.completed.usage` are cumulative for the thread: a resumed thread starts from the
previous total, which is subtracted (`baseline`). `input_tokens` includes the cached ones; the Report
splits them into input (uncached) and cache read, as the Anthropic CLIs do. No cost is reported.
"""

from __future__ import annotations

from typing import Any

from harness_operator.runner.parsers.base import (
    Parser,
    Report,
    Tokens,
    as_int,
    as_str,
    classify_error,
)


class CodexJsonlParser(Parser):
    format = "codex-jsonl"

    def __init__(self, baseline: Tokens | None = None) -> None:
        super().__init__()
        self._baseline = baseline or Tokens()
        self._turns = 0
        self._errors: list[str] = []
        self.warnings: list[str] = []

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "thread.started":
            self.state = self.state.with_(session_id=as_str(event.get("thread_id")))
        elif kind == "item.completed":
            item = event.get("item")
            if not isinstance(item, dict):
                return
            if item.get("type") == "agent_message" and isinstance(item.get("text"), str):
                self.state = self.state.with_(text=item["text"])
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

    def finish(self, stdout: str) -> Report:
        if self.state.failure is None and not self.state.finished and self._errors:
            message = self._errors[-1]
            return self.state.with_(failure=classify_error(None, message), message=message)
        return self.state
