"""What every executor shares: the attempt's result, its environment, setup, limits, redaction and
kept output, whether the agent is a CLI process or an ACP session (I/O only in Reporter)."""

from __future__ import annotations

import base64
import hashlib
import itertools
import os
import tarfile
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any, Protocol

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import Usage
from harness_operator.contract.events import Event, encode_event_line, escape_agent_line
from harness_operator.contract.plan import (
    HOME_PATH_ARG_PREFIX,
    SESSION_ARCHIVE_PATH,
    AttemptPlan,
)
from harness_operator.contract.result import (
    EXIT_SETUP,
    EXIT_STOPPED,
    ResultDocument,
    build_result_doc,
    is_fallback_allowed,
)
from harness_operator.contract.times import timestamp
from harness_operator.contract.usage import Tokens, tokens_of
from harness_operator.runner.cost import compute_cost, compute_sane_report, price_book
from harness_operator.runner.launch import Launch, Spawn
from harness_operator.runner.parsers import Failure, Report
from harness_operator.runner.redact import Redactor, StreamRedactor
from harness_operator.runner.session import SessionTooLarge, redact_session
from harness_operator.runner.stops import SetupError

# A failed attempt's message ends with the agent's last stderr lines (why a CLI refused: an unknown
# option, a missing key), this many, each cut at this many characters.
STDERR_TAIL_LINES = 3
STDERR_TAIL_CHARS = 200
ALLOWED_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "LANG", "TERM")


def utc_now() -> str:
    return timestamp(datetime.now(UTC))


@dataclass
class AttemptResult:
    """What one attempt did. `reason` None with exit code 0 is the only success."""

    attempt: int
    provider: str
    exit_code: int
    reason: str | None
    message: str
    report: Report = field(default_factory=Report)
    usage: Usage = field(default_factory=Usage)
    output: bytes = b""
    output_bytes: int = 0
    truncated: bool = False
    agent_exit_code: int | None = None
    agent_left_running: bool = False
    session: bytes | None = None  # the agent's session files, packed and redacted
    start_time: str | None = None
    completion_time: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0 and self.reason is None

    @property
    def fallback_allowed(self) -> bool:
        return is_fallback_allowed(self.exit_code, self.reason)

    def to_result(self) -> ResultDocument:
        """The result document (file and termination message)."""
        return build_result_doc(
            attempt=self.attempt,
            provider=self.provider,
            exit_code=self.exit_code,
            reason=self.reason,
            message=self.message,
            usage=self.usage,
            model=self.report.model,
            session_id=self.report.session_id,
            output=self.output,
            output_bytes=self.output_bytes,
            truncated=self.truncated,
            agent_exit_code=self.agent_exit_code,
            agent_left_running=self.agent_left_running,
            cli_version=self.report.cli_version,
            start_time=self.start_time,
            completion_time=self.completion_time,
            denied_tools=self.report.denied_tools,
            session=self.session,
        )

    def to_doc(self) -> dict[str, Any]:
        """The result document as written."""
        return self.to_result().to_doc()


class Executor(Protocol):
    """One per protocol: runs an attempt to its end and says what happened; never raises for the
    agent's failures."""

    def __call__(
        self,
        plan: AttemptPlan,
        credentials: Mapping[str, str],
        *,
        base_env: Mapping[str, str] | None = None,
        stderr: IO[bytes] | None = None,
        cancel: threading.Event | None = None,
        clock: Callable[[], float] = ...,
        on_event: Callable[[Event], None] | None = None,
        events_to_log: bool = False,
        spawn: Spawn = ...,
    ) -> AttemptResult: ...


