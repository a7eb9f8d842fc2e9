"""Parser for `gemini -o stream-json` (gemini-cli 0.6x JSONL events) (pure).

`init` carries the session and model; assistant `message` events (deltas) make the text; `result`
carries `status` and `stats` (flat totals, and per model under `models` when present). No cost.
"""

from __future__ import annotations

from typing import Any

from harness_operator.contract.events import Event, short_argument, text_event
from harness_operator.contract.usage import Tokens
from harness_operator.runner.parsers.base import (
    Parser,
    as_int,
    as_str,
    classify_error,
)


def _stats_tokens(stats: dict[str, Any]) -> Tokens:
    cached = as_int(stats.get("cached"))
    total_input = as_int(stats.get("input_tokens"))
    uncached = as_int(stats.get("input"))
    if uncached is None and total_input is not None:
        uncached = total_input - (cached or 0)
    return Tokens(input=uncached, output=as_int(stats.get("output_tokens")), cache_read=cached)


# A call its policy refused: a denied tool is not registered (not offered), or a rule denied the call.
_REFUSED = ("tool_not_registered", "policy_violation")


class GeminiJsonParser(Parser):
    format = "gemini-json"

    def __init__(self) -> None:
        super().__init__()
        self._parts: list[str] = []
        self._pending: list[str] = []  # text not yet shown as an event
        self._turn_open = False
        self._turns = 0
        self._tool_names: dict[str, str] = {}  # tool_id -> the tool's name

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "init":
            self.state = self.state.with_(
                session_id=as_str(event.get("session_id")), model=as_str(event.get("model"))
            )
            self.emit(Event("session", session=self.state.session_id, model=self.state.model))
        elif kind == "message":
            if event.get("role") == "assistant" and isinstance(event.get("content"), str):
                if not self._turn_open:
                    self._turns += 1
                    self._turn_open = True
                    self.emit_turn(self._turns)
                if not event.get("delta"):
                    self._parts = []
                self._parts.append(event["content"])
                self._pending.append(event["content"])
                self.state = self.state.with_(text="".join(self._parts), turns=self._turns)
            elif event.get("role") == "user":
                self._close_text()
                self._turn_open = False
        elif kind in ("tool_use", "tool_result"):
            self._close_text()
            self._turn_open = False
            self._parts = []
            if kind == "tool_use":
                name = as_str(event.get("tool_name")) or "tool"
                self._tool_names[str(event.get("tool_id"))] = name
                self.emit(Event("tool", tool=name, arg=short_argument(event.get("parameters"))))
            elif isinstance(event.get("error"), dict) and event["error"].get("type") in _REFUSED:
                self.deny_tool(self._tool_names.get(str(event.get("tool_id")), "unknown tool"))
        elif kind == "result":
            self._close_text()
            self._on_result(event)

    def _close_text(self) -> None:
        """The assistant text streams as deltas: one `text` event when the text is complete."""
        if self._pending:
            self.emit(text_event("".join(self._pending)))
            self._pending = []

    def _on_result(self, event: dict[str, Any]) -> None:
        stats = event.get("stats") if isinstance(event.get("stats"), dict) else {}
        assert isinstance(stats, dict)
        by_model: dict[str, Tokens] = {}
        models = stats.get("models")
        if isinstance(models, dict):
            by_model = {n: _stats_tokens(m) for n, m in models.items() if isinstance(m, dict)}
        tokens = _stats_tokens(stats)
        if not tokens.known and by_model:
            tokens = Tokens()
            for item in by_model.values():
                tokens = tokens.plus(item)
        failure = message = None
        if event.get("status") == "error":
            error = event.get("error") if isinstance(event.get("error"), dict) else {}
            assert isinstance(error, dict)
            message = str(error.get("message") or "the CLI reported an error")
            failure = classify_error(as_int(error.get("code")), message)
        model = next(iter(by_model)) if len(by_model) == 1 else self.state.model
        self.state = self.state.with_(
            tokens=tokens,
            by_model=by_model,
            model=model,
            failure=failure,
            message=message,
            finished=True,
            text=self.state.text if self.state.text is not None else "",
        )
