"""Runs one attempt: the CLI executor (a real process group) and the dispatch to the ACP one (I/O).

Dagu's rules: the binary is resolved before anything starts; the agent sees only the declared
environment plus a small allowlist; stdin is piped or closed; stdout is spooled and parsed line by
line; stderr streams live; timeout, cancel and the cost limit stop the whole process group (SIGTERM,
then SIGKILL after the grace period); granted secret values are redacted everywhere.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from typing import IO

from harness_operator.api.reasons import Reason
from harness_operator.contract.events import Event
from harness_operator.contract.plan import AttemptPlan
from harness_operator.contract.result import EXIT_STOPPED
from harness_operator.runner.attempt import (
    ALLOWED_ENV,
    AttemptResult,
    Executor,
    Reporter,
    agent_exit_code,
    build_launch,
    compute_limit_hit,
    drop_session_totals,
    drop_unusable_figures,
    keep_output,
    keep_session,
    mark_left_running,
    stop_exit_code,
    utc_now,
    with_plan_identity,
)
from harness_operator.runner.cost import compute_usage, price_book
from harness_operator.runner.launch import LocalAgent, Spawn
from harness_operator.runner.parsers import Failure, build_parser
from harness_operator.runner.redact import StreamRedactor
from harness_operator.runner.stops import SetupError

__all__ = ["ALLOWED_ENV", "AttemptResult", "execute", "execute_cli"]

TAIL_BYTES = 1024
POLL_SECONDS = 0.05
READER_SECONDS = 5


class _Streams:
    """The stdout reader thread: spooled, parsed line by line, limits checked as the report grows."""

    def __init__(self, plan: AttemptPlan, reporter: Reporter) -> None:
        self.plan = plan
        self.redactor = reporter.redactor
        self.reporter = reporter
        self.parser = build_parser(plan.output_format)
        self.spool = tempfile.SpooledTemporaryFile(max_size=8 << 20)  # noqa: SIM115 (closed by owner)
        self.tail = b""
        self.limit_hit: tuple[str, str] | None = None
        self.wake = threading.Event()
        # A reader still blocked when the attempt ends (an agent left running) finds the spool closed.
        self.lock = threading.Lock()
        self.closed = False

    def read_stdout(self, pipe: IO[bytes]) -> None:
        stream = StreamRedactor(self.redactor)
        pending = b""  # redacted bytes of a line not yet complete (the redactor held its end back)
        for raw in iter(pipe.readline, b""):
            pending = self._take(pending + stream.feed(raw))
        self._take(pending + stream.flush(), final=True)
        pipe.close()

    def _take(self, data: bytes, final: bool = False) -> bytes:
        """Spool and parse the complete lines of redacted `data`; return the incomplete rest."""
        with self.lock:
            return b"" if self.closed else self._take_locked(data, final)

    def _take_locked(self, data: bytes, final: bool) -> bytes:
        cut = len(data) if final else data.rfind(b"\n") + 1
        done, rest = data[:cut], data[cut:]
        self.spool.write(done)
        self.tail = (self.tail + done)[-TAIL_BYTES:]
        *lines, last = done.split(b"\n")
        for line in [*(line + b"\n" for line in lines), *([last] if last else [])]:
            self.parser.feed(line.decode("utf-8", "replace"))
            self._emit_events()
            if self.limit_hit is None:
                self.limit_hit = compute_limit_hit(self.plan, self.parser.report())
                if self.limit_hit:
                    self.wake.set()
        return rest

    def _emit_events(self) -> None:
        """The parser's events, then a `progress` event when turns, tokens or cost moved."""
        for event in self.parser.take_events():
            self.reporter.emit(event)
        self.reporter.emit_progress(self.parser.report(), self.parser.live_tokens())

    def take_stdout(self) -> bytes:
        """All stdout spooled so far; the spool is closed after it."""
        with self.lock:
            self.closed = True
            self.spool.seek(0)
            data = self.spool.read()
            self.spool.close()
            return data


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
    spawn: Spawn = LocalAgent,
) -> AttemptResult:
    """Run one attempt with the executor of its protocol; the same result document and events either way.

    Normalized events go to `on_event` and, with `events_to_log` (the pod), as marked lines to stderr;
    `spawn` starts the agent's process (a child here, or the launcher's in the pod)."""
    executor: Executor = execute_cli
    if plan.acp is not None:
        # Imported for ACP plans only: the ACP SDK's schema takes most of the runner's start-up CPU,
        # which every CLI sandbox paid before (bench/RESULTS.md, real pods).
        from harness_operator.runner.acp import execute_acp

        executor = execute_acp
    return executor(
        plan,
        credentials,
        base_env=base_env,
        stderr=stderr,
        cancel=cancel,
        clock=clock,
        on_event=on_event,
        events_to_log=events_to_log,
        spawn=spawn,
    )


