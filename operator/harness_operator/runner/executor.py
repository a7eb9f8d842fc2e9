"""Runs one attempt as a real process group: binary, environment, stdin, streams, limits (I/O).

Dagu's rules: the binary is resolved before anything starts; the agent sees only the declared
environment plus a small allowlist; stdin is piped or closed; stdout is spooled and parsed line by
line; stderr streams live; timeout, cancel and the cost limit stop the whole process group (SIGTERM,
then SIGKILL after the grace period); granted secret values are redacted everywhere.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any

from harness_operator.api.v1alpha1 import Usage
from harness_operator.runner.cost import compute_cost, compute_usage
from harness_operator.runner.events import Event, encode_event_line, escape_agent_line
from harness_operator.runner.parsers import Failure, Report, Tokens, build_parser
from harness_operator.runner.plan import AttemptPlan
from harness_operator.runner.redact import Redactor, StreamRedactor
from harness_operator.runner.result import EXIT_SETUP, EXIT_STOPPED, NO_FALLBACK_REASONS, build_result_doc
from harness_operator.runner.stops import SetupError, resolve_binary, stop_process_group

ALLOWED_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "LANG", "TERM")
TAIL_BYTES = 1024
POLL_SECONDS = 0.05


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
    start_time: str | None = None
    completion_time: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0 and self.reason is None

    @property
    def fallback_allowed(self) -> bool:
        """Next provider only after a non-zero exit, never after timeout, cancel or cost stop."""
        return not self.succeeded and self.reason not in NO_FALLBACK_REASONS

    def to_doc(self) -> dict[str, Any]:
        """The result document (file and termination message)."""
        return build_result_doc(
            attempt=self.attempt,
            provider=self.provider,
            exit_code=self.exit_code,
            reason=self.reason,
            message=self.message,
            usage=self.usage.to_api() | {"costSource": str(self.usage.cost_source)},
            model=self.report.model,
            session_id=self.report.session_id,
            output=self.output,
            output_bytes=self.output_bytes,
            truncated=self.truncated,
            agent_exit_code=self.agent_exit_code,
            cli_version=self.report.cli_version,
            start_time=self.start_time,
            completion_time=self.completion_time,
        )


def build_env(
    plan: AttemptPlan, base_env: Mapping[str, str], credentials: Mapping[str, str]
) -> dict[str, str]:
    """Only the allowlist from the runner's environment, then the plan's plain env, then the grants."""
    env = {name: base_env[name] for name in ALLOWED_ENV if name in base_env}
    env.update({e.name: e.value for e in plan.env})
    for name in plan.credential_envs:
        if name in credentials:
            env[name] = credentials[name]
        elif name not in plan.optional_credential_envs:
            raise SetupError(
                "CredentialsMissing", f"harness: credential {name} is not set; grant it from a Secret"
            )
    return env


def truncate_utf8(data: bytes, limit: int | None) -> tuple[bytes, bool]:
    """At most `limit` bytes, cut on a character boundary."""
    if limit is None or len(data) <= limit:
        return data, False
    cut = limit
    while cut > 0 and (data[cut] & 0xC0) == 0x80:
        cut -= 1
    return data[:cut], True


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


def total_tokens(tokens: Tokens) -> int | None:
    """All tokens processed (input, output, cache read and write); None when none is known."""
    return sum(v or 0 for v in tokens.as_tuple()) if tokens.known else None


class _Streams:
    """Reader threads: stdout spooled and parsed into events; stderr redacted and forwarded live."""

    def __init__(
        self, plan: AttemptPlan, redactor: Redactor, sink: LogSink, emit: Callable[[Event], None]
    ) -> None:
        self.plan = plan
        self.redactor = redactor
        self.sink = sink
        self.emit = emit
        self.parser = build_parser(plan.output_format)
        self.last_tool: str | None = None
        self.figures: tuple[int | None, int | None, float | None] = (None, None, None)
        self.spool = tempfile.SpooledTemporaryFile(max_size=8 << 20)  # noqa: SIM115 (closed by owner)
        self.tail = b""
        self.limit_hit: tuple[str, str] | None = None
        self.wake = threading.Event()

    def read_stdout(self, pipe: IO[bytes]) -> None:
        stream = StreamRedactor(self.redactor)
        pending = b""  # redacted bytes of a line not yet complete (the redactor held its end back)
        for raw in iter(pipe.readline, b""):
            pending = self._take(pending + stream.feed(raw))
        self._take(pending + stream.flush(), final=True)
        pipe.close()

    def _take(self, data: bytes, final: bool = False) -> bytes:
        """Spool and parse the complete lines of redacted `data`; return the incomplete rest."""
        cut = len(data) if final else data.rfind(b"\n") + 1
        done, rest = data[:cut], data[cut:]
        self.spool.write(done)
        self.tail = (self.tail + done)[-TAIL_BYTES:]
        *lines, last = done.split(b"\n")
        for line in [*(line + b"\n" for line in lines), *([last] if last else [])]:
            self.parser.feed(line.decode("utf-8", "replace"))
            self._emit_events()
            if self.limit_hit is None:
                self.limit_hit = self._check_limits(self.parser.report())
                if self.limit_hit:
                    self.wake.set()
        return rest

    def _emit_events(self) -> None:
        """The parser's events, then a `progress` event when turns, tokens or cost moved."""
        for event in self.parser.take_events():
            if event.kind == "tool":
                self.last_tool = event.tool
            self.emit(event)
        report = self.parser.report()
        live = report.with_(tokens=self.parser.live_tokens())
        cost, _ = compute_cost(live, self.plan.pricing, self.plan.model_hint)
        figures = (report.turns, total_tokens(live.tokens), cost)
        if figures != self.figures and figures != (None, None, None):
            self.figures = figures
            turns, tokens, cost = figures
            self.emit(Event("progress", turns=turns, tokens=tokens, cost_usd=cost, last_tool=self.last_tool))

    def _check_limits(self, report: Report) -> tuple[str, str] | None:
        limits = self.plan.limits
        if limits.max_cost_usd is not None:
            cost, source = compute_cost(report, self.plan.pricing, self.plan.model_hint)
            if cost is not None and cost > limits.max_cost_usd:
                return (
                    Failure.cost_limit_exceeded.value,
                    f"harness: cost {cost:.6f} USD ({source}) crossed maxCostUSD {limits.max_cost_usd}; "
                    "stopped the agent",
                )
        if limits.max_turns is not None and report.turns is not None and report.turns > limits.max_turns:
            message = f"harness: the agent passed maxTurns {limits.max_turns}; stopped it"
            return Failure.max_turns.value, message
        return None

    def read_stderr(self, pipe: IO[bytes]) -> None:
        stream = StreamRedactor(self.redactor)
        for raw in itertools.chain(iter(pipe.readline, b""), [b""]):  # b"" last: flush what was held
            self.sink.agent(stream.feed(raw) if raw else stream.flush())
        pipe.close()

    def stdout_bytes(self) -> bytes:
        self.spool.seek(0)
        return self.spool.read()


