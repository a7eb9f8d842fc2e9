"""Output parsers, one per `output.format`: stdout lines in, a Report out (pure)."""

from __future__ import annotations

from collections.abc import Callable

from harness_operator.runner.parsers.base import Failure, Parser, Report, classify_error
from harness_operator.runner.parsers.claude import ClaudeStreamJsonParser
from harness_operator.runner.parsers.codex import CodexJsonlParser
from harness_operator.runner.parsers.copilot import CopilotJsonParser
from harness_operator.runner.parsers.gemini import GeminiJsonParser
from harness_operator.runner.parsers.opencode import OpencodeJsonlParser
from harness_operator.runner.parsers.pi import PiJsonlParser
from harness_operator.runner.parsers.text import AiderTextParser, TextParser

PARSERS: dict[str, Callable[[], Parser]] = {
    "text": TextParser,
    "claude-stream-json": ClaudeStreamJsonParser,
    "codex-jsonl": CodexJsonlParser,
    "gemini-json": GeminiJsonParser,
    "opencode-jsonl": OpencodeJsonlParser,
    "pi-jsonl": PiJsonlParser,
    "copilot-json": CopilotJsonParser,
    "aider-text": AiderTextParser,
}


def build_parser(output_format: str) -> Parser:
    """A fresh parser for one attempt; unknown formats read stdout as text."""
    return PARSERS.get(output_format, TextParser)()


def parse_text(output_format: str, stdout: str) -> Report:
    """Parse a whole stdout at once (tests and offline use): feed every line, then finish."""
    parser = build_parser(output_format)
    for line in stdout.splitlines():
        parser.feed(line)
    return parser.finish(stdout)


__all__ = ["PARSERS", "Failure", "Parser", "Report", "build_parser", "classify_error", "parse_text"]
