"""Parser for `claude -p --output-format stream-json --verbose` (and Qwen Code's `-o stream-json`) (pure).

The `result` line is the truth: text, session, turns, usage, cost and outcome. The `assistant` lines'
usage are partial snapshots and are never summed; they only count turns while the CLI runs.
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

# What Claude Code answers a call of a tool its --disallowed-tools removed (2.1.332, docs/cli-facts.md).
_NO_SUCH_TOOL = "No such tool available"

_SUBTYPE_FAILURES = {
    "error_max_turns": Failure.max_turns,
    "error_max_budget_usd": Failure.cost_limit_exceeded,
}


class ClaudeStreamJsonParser(Parser):
    format = "claude-stream-json"

    def __init__(self) -> None:
        super().__init__()
        self._message_ids: set[str] = set()
        self._live: dict[str, Tokens] = {}  # the last usage snapshot of each message, for live_tokens
        self._tool_names: dict[str, str] = {}  # tool_use id -> tool name, to name a refused call

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "system" and event.get("subtype") == "init":
            self.state = self.state.with_(
                session_id=as_str(event.get("session_id")) or self.state.session_id,
                model=as_str(event.get("model")) or self.state.model,
                cli_version=as_str(event.get("claude_code_version")) or self.state.cli_version,
            )
            self.emit(Event("session", session=self.state.session_id, model=self.state.model))
        elif kind == "assistant":
            message = event.get("message") or {}
            if not isinstance(message, dict):
                return
            msg_id = as_str(message.get("id"))
            if msg_id and message.get("model") != "<synthetic>":
                self._message_ids.add(msg_id)
                self.state = self.state.with_(turns=len(self._message_ids))
                self.emit_turn(len(self._message_ids))
                if isinstance(message.get("usage"), dict):
                    self._live[msg_id] = _tokens(message["usage"])
            self._emit_content(message.get("content"))
        elif kind == "user":
            self._note_refusals(event.get("message"))
        elif kind == "result":
            self._on_result(event)

    def _note_refusals(self, message: Any) -> None:
        """A tool call the CLI answered that no such tool is available: one its policy removed."""
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict) or block.get("type") != "tool_result" or not block.get("is_error"):
                continue
            text = block.get("content")
            if isinstance(text, str) and _NO_SUCH_TOOL in text:
                self.deny_tool(self._tool_names.get(str(block.get("tool_use_id")), "unknown tool"))

    def _emit_content(self, content: Any) -> None:
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                self.emit(text_event(block["text"]))
            elif block.get("type") == "tool_use":
                name = as_str(block.get("name")) or "tool"
                self._tool_names[str(block.get("id"))] = name
                self.emit(Event("tool", tool=name, arg=short_argument(block.get("input"))))

    def live_tokens(self) -> Tokens:
        """The result line's figures once it came; before, the sum of each message's last snapshot."""
        if self.state.finished:
            return self.state.tokens
        total = Tokens()
        for tokens in self._live.values():
            total = total.plus(tokens)
        return total

    def _on_result(self, event: dict[str, Any]) -> None:
        usage = event.get("usage") if isinstance(event.get("usage"), dict) else {}
        assert isinstance(usage, dict)
        tokens = _tokens(usage)
        by_model: dict[str, Tokens] = {}
        model_costs: list[float] = []
        model_usage = event.get("modelUsage")
        if isinstance(model_usage, dict):
            for name, entry in model_usage.items():
                if not isinstance(entry, dict):
                    continue
                by_model[name] = Tokens(
                    input=as_int(entry.get("inputTokens")),
                    output=as_int(entry.get("outputTokens")),
                    cache_read=as_int(entry.get("cacheReadInputTokens")),
                    cache_write=as_int(entry.get("cacheCreationInputTokens")),
                )
                cost = as_float(entry.get("costUSD"))
                if cost is not None:
                    model_costs.append(cost)
        cost_usd = as_float(event.get("total_cost_usd"))
        if cost_usd is None and model_costs:
            cost_usd = sum(model_costs)
        model = self.state.model
        if len(by_model) == 1:
            model = next(iter(by_model))
        for denial in event.get("permission_denials") or []:
            if isinstance(denial, dict):
                self.deny_tool(as_str(denial.get("tool_name")) or "unknown tool")
        failure, message = _outcome(event)
        self.state = self.state.with_(
            text=event.get("result") if isinstance(event.get("result"), str) else "",
            session_id=as_str(event.get("session_id")) or self.state.session_id,
            model=model,
            tokens=tokens,
            by_model=by_model,
            turns=as_int(event.get("num_turns")) or self.state.turns,
            cost_usd=cost_usd,
            failure=failure,
            message=message,
            finished=True,
        )


def _tokens(usage: dict[str, Any]) -> Tokens:
    return Tokens(
        input=as_int(usage.get("input_tokens")),
        output=as_int(usage.get("output_tokens")),
        cache_read=as_int(usage.get("cache_read_input_tokens")),
        cache_write=as_int(usage.get("cache_creation_input_tokens")),
    )


def _outcome(event: dict[str, Any]) -> tuple[Failure | None, str | None]:
    """The terminal outcome of a `result` line: (None, None) is an honest success."""
    subtype = as_str(event.get("subtype")) or ""
    terminal = as_str(event.get("terminal_reason")) or ""
    stop = as_str(event.get("stop_reason")) or ""
    errors = event.get("errors")
    detail = "; ".join(str(e) for e in errors) if isinstance(errors, list) and errors else None
    error = event.get("error")  # Qwen Code: {"error": {"message": "[API Error: 401 ...]"}}
    if detail is None and isinstance(error, dict) and error.get("message"):
        detail = str(error["message"])
    result_text = as_str(event.get("result"))
    if subtype in _SUBTYPE_FAILURES:
        return _SUBTYPE_FAILURES[subtype], detail or subtype
    if terminal == "max_turns":
        return Failure.max_turns, detail or "reached the maximum number of turns"
    if event.get("is_error") is True or subtype.startswith("error"):
        status = as_int(event.get("api_error_status"))
        message = detail or result_text or subtype or "the CLI reported an error"
        return classify_error(status, message), message
    if stop == "max_tokens":
        return Failure.truncated, "the model stopped at its output token limit (stop_reason max_tokens)"
    # With --json-schema the CLI ends on the model's accepted StructuredOutput call: its answer is there.
    if stop == "tool_use" and "structured_output" not in event:
        return Failure.truncated, "the CLI ended while the model was calling tools (stop_reason tool_use)"
    return None, None
