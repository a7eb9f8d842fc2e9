"""Shared shape of the output parsers: the Report they build and error classification (pure)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from harness_operator.api.reasons import Reason
from harness_operator.contract.events import Event
from harness_operator.contract.usage import Tokens


class Failure(StrEnum):
    """Why an attempt that the CLI itself reports on did not succeed."""

    provider_error = Reason.ProviderError
    max_turns = Reason.MaxTurns
    truncated = Reason.Truncated
    auth_failed = Reason.AuthFailed
    rate_limited = Reason.RateLimited
    provider_unavailable = Reason.ProviderUnavailable
    cost_limit_exceeded = Reason.CostLimitExceeded


@dataclass(frozen=True)
class Report:
    """What the CLI reported so far (or in the end).

    `text` None means "stdout itself is the output" (text formats). `by_model` holds per-model tokens
    when the CLI reports them that way (used to price each model separately).
    """

    text: str | None = None
    session_id: str | None = None
    model: str | None = None
    tokens: Tokens = field(default_factory=Tokens)
    by_model: dict[str, Tokens] = field(default_factory=dict)
    turns: int | None = None
    cost_usd: float | None = None
    failure: Failure | None = None
    message: str | None = None
    finished: bool = False
    cli_version: str | None = None
    denied_tools: tuple[str, ...] = ()  # tools the CLI refused the agent, first ones first

    def with_(self, **changes: Any) -> Report:
        return replace(self, **changes)


class Parser:
    """A streaming parser: feed stdout line by line as the process writes, then finish()."""

    format = "base"
    structured = True  # False: stdout itself is the output and no end event is expected

    def __init__(self) -> None:
        self.state = Report()
        self._events: list[Event] = []
        self._turn_seen = 0

    def emit(self, event: Event | None) -> None:
        """Queue a normalized event for the live view (None: nothing to show)."""
        if event is not None:
            self._events.append(event)

    def emit_turn(self, turn: int) -> None:
        """A `turn` event the first time the count reaches `turn`."""
        if turn > self._turn_seen:
            self._turn_seen = turn
            self._events.append(Event("turn", turn=turn))

    def deny_tool(self, name: str) -> None:
        """A tool call the CLI refused (its tool policy): named once, in order."""
        if name not in self.state.denied_tools:
            self.state = self.state.with_(denied_tools=(*self.state.denied_tools, name))

    def take_events(self) -> list[Event]:
        """The events since the last call, in order."""
        taken, self._events = self._events, []
        return taken

    def live_tokens(self) -> Tokens:
        """Tokens so far while the CLI runs; formats that report usage only at the end estimate it."""
        return self.state.tokens

    def feed(self, line: str) -> None:
        """One line of stdout (without or with its newline)."""
        text = line.strip()
        if not text.startswith("{"):
            return
        try:
            event = json.loads(text)
        except ValueError:
            return
        if isinstance(event, dict):
            self.on_event(event)

    def on_event(self, event: dict[str, Any]) -> None:
        raise NotImplementedError

    def report(self) -> Report:
        """A snapshot while the process runs (usage so far drives the in-flight limits)."""
        return self.state

    def finish(self, stdout: str) -> Report:
        """The final report; `stdout` is the whole (redacted) stdout, for formats that need it.

        `finished` False means the CLI never reported its end; the executor decides what that means."""
        return self.state


_AUTH = re.compile(
    r"\b(401|403)\b|unauthori[sz]ed|authenticat|invalid api key|api key|permission denied", re.IGNORECASE
)
_RATE = re.compile(r"\b429\b|rate.?limit|too many requests|quota|resource.?exhausted", re.IGNORECASE)
# The vendor's side is down or overloaded: a later try may pass (Anthropic's 529 "overloaded_error").
UNAVAILABLE_STATUSES = frozenset({500, 502, 503, 504, 529})
_UNAVAILABLE = re.compile(
    r"\b(502|503|504|529)\b|overloaded|service unavailable|temporarily unavailable|bad gateway",
    re.IGNORECASE,
)


def classify_error(status: int | None, message: str | None) -> Failure:
    """AuthFailed, RateLimited, ProviderUnavailable or ProviderError, from an HTTP status and/or an error
    message."""
    if status in (401, 403):
        return Failure.auth_failed
    if status == 429:
        return Failure.rate_limited
    if status in UNAVAILABLE_STATUSES:
        return Failure.provider_unavailable
    text = message or ""
    if status is None and _AUTH.search(text):
        return Failure.auth_failed
    if status is None and _RATE.search(text):
        return Failure.rate_limited
    if status is None and _UNAVAILABLE.search(text):
        return Failure.provider_unavailable
    return Failure.provider_error


def as_int(value: Any) -> int | None:
    """An int from a JSON number; anything else is unknown."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


def as_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def as_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
