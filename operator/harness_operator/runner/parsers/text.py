"""Parsers for plain-text CLIs: `text` (usage unknown) and `aider-text` (Aider's token/cost lines) (pure)."""

from __future__ import annotations

import re

from harness_operator.contract.events import text_event
from harness_operator.contract.usage import Tokens
from harness_operator.runner.parsers.base import Failure, Parser, Report, classify_error


class TextParser(Parser):
    """stdout is the output; nothing is known about usage (never reported as zero)."""

    format = "text"
    structured = False

    def feed(self, line: str) -> None:
        """Each non-blank line is assistant text for the live view; the Report needs nothing."""
        self.emit(text_event(line))

    def finish(self, stdout: str) -> Report:
        return self.state.with_(finished=True)


_COUNT = r"([0-9][0-9.,]*)([kKmM]?)"
_COST = re.compile(r"Cost:\s*\$([0-9.]+) message, \$([0-9.]+) session")
_PIECE = re.compile(_COUNT + r"\s+(sent|received|cache write|cache hit)")
_LITELLM = re.compile(r"litellm\.(\w+(?:Error|Exception))\b:?\s*(.*)")


def _count(number: str, suffix: str) -> int:
    value = float(number.replace(",", ""))
    return round(value * {"": 1, "k": 1_000, "m": 1_000_000}[suffix.lower()])


class AiderTextParser(Parser):
    """Aider prints `Tokens: 2.1k sent, 150 received. Cost: $0.01 message, $0.03 session.` per message."""

    format = "aider-text"
    structured = False

    def __init__(self) -> None:
        super().__init__()
        self._messages = 0

    def feed(self, line: str) -> None:
        text = line.strip()
        error = _LITELLM.search(text)
        if error:
            name, detail = error.group(1), error.group(2) or error.group(1)
            failure = (
                Failure.auth_failed
                if "Authentication" in name
                else (Failure.rate_limited if "RateLimit" in name else classify_error(None, detail))
            )
            self.state = self.state.with_(failure=failure, message=f"{name}: {detail}"[:500])
            return
        if not text.startswith("Tokens:"):
            self.emit(text_event(text))
            return
        body = text[len("Tokens:") :].split("Cost:")[0]
        fields = {kind: _count(n, s) for n, s, kind in _PIECE.findall(body)}
        cost = _COST.search(text)
        step = Tokens(
            input=fields.get("sent"),
            output=fields.get("received"),
            cache_read=fields.get("cache hit"),
            cache_write=fields.get("cache write"),
        )
        self._messages += 1
        self.state = self.state.with_(
            tokens=self.state.tokens.plus(step),
            turns=self._messages,
            cost_usd=float(cost.group(2)) if cost else self.state.cost_usd,
        )

    def finish(self, stdout: str) -> Report:
        return self.state.with_(finished=True)
