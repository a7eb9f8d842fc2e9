"""Parser for `opencode run --format json` (JSONL events) (pure).

`text` parts make the text (the last step's text is the answer); `step_finish` parts carry tokens and
cost per step, which are summed; `error` events are failures.
"""

from __future__ import annotations

from typing import Any

from harness_operator.contract.events import Event, short_argument, text_event
from harness_operator.contract.usage import Tokens
from harness_operator.runner.parsers.base import (
    Parser,
    as_float,
    as_int,
    as_str,
    classify_error,
)


def _refused_tool(name: str, state: dict[str, Any]) -> str | None:
    """The tool its permission rules refused, as a call's state shows it: a tool not offered comes back
    as the `invalid` tool naming it (or as an error naming `invalid`, itself not offered), a call a
    pattern rule refuses as an error; None for any other call."""
    given = state.get("input") if isinstance(state.get("input"), dict) else {}
    assert isinstance(given, dict)
    if name == "invalid" and "unavailable tool" in str(given.get("error") or ""):
        return as_str(given.get("tool")) or "unknown tool"
    error = str(state.get("error") or "") if state.get("status") == "error" else ""
    if "unavailable tool" in error or "a rule which prevents you from using" in error:
        return name
    return None


class OpencodeJsonlParser(Parser):
    format = "opencode-jsonl"

    def __init__(self) -> None:
        super().__init__()
        self._step_text: list[str] = []
        self._steps = 0
        self._cost: float | None = None

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        part = event.get("part") if isinstance(event.get("part"), dict) else {}
        assert isinstance(part, dict)
        session = as_str(event.get("sessionID")) or as_str(part.get("sessionID"))
        if session and not self.state.session_id:
            self.state = self.state.with_(session_id=session)
            self.emit(Event("session", session=session))
        if kind == "step_start":
            self._step_text = []
            self.emit_turn(self._steps + 1)
        elif kind == "text" and isinstance(part.get("text"), str):
            self._step_text.append(part["text"])
            self.state = self.state.with_(text="".join(self._step_text))
            self.emit(text_event(part["text"]))
        elif kind == "tool_use":
            state = part.get("state") if isinstance(part.get("state"), dict) else {}
            assert isinstance(state, dict)
            name = as_str(part.get("tool")) or "tool"
            self.emit(Event("tool", tool=name, arg=short_argument(state.get("input"))))
            refused = _refused_tool(name, state)
            if refused is not None:
                self.deny_tool(refused)
        elif kind == "step_finish":
            self._steps += 1
            raw = part.get("tokens") if isinstance(part.get("tokens"), dict) else {}
            assert isinstance(raw, dict)
            cache = raw.get("cache") if isinstance(raw.get("cache"), dict) else {}
            assert isinstance(cache, dict)
            output = as_int(raw.get("output"))
            reasoning = as_int(raw.get("reasoning"))
            step = Tokens(
                input=as_int(raw.get("input")),
                output=None if output is None else output + (reasoning or 0),
                cache_read=as_int(cache.get("read")),
                cache_write=as_int(cache.get("write")),
            )
            cost = as_float(part.get("cost"))
            if cost is not None:
                self._cost = (self._cost or 0.0) + cost
            self.state = self.state.with_(
                tokens=self.state.tokens.plus(step), cost_usd=self._cost, turns=self._steps, finished=True
            )
        elif kind == "error":
            error = event.get("error") if isinstance(event.get("error"), dict) else {}
            assert isinstance(error, dict)
            data = error.get("data") if isinstance(error.get("data"), dict) else {}
            assert isinstance(data, dict)
            message = str(data.get("message") or error.get("message") or error.get("name") or "error")
            status = as_int(data.get("statusCode"))
            self.state = self.state.with_(failure=classify_error(status, message), message=message)