def execute_cli(
    plan: AttemptPlan,
    credentials: Mapping[str, str],
    *,
    base_env: Mapping[str, str] | None = None,
    stderr: IO[bytes] | None = None,
    cancel: threading.Event | None = None,
    clock: Callable[[], float] = time.monotonic,
    on_event: Callable[[Event], None] | None = None,
    events_to_log: bool = False,
    spawn: Spawn = LocalAgent,
) -> AttemptResult:
    """Run one CLI attempt to its end and say what happened: the CLI, and while its answer does not
    match spec.outputSchema, up to spec.outputReprompts re-prompts within the attempt's limits (one
    timeout; what was spent comes off the cost and turn limits). Never raises for the agent's failures."""
    sink = stderr if stderr is not None else sys.stderr.buffer
    reporter = Reporter(plan, credentials, sink, on_event, events_to_log)
    env = base_env if base_env is not None else os.environ
    timeout = plan.limits.timeout_seconds
    deadline = None if timeout is None else clock() + timeout
    result = _invoke(plan, plan, credentials, env, reporter, cancel, clock, spawn, deadline)
    if plan.output_reprompts == 0:
        return reporter.done(result)
    # Imported for re-prompting plans only: the JSON Schema library is start-up CPU no other attempt pays.
    from harness_operator.runner.reprompt import combine_results, plan_reprompt

    for nth in range(1, plan.output_reprompts + 1):
        again = plan_reprompt(plan, result, nth)
        if again is None:
            break
        line, following = again
        reporter.say(f"harness: {line}")
        result = combine_results(
            result, _invoke(plan, following, credentials, env, reporter, cancel, clock, spawn, deadline)
        )
    return reporter.done(result)


def _invoke(
    plan: AttemptPlan,
    invocation: AttemptPlan,
    credentials: Mapping[str, str],
    base_env: Mapping[str, str],
    reporter: Reporter,
    cancel: threading.Event | None,
    clock: Callable[[], float],
    spawn: Spawn,
    deadline: float | None,
) -> AttemptResult:
    """One run of the CLI as `invocation` says (the attempt's plan, or a re-prompt's), to its end."""
    piped = invocation.stdin is not None
    say, failed = reporter.say, reporter.failed
    try:
        launch = build_launch(invocation, credentials, base_env, piped)
    except SetupError as exc:
        return failed(exc.reason, exc.message)
    if cancel is not None and cancel.is_set():
        return failed(Reason.Cancelled, "harness: cancelled before the agent started", EXIT_STOPPED)

    streams = _Streams(invocation, reporter)
    try:
        proc = spawn(launch)
    except SetupError as exc:
        return failed(exc.reason, exc.message)
    threads = [
        threading.Thread(target=streams.read_stdout, args=(proc.stdout,), daemon=True),
        threading.Thread(target=reporter.forward, args=(proc.stderr,), daemon=True),
    ]
    if invocation.stdin is not None and proc.stdin is not None:
        data = invocation.stdin.encode("utf-8")
        threads.append(threading.Thread(target=_write_stdin, args=(proc.stdin, data), daemon=True))
    for thread in threads:
        thread.start()

    timeout = plan.limits.timeout_seconds
    stopped: tuple[str, str] | None = None
    while proc.poll() is None:
        if cancel is not None and cancel.is_set():
            stopped = (Reason.Cancelled, "harness: cancelled; stopping the agent")
        elif deadline is not None and clock() >= deadline:
            stopped = (Reason.Timeout, f"harness: timed out after {timeout}s; stopping the agent")
        elif streams.limit_hit is not None:
            stopped = streams.limit_hit
        if stopped:
            say(stopped[1])
            proc.stop(plan.grace_seconds)
            break
        streams.wake.wait(POLL_SECONDS)
    returncode = proc.wait()
    proc.stop(0)  # whatever the agent left in its group goes too: no orphans
    for thread in threads:
        thread.join(timeout=READER_SECONDS)
    # Output still open after the agent's exit means a process of its own kept it: not all was read.
    left = proc.left_running or any(t.is_alive() for t in threads[:2])
    result = _finish(invocation, returncode, stopped or streams.limit_hit, streams, reporter)
    if result.succeeded and invocation.session_paths:
        result.session = keep_session(proc.session(), reporter)
    if left:
        say("harness: the agent's processes did not end (or kept its output open); its pod is to be deleted")
        mark_left_running(result)
    return result


def _finish(
    plan: AttemptPlan,
    returncode: int,
    stopped: tuple[str, str] | None,
    streams: _Streams,
    reporter: Reporter,
) -> AttemptResult:
    say, redactor = reporter.say, reporter.redactor
    stdout = streams.take_stdout()
    report = streams.parser.finish(stdout.decode("utf-8", "replace"))
    report = drop_session_totals(plan, report, reporter)
    report = drop_unusable_figures(report, reporter)
    usage = compute_usage(report, price_book(plan), plan.model_hint)
    report = with_plan_identity(plan, report)
    agent_code = agent_exit_code(returncode)
    result = AttemptResult(
        plan.attempt,
        plan.provider,
        agent_code,
        None,
        "",
        report=report,
        usage=usage,
        agent_exit_code=agent_code,
        start_time=reporter.start,
    )
    if stopped is not None:
        reason, message = stopped
        result.reason, result.message = reason, message
        result.exit_code = stop_exit_code(reason)
    elif report.failure is not None:
        result.reason = report.failure.value
        result.message = report.message or report.failure.value
        if agent_code == 0:
            result.exit_code = 1
            say(f"harness: the CLI exited 0 but reported a failure ({result.reason}): {result.message}")
    elif agent_code != 0:
        result.reason, result.message = Reason.ProviderFailed, f"the agent exited with code {agent_code}"
        if last := reporter.last_words():
            result.message += f"; its stderr ended: {last}"
    elif streams.parser.structured and not report.finished:
        result.exit_code, result.reason = 1, Failure.provider_error.value
        result.message = f"the CLI exited 0 without reporting a result ({plan.output_format})"
        say(f"harness: {result.message}")
    if result.succeeded:
        text = stdout if report.text is None else redactor.bytes(report.text.encode("utf-8"))
        keep_output(result, text, plan)
    elif streams.tail:
        say("recent stdout (tail):\n" + streams.tail.decode("utf-8", "replace").rstrip("\n"))
    result.message = redactor.text(result.message)
    result.completion_time = utc_now()
    return result