def _write_stdin(pipe: IO[bytes], data: bytes) -> None:
    with contextlib.suppress(OSError):  # the agent may close its stdin early; that is its business
        pipe.write(data)
    with contextlib.suppress(OSError):
        pipe.close()


def execute(
    plan: AttemptPlan,
    credentials: Mapping[str, str],
    *,
    base_env: Mapping[str, str] | None = None,
    stderr: IO[bytes] | None = None,
    cancel: threading.Event | None = None,
    clock: Callable[[], float] = time.monotonic,
    on_event: Callable[[Event], None] | None = None,
    events_to_log: bool = False,
) -> AttemptResult:
    """Run one attempt to its end and say what happened. Never raises for the agent's failures.

    Normalized events go to `on_event` and, with `events_to_log` (the pod), as marked lines to stderr."""
    sink = LogSink(stderr if stderr is not None else sys.stderr.buffer)
    redactor = Redactor(v for k, v in credentials.items() if k in plan.credential_envs)
    start = utc_now()

    def say(text: str) -> None:
        sink.line(redactor.bytes(text.encode("utf-8")) + b"\n")

    def emit(event: Event) -> None:
        if events_to_log:
            sink.line(redactor.bytes(encode_event_line(event).encode("utf-8")))
        if on_event is not None:
            with sink.lock:
                on_event(event)

    def fail(reason: str, message: str, code: int = EXIT_SETUP) -> AttemptResult:
        say(message)
        failed = AttemptResult(
            plan.attempt, plan.provider, code, reason, message, start_time=start, completion_time=utc_now()
        )
        emit(build_result_event(failed))
        return failed

    emit(Event("attempt", attempt=plan.attempt, total=plan.total_attempts, provider=plan.provider))

    try:
        env = build_env(plan, base_env if base_env is not None else os.environ, credentials)
        workdir = plan.working_dir or os.getcwd()
        try:
            os.makedirs(workdir, exist_ok=True)
        except OSError as exc:
            raise SetupError("SetupFailed", f"harness: failed to create working directory: {exc}") from exc
        executable = resolve_binary(plan.binary, env.get("PATH", os.defpath), workdir)
    except SetupError as exc:
        return fail(exc.reason, exc.message)
    if cancel is not None and cancel.is_set():
        return fail("Cancelled", "harness: cancelled before the agent started", EXIT_STOPPED)

    streams = _Streams(plan, redactor, sink, emit)
    try:
        proc = subprocess.Popen(
            plan.argv,
            executable=executable,
            cwd=workdir,
            env=env,
            stdin=subprocess.PIPE if plan.stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except ValueError as exc:  # a NUL byte in an argument or environment value: no exec can carry it
        return fail("SetupFailed", f'harness: cannot start "{plan.binary}": {exc}')
    except OSError as exc:
        if exc.errno == errno.E2BIG:
            return fail(
                "SetupFailed",
                f'harness: cannot start "{plan.binary}": {exc.strerror}: an argument or the whole command '
                "line is over the kernel's limit; pass long text on stdin (promptMode: stdin)",
            )
        return fail("BinaryNotFound", f'harness: failed to resolve binary "{plan.binary}": {exc}')
    assert proc.stdout is not None and proc.stderr is not None
    threads = [
        threading.Thread(target=streams.read_stdout, args=(proc.stdout,), daemon=True),
        threading.Thread(target=streams.read_stderr, args=(proc.stderr,), daemon=True),
    ]
    if plan.stdin is not None and proc.stdin is not None:
        threads.append(
            threading.Thread(target=_write_stdin, args=(proc.stdin, plan.stdin.encode("utf-8")), daemon=True)
        )
    for thread in threads:
        thread.start()

    timeout = plan.limits.timeout_seconds
    deadline = None if timeout is None else clock() + timeout
    stopped: tuple[str, str] | None = None
    while proc.poll() is None:
        if cancel is not None and cancel.is_set():
            stopped = ("Cancelled", "harness: cancelled; stopping the agent")
        elif deadline is not None and clock() >= deadline:
            stopped = ("Timeout", f"harness: timed out after {timeout}s; stopping the agent")
        elif streams.limit_hit is not None:
            stopped = streams.limit_hit
        if stopped:
            say(stopped[1])
            stop_process_group(proc, plan.grace_seconds)
            break
        streams.wake.wait(POLL_SECONDS)
    proc.wait()
    stop_process_group(proc, 0)  # whatever the agent left in its group goes too: no orphans
    for thread in threads:
        thread.join(timeout=5)
    result = _finish(plan, proc.returncode, stopped or streams.limit_hit, streams, redactor, say, start)
    emit(build_result_event(result))
    return result


def build_result_event(result: AttemptResult) -> Event:
    """The `result` event of an attempt: its outcome and its final figures."""
    usage = result.usage
    tokens = Tokens(
        usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens
    )
    return Event(
        "result",
        attempt=result.attempt,
        provider=result.provider,
        exit_code=result.exit_code,
        reason=result.reason,
        message=result.message or None,
        turns=usage.turns,
        tokens=total_tokens(tokens),
        cost_usd=usage.cost_usd,
    )


def _finish(
    plan: AttemptPlan,
    returncode: int,
    stopped: tuple[str, str] | None,
    streams: _Streams,
    redactor: Redactor,
    say: Callable[[str], None],
    start: str,
) -> AttemptResult:
    stdout = streams.stdout_bytes()
    streams.spool.close()
    report = streams.parser.finish(stdout.decode("utf-8", "replace"))
    usage = compute_usage(report, plan.pricing, plan.model_hint)
    agent_code = returncode if returncode >= 0 else 128 - returncode
    result = AttemptResult(
        plan.attempt,
        plan.provider,
        agent_code,
        None,
        "",
        report=report,
        usage=usage,
        agent_exit_code=agent_code,
        start_time=start,
    )
    if stopped is not None:
        reason, message = stopped
        result.reason, result.message = reason, message
        result.exit_code = 1 if reason == Failure.max_turns.value else EXIT_STOPPED
    elif report.failure is not None:
        result.reason = report.failure.value
        result.message = report.message or report.failure.value
        if agent_code == 0:
            result.exit_code = 1
            say(f"harness: the CLI exited 0 but reported a failure ({result.reason}): {result.message}")
    elif agent_code != 0:
        result.reason, result.message = "ProviderFailed", f"the agent exited with code {agent_code}"
    elif streams.parser.structured and not report.finished:
        result.exit_code, result.reason = 1, Failure.provider_error.value
        result.message = f"the CLI exited 0 without reporting a result ({plan.output_format})"
        say(f"harness: {result.message}")
    if result.succeeded:
        text = stdout if report.text is None else redactor.bytes(report.text.encode("utf-8"))
        result.output_bytes = len(text)
        result.output, result.truncated = truncate_utf8(text, plan.limits.max_output_bytes)
    elif streams.tail:
        say("recent stdout (tail):\n" + streams.tail.decode("utf-8", "replace").rstrip("\n"))
    result.message = redactor.text(result.message)
    result.completion_time = utc_now()
    return result