def build_env(
    plan: AttemptPlan, base_env: Mapping[str, str], credentials: Mapping[str, str]
) -> dict[str, str]:
    """Only the allowlist from the runner's environment, then the plan's plain env, then the grants."""
    env = {name: base_env[name] for name in ALLOWED_ENV if name in base_env}
    env.update({e.name: e.value for e in plan.env})
    for name in plan.credential_envs:
        if name in credentials:
            env[name] = credentials[name]
            if name in plan.raw_json_envs and not is_json_safe(credentials[name]):
                raise SetupError(
                    Reason.SetupFailed,
                    f"harness: credential {name} holds a quote, a backslash or a control character, which "
                    "the CLI pastes unescaped into its JSON configuration (an MCP server's header): "
                    "store a value without them in its Secret",
                )
        elif name not in plan.optional_credential_envs:
            raise SetupError(
                Reason.CredentialsMissing, f"harness: credential {name} is not set; grant it from a Secret"
            )
    return env


def is_json_safe(value: str) -> bool:
    """Whether `value` pasted between a JSON string's quotes leaves it the same string."""
    return not any(c in value for c in '"\\') and all(ord(c) >= 0x20 for c in value)


def build_launch(
    plan: AttemptPlan, credentials: Mapping[str, str], base_env: Mapping[str, str], stdin: bool
) -> Launch:
    """The agent's process as the plan says: argv (a home file's argument made its path in the agent's
    home), binary, environment, working directory (the plan's, else this process's); SetupError
    when a credential is missing."""
    env = build_env(plan, base_env, credentials)
    home = env.get("HOME") or os.path.expanduser("~")
    prefix = HOME_PATH_ARG_PREFIX
    argv = [os.path.join(home, a[len(prefix) :]) if a.startswith(prefix) else a for a in plan.argv]
    more = plan.output_reprompts > 0
    session = read_earlier_session(plan)
    return Launch(
        argv,
        plan.binary,
        env,
        plan.working_dir or os.getcwd(),
        stdin,
        dict(plan.home_files),
        more,
        list(plan.session_paths),
        None if session is None else base64.b64encode(session).decode("ascii"),
        plan.acp is not None,
    )


def read_earlier_session(plan: AttemptPlan, path: str = SESSION_ARCHIVE_PATH) -> bytes | None:
    """The archive of the session this attempt continues, as its run's Secret holds it and its plan's
    SHA-256 says (SetupFailed otherwise); None for an attempt that continues none."""
    if plan.session_sha256 is None:
        return None
    try:
        with open(path, "rb") as fh:
            data = base64.b64decode(fh.read(), validate=True)
    except (OSError, ValueError) as exc:
        raise SetupError(Reason.SetupFailed, f"harness: cannot read the earlier session: {exc}") from exc
    if hashlib.sha256(data).hexdigest() != plan.session_sha256:
        raise SetupError(Reason.SetupFailed, "harness: the earlier session is not the one the plan names")
    return data


