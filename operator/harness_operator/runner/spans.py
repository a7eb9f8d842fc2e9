"""The runner's spans of its attempt when its run is traced (I/O: the wall clock): `setup` (from the
runner's main, after its interpreter's start-up, to the agent's launch; its steps as children), `agent`
(from the launch to the attempt's end), inside it each `turn N` and `tool NAME` as the event stream
reports them and each `reprompt N`; written as the last line of the log (contract/runner_spans.py).

An invocation of the agent ends, as far as its spans know, at the next launch (a re-prompt) or at the
attempt's end. A tool call lasts until the agent's next event (a turn, a tool call, its text, its
session): not a `progress` event, which the runner derives from the same line. A tool's span names the
tool only, never its arguments, and only its leading run of name characters (an ACP tool's title may
hold its argument). An agent the runner does not launch (a remote ACP agent) starts at its first event.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from harness_operator.contract.events import Event
from harness_operator.contract.plan import AttemptPlan
from harness_operator.contract.runner_spans import MAX_SPANS, RunnerAttribute, RunnerSpan, encode_spans_line
from harness_operator.contract.tracing import parse_traceparent
from harness_operator.runner.attempt import AttemptResult
from harness_operator.runner.launch import AgentProcess, Launch, Spawn
from harness_operator.runner.redact import Redactor

_TOOL_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,48}")
_AGENT_KINDS = ("session", "turn", "tool", "text")  # what the agent's stream says (not the runner's)


@dataclass
class _Span:
    name: str
    start_ns: int
    parent: int | None
    attributes: dict[str, RunnerAttribute] = field(default_factory=dict)
    end_ns: int | None = None
    error: str | None = None


class SpanRecorder:
    """One attempt's spans, kept only once `begin` finds the run traced (every method is a no-op
    before). Events may come from the executor's threads: one lock."""

    def __init__(self, clock: Callable[[], int] = time.time_ns) -> None:
        self.clock = clock
        self.started = clock()
        self.recording = False
        self.spans: list[_Span] = []
        self.dropped = 0
        self.lock = threading.Lock()
        self.redactor = Redactor([])
        self.setup: int | None = None
        self.agent: int | None = None
        self.invocation: int | None = None  # the agent's span, or the current re-prompt's
        self.launches = 0
        self.turn: int | None = None
        self.tool: int | None = None

    def begin(self, plan: AttemptPlan, credentials: Mapping[str, str]) -> None:
        """Record when the plan's traceparent says the run is traced and sampled; setup started with
        the runner."""
        parent = parse_traceparent(plan.trace_parent)
        if parent is None or not parent.sampled:
            return
        self.recording = True
        self.redactor = Redactor([*credentials.values(), *plan.redacted_values])
        self.setup = self._open("setup", None, self.started)

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[dict[str, RunnerAttribute]]:
        """A step of the setup, as long as the block; the block may add attributes to what it yields."""
        attributes: dict[str, RunnerAttribute] = {}
        with self.lock:
            index = self._open(name, self.setup, self.clock()) if self.recording else None
        try:
            yield attributes
        finally:
            with self.lock:
                if index is not None and index >= 0:
                    self.spans[index].attributes.update(attributes)
                    self._close(index, self.clock())

    def launching(self, spawn: Spawn) -> Spawn:
        """`spawn`, marking each launch it makes: the first is the agent's, each next a re-prompt's."""
        if not self.recording:
            return spawn

        def launch(what: Launch) -> AgentProcess:
            proc = spawn(what)
            with self.lock:
                self._launched(self.clock())
            return proc

        return launch

    def on_event(self, event: Event) -> None:
        """An event of the attempt: a turn opens its span, a tool call its own; any event of the agent's
        stream ends the open tool call."""
        if not self.recording or event.kind not in _AGENT_KINDS:
            return
        with self.lock:
            now = self.clock()
            self._close(self.tool, now)
            self.tool = None
            if self.invocation is None:  # an agent the runner did not launch
                self._start_agent(now)
            if event.kind == "turn":
                turn = event.turn or 0
                self._close(self.turn, now)
                self.turn = self._open(f"turn {turn}", self.invocation, now, {"harness.turn": turn})
            elif event.kind == "tool":
                found = _TOOL_NAME.match(self.redactor.text(event.tool or ""))
                tool = found.group(0) if found else "tool"
                parent = self.invocation if self.turn is None else self.turn
                self.tool = self._open(f"tool {tool}", parent, now, {"gen_ai.tool.name": tool})

    def finish(self, result: AttemptResult) -> str | None:
        """The spans line, every span ended now: the agent's says who it was and how the attempt ended
        (the setup's, when no agent started); None when not recording."""
        if not self.recording:
            return None
        with self.lock:
            now = self.clock()
            if self.agent is not None and self.agent >= 0:
                self.spans[self.agent].attributes.update(build_agent_attributes(result))
            failed = self.setup if self.agent is None else self.agent
            if not result.succeeded and failed is not None and failed >= 0:
                self.spans[failed].error = str(result.reason or f"exit code {result.exit_code}")
            for span in self.spans:
                if span.end_ns is None:
                    span.end_ns = now
            return encode_spans_line([self._kept(span) for span in self.spans], self.dropped)

    def _launched(self, now: int) -> None:
        self.launches += 1
        if self.launches == 1:
            self._start_agent(now)
            return
        self._close(self.tool, now)
        self._close(self.turn, now)
        self.tool = self.turn = None
        self._close(self.invocation if self.invocation != self.agent else None, now)
        nth = self.launches - 1
        self.invocation = self._open(f"reprompt {nth}", self.agent, now, {"harness.reprompt": nth})

    def _start_agent(self, now: int) -> None:
        self._close(self.setup, now)
        self.agent = self.invocation = self._open("agent", None, now)

    def _open(
        self,
        name: str,
        parent: int | None,
        now: int,
        attributes: dict[str, RunnerAttribute] | None = None,
    ) -> int:
        """The new span's index; -1 (a span left out) past MAX_SPANS, or under a span left out."""
        if len(self.spans) >= MAX_SPANS or (parent is not None and parent < 0):
            self.dropped += 1
            return -1
        self.spans.append(_Span(name, now, parent, dict(attributes or {})))
        return len(self.spans) - 1

    def _close(self, index: int | None, now: int) -> None:
        if index is not None and index >= 0 and self.spans[index].end_ns is None:
            self.spans[index].end_ns = now

    def _kept(self, span: _Span) -> RunnerSpan:
        """The span as written, its string values redacted (a model's name, a CLI's version: the agent's
        word)."""
        attributes = {
            key: self.redactor.text(value) if isinstance(value, str) else value
            for key, value in span.attributes.items()
        }
        end = span.end_ns if span.end_ns is not None else span.start_ns
        return RunnerSpan(span.name, span.start_ns, end, span.parent, attributes, span.error)


def build_agent_attributes(result: AttemptResult) -> dict[str, RunnerAttribute]:
    """What the agent's span says of it, as far as known: provider, CLI version, model, exit code."""
    known: dict[str, RunnerAttribute | None] = {
        "harness.provider": result.provider,
        "harness.cli.version": result.report.cli_version,
        "harness.model": result.report.model,
        "process.exit.code": result.agent_exit_code,
    }
    return {key: value for key, value in known.items() if value is not None and value != ""}