class LogSink:
    """The runner's stderr (the pod log), shared by threads: the agent's stderr, escaped so that no agent
    line reads as a runner event, and the runner's own lines, each starting a line of its own."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.lock = threading.Lock()
        self.at_line_start = True

    def agent(self, data: bytes) -> None:
        with self.lock:
            self._write(escape_agent_line(data, self.at_line_start))

    def line(self, data: bytes) -> None:
        """`data` (ending with a newline) on a line of its own."""
        with self.lock:
            self._write(data if self.at_line_start else b"\n" + data)

    def _write(self, data: bytes) -> None:
        if data:
            self.raw.write(data)
            self.raw.flush()
            self.at_line_start = data.endswith(b"\n")


class Reporter:
    """The attempt's voice on stderr: every line redacted, writes serialised with the agent's stderr;
    normalized events go to `on_event` and, with `events_to_log` (the pod), as marked lines to stderr."""

    def __init__(
        self,
        plan: AttemptPlan,
        credentials: Mapping[str, str],
        sink: IO[bytes],
        on_event: Callable[[Event], None] | None = None,
        events_to_log: bool = False,
    ) -> None:
        self.plan = plan
        self.sink = LogSink(sink)
        self.on_event = on_event
        self.events_to_log = events_to_log
        granted = [v for k, v in credentials.items() if k in plan.credential_envs]
        self.redactor = Redactor([*granted, *plan.redacted_values])
        self.start = utc_now()
        self.progress = Progress()
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)  # redacted, as forwarded
        self.emit(
            Event(
                "attempt",
                attempt=plan.attempt,
                total=plan.total_attempts,
                provider=plan.provider,
                retry=plan.retry or None,
            )
        )

    def say(self, text: str) -> None:
        """The runner's line; any lines after the first carry the agent's words (a stdout tail, a CLI's
        message) and are escaped like its stderr, so none of them reads as a runner event."""
        first, newline, rest = self.redactor.bytes(text.encode("utf-8")).partition(b"\n")
        self.sink.line(first + newline + escape_agent_line(rest, True) + b"\n")

    def emit(self, event: Event) -> None:
        if event.kind == "tool":
            self.progress.last_tool = event.tool
        if self.events_to_log:
            self.sink.line(self.redactor.bytes(encode_event_line(event).encode("utf-8")))
        if self.on_event is not None:
            with self.sink.lock:
                self.on_event(event)

    def emit_progress(self, report: Report, tokens: Tokens) -> None:
        """A `progress` event when turns, tokens (so far: `tokens`) or cost moved."""
        event = self.progress.update(self.plan, report, tokens)
        if event is not None:
            self.emit(event)

    def done(self, result: AttemptResult) -> AttemptResult:
        """The attempt's end: its `result` event, and the result."""
        self.emit(build_result_event(result))
        return result

    def fail(self, reason: str, message: str, code: int = EXIT_SETUP) -> AttemptResult:
        """An attempt that ended before (or without) the agent: said, and its result."""
        return self.done(self.failed(reason, message, code))

    def failed(self, reason: str, message: str, code: int = EXIT_SETUP) -> AttemptResult:
        """A start of the agent that failed: said, and its result (not yet the attempt's end)."""
        self.say(message)
        return AttemptResult(
            self.plan.attempt,
            self.plan.provider,
            code,
            reason,
            self.redactor.text(message),
            start_time=self.start,
            completion_time=utc_now(),
        )

    def forward(self, pipe: IO[bytes]) -> None:
        """Copy the agent's stderr to the sink live, redacted and escaped (a thread's target)."""
        stream = StreamRedactor(self.redactor)
        for raw in itertools.chain(iter(pipe.readline, b""), [b""]):  # b"" last: flush what was held
            out = stream.feed(raw) if raw else stream.flush()
            self.sink.agent(out)
            for line in out.decode("utf-8", "replace").splitlines():
                if line.strip():
                    self.stderr_tail.append(line.strip()[:STDERR_TAIL_CHARS])
        pipe.close()

    def last_words(self) -> str:
        """The agent's last stderr lines, redacted and bounded, for a failure's message ("" if none)."""
        return " / ".join(self.stderr_tail)


@dataclass
class Progress:
    """An attempt's figures last said and its last tool, so a `progress` event comes only on a change."""

    figures: tuple[int | None, int | None, float | None] = (None, None, None)
    last_tool: str | None = None

    def update(self, plan: AttemptPlan, report: Report, tokens: Tokens) -> Event | None:
        """The `progress` event for `report` with `tokens` so far, or None when nothing moved."""
        live = report.with_(tokens=tokens)
        figures = (
            report.turns,
            live.tokens.total,
            compute_cost(live, price_book(plan), plan.model_hint).usd,
        )
        if figures == self.figures or figures == (None, None, None):
            return None
        self.figures = figures
        turns, total, cost = figures
        return Event("progress", turns=turns, tokens=total, cost_usd=cost, last_tool=self.last_tool)


def build_result_event(result: AttemptResult) -> Event:
    """The `result` event of an attempt: its outcome and its final figures."""
    usage = result.usage
    return Event(
        "result",
        attempt=result.attempt,
        provider=result.provider,
        exit_code=result.exit_code,
        reason=result.reason,
        message=result.message or None,
        turns=usage.turns,
        tokens=tokens_of(usage).total,
        cost_usd=usage.cost_usd,
    )


def compute_limit_hit(plan: AttemptPlan, report: Report) -> tuple[str, str] | None:
    """(reason, message) when the report so far crosses maxCostUSD or maxTurns, else None (pure)."""
    limits = plan.limits
    if limits.max_cost_usd is not None:
        cost = compute_cost(report, price_book(plan), plan.model_hint)
        if cost.usd is not None and cost.usd > limits.max_cost_usd:
            return (
                Failure.cost_limit_exceeded.value,
                f"harness: cost {cost.usd:.6f} USD ({cost.source}) crossed maxCostUSD "
                f"{limits.max_cost_usd}; stopped the agent",
            )
    if limits.max_turns is not None and report.turns is not None and report.turns > limits.max_turns:
        message = f"harness: the agent passed maxTurns {limits.max_turns}; stopped it"
        return Failure.max_turns.value, message
    return None


def with_plan_identity(plan: AttemptPlan, report: Report) -> Report:
    """The report naming the model and CLI version the agent reported, else the plan's (pure).

    Status names the model the agent used; only when it names none, the one requested. Likewise the
    version: the agent's own word, else the pin of the image it ran in."""
    return report.with_(
        model=report.model or plan.model_hint, cli_version=report.cli_version or plan.cli_version
    )


def agent_exit_code(returncode: int) -> int:
    """The agent's exit code as a shell reports it: a death by signal N is 128 + N (Popen says -N)."""
    return returncode if returncode >= 0 else 128 - returncode


def drop_unusable_figures(report: Report, reporter: Reporter) -> Report:
    """The report without the figures no bill can use, said on the log when there were any."""
    sane, dropped = compute_sane_report(report)
    if dropped:
        reporter.say(f"harness: ignored what the CLI reported that no bill can use: {', '.join(dropped)}")
    return sane


def mark_left_running(result: AttemptResult) -> None:
    """An agent whose processes did not end: no exit code of its own, and never a success (its output
    may be cut short)."""
    result.agent_exit_code, result.agent_left_running = None, True
    if result.succeeded:
        result.exit_code, result.reason = 1, Failure.provider_error.value
        result.message = (
            "harness: the agent exited 0 but its processes did not end; its output may be incomplete"
        )
        result.output, result.output_bytes, result.truncated = b"", 0, False


def stop_exit_code(reason: str) -> int:
    """The exit code of an attempt we stopped: maxTurns is the agent's failure (1), the rest 124."""
    return 1 if reason == Failure.max_turns.value else EXIT_STOPPED


def truncate_utf8(data: bytes, limit: int | None) -> tuple[bytes, bool]:
    """At most `limit` bytes, cut on a character boundary."""
    if limit is None or len(data) <= limit:
        return data, False
    cut = limit
    while cut > 0 and (data[cut] & 0xC0) == 0x80:
        cut -= 1
    return data[:cut], True


def keep_output(result: AttemptResult, text: bytes, plan: AttemptPlan) -> None:
    """A successful attempt's (already redacted) output, cut at maxOutputBytes."""
    result.output_bytes = len(text)
    result.output, result.truncated = truncate_utf8(text, plan.limits.max_output_bytes)


def drop_session_totals(plan: AttemptPlan, report: Report, reporter: Reporter) -> Report:
    """A continuing attempt's report without what its CLI counts for the whole session (its cost and
    per-model figures; its tokens too where its definition says so), said on the log: the attempt is
    billed for its own calls, never twice for the earlier run's."""
    if plan.session_sha256 is None:
        return report
    reporter.say("harness: the CLI reports the resumed session's totals; kept only what is this attempt's")
    kept = report.with_(cost_usd=None, by_model={})
    return kept.with_(tokens=Tokens()) if plan.session_usage_cumulative else kept


def keep_session(found: tuple[bytes | None, str | None], reporter: Reporter) -> bytes | None:
    """The session files the agent left (`found`: the archive, or why there is none), with every secret
    it was given cut out; None (said) when none can be kept."""
    session, problem = found
    try:
        kept = None if session is None else redact_session(session, reporter.redactor)
    except (SessionTooLarge, tarfile.TarError, OSError, EOFError) as exc:
        kept, problem = None, f"its archive cannot be read: {exc}"
    if problem is not None:
        reporter.say(f"harness: the agent's session is not kept: {problem}")
    return kept
