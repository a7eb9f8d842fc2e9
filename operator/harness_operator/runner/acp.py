"""The ACP executor: one session per attempt over stdio (or a remote transport), on the ACP SDK (I/O): a
new one, or the earlier run's continued with session/load (its replay of the earlier turns is not this
turn's output), its files kept after a successful turn as a CLI's are.

The prompt goes out as one text block; assistant text chunks become the output (thoughts, tool events
and protocol JSON do not); only stopReason end_turn succeeds. Session, tool-call, text and usage updates
become the same normalized events as a CLI run's (contract/events.py). Permission requests are answered by
spec.acpPermission or the tool policy, and allowed when they name a listed tool of the run's MCP servers,
which the agent starts behind their gates (runner/mcp_gate.py). A stop (cancel, timeout, cost) sends
session/cancel and waits the grace period for the turn to end, then closes the transport: a local
adapter's process group is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, cast

from acp import PROTOCOL_VERSION, Client, RequestError, text_block
from acp.client.connection import ClientSideConnection
from acp.schema import (
    AcpMcpServer,
    AgentMessageChunk,
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    EnvVariable,
    HttpMcpServer,
    Implementation,
    McpServerStdio,
    PermissionOption,
    RequestPermissionResponse,
    SseMcpServer,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    UsageUpdate,
)
from pydantic import ValidationError

from harness_operator import __version__
from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import AcpTransport
from harness_operator.contract.events import Event, short_argument, text_event
from harness_operator.contract.plan import AcpSessionPlan, AttemptPlan
from harness_operator.contract.result import EXIT_SETUP, EXIT_STOPPED
from harness_operator.contract.usage import Tokens
from harness_operator.runner.acp_rules import OfferedOption, choose_permission, is_tool_allowed, stop_outcome
from harness_operator.runner.attempt import (
    AttemptResult,
    Reporter,
    agent_exit_code,
    build_env,
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
from harness_operator.runner.parsers import Failure, Report, classify_error
from harness_operator.runner.stops import SetupError

# initialize and session/new must answer within this; the turn itself has only timeoutSeconds.
REQUEST_SECONDS = 60.0
POLL_SECONDS = 0.05
# After the session ends, a local adapter gets this long to exit on its closed stdin.
EXIT_SECONDS = 2.0
GATE_MODULE = "harness_operator.runner.mcp_gate"  # the same python as the runner's, in the agent's image
GATE_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
SessionMcpServer = HttpMcpServer | SseMcpServer | AcpMcpServer | McpServerStdio  # what session/new takes
DETAIL_CHARS = 300  # of an error's data, in a message
STREAM_LIMIT = 50 << 20  # one JSON-RPC line may carry a large message (the SDK's own default)


class Stopped(Exception):
    """The turn was stopped by us (cancel, timeout, a limit)."""


@dataclass
class SessionState:
    """What the agent told us so far."""

    chunks: list[str] = field(default_factory=list)
    shown_chunks: int = 0  # chunks already said in a `text` event
    session_id: str | None = None
    agent_version: str | None = None
    cost_usd: float | None = None
    tokens: Tokens = field(default_factory=Tokens)
    denied: list[str] = field(default_factory=list)
    skipped_messages: int = 0

    def report(self, **extra: Any) -> Report:
        return Report(
            text="".join(self.chunks),
            session_id=self.session_id,
            tokens=self.tokens,
            cost_usd=self.cost_usd,
            cli_version=self.agent_version,
            denied_tools=tuple(self.denied),
            **extra,
        )

    def take_text(self) -> Event | None:
        """A `text` event of the assistant text since the last one (None: nothing new)."""
        fresh = "".join(self.chunks[self.shown_chunks :])
        self.shown_chunks = len(self.chunks)
        return text_event(fresh)


class HarnessClient:
    """The client side of the session: collects text and usage, answers permission requests by
    policy. Methods it does not define (files, terminals) answer method-not-found."""

    def __init__(self, plan: AttemptPlan, state: SessionState, reporter: Reporter, wake: asyncio.Event):
        assert plan.acp is not None
        self.policy = str(plan.acp.permission)
        self.plan = plan
        self.state = state
        self.reporter = reporter
        self.wake = wake
        self.kinds: dict[str, str] = {}  # tool call id -> its kind, as its updates said
        self.loading = False  # session/load replays the earlier conversation: none of it is this turn's

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[PermissionOption], **kwargs: Any
    ) -> RequestPermissionResponse:
        offered = [OfferedOption(o.option_id, o.kind) for o in options]
        title = getattr(tool_call, "title", None) or getattr(tool_call, "tool_call_id", "a tool call")
        assert self.plan.acp is not None
        tools = self.plan.acp.tools
        policy, source = self.policy, "spec.acpPermission"
        if str(title) in self.plan.acp.mcp_tools:  # a listed tool of a run's server, behind its gate
            policy, source = "allow", "spec.mcpServers"
        elif tools is not None:
            # An adapter may name the kind only in the call's earlier updates (Claude's leaves it out here).
            kind = getattr(tool_call, "kind", None) or self.kinds.get(
                str(getattr(tool_call, "tool_call_id", ""))
            )
            allowed = is_tool_allowed(tools, str(kind) if kind else None, str(title))
            policy, source = ("allow" if allowed else "deny"), "spec.tools"
        choice = choose_permission(policy, offered)
        if choice.allowed:
            self.reporter.say(f"harness: allowed once: {title}")
        else:
            self.state.denied.append(str(title))
            how = "no allow-once option was offered" if policy == "allow" else f"{source} refuses it"
            self.reporter.say(f"harness: denied: {title} ({how})")
        if choice.option_id is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=choice.option_id)
        )

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if self.loading:
            return
        if isinstance(update, AgentMessageChunk) and isinstance(update.content, TextContentBlock):
            self.state.chunks.append(update.content.text)
        elif isinstance(update, ToolCallStart):
            self.say_text()
            if update.kind:
                self.kinds[update.tool_call_id] = str(update.kind)
            self.reporter.emit(Event("tool", tool=update.title, arg=short_argument(update.raw_input)))
        elif isinstance(update, ToolCallProgress) and update.kind:
            self.kinds[update.tool_call_id] = str(update.kind)
        elif isinstance(update, UsageUpdate) and update.cost is not None and update.cost.currency == "USD":
            self.state.cost_usd = update.cost.amount
            self.reporter.emit_progress(self.state.report(), self.state.tokens)
            self.wake.set()

    def say_text(self) -> None:
        """The assistant text so far as a `text` event, before what comes next (a tool call, the end)."""
        event = self.state.take_text()
        if event is not None:
            self.reporter.emit(event)


def as_client(client: HarnessClient) -> Client:
    """The SDK's Client protocol lists every client method; the router answers method-not-found for
    those HarnessClient leaves out (files, terminals), which is what we mean."""
    return cast(Client, client)


class _SkippedMessages(logging.Handler):
    """The SDK logs what it cannot parse and drops it; count it and say so once, without its content."""

    def __init__(self, state: SessionState, reporter: Reporter) -> None:
        super().__init__(logging.ERROR)
        self.state = state
        self.reporter = reporter

    def emit(self, record: logging.LogRecord) -> None:
        if "parsing JSON-RPC" in record.getMessage():
            self.state.skipped_messages += 1
            if self.state.skipped_messages == 1:
                self.reporter.say("harness: skipped a line from the agent that is not JSON-RPC")


@dataclass
class Channel:
    """An open connection to the agent and how to end it."""

    conn: ClientSideConnection
    close: Callable[[], Any]  # async: end the transport (a local adapter: close stdin, kill its group)
    exit_code: Callable[[], int | None] = lambda: None
    left_running: Callable[[], bool] = lambda: False
    session: Callable[[], tuple[bytes | None, str | None]] = lambda: (None, None)  # after close


async def open_stdio(
    plan: AttemptPlan,
    client: HarnessClient,
    reporter: Reporter,
    credentials: Mapping[str, str],
    base_env: Mapping[str, str],
    spawn: Spawn,
) -> Channel:
    """Start the adapter in its own process group; its stdout/stdin carry the protocol, its stderr is
    forwarded redacted."""
    launch = build_launch(plan, credentials, base_env, True)
    # The MCP servers' header secrets are their gates' alone (build_mcp_servers): not the agent's.
    gated = {name for server in (plan.acp.mcp_servers if plan.acp else []) for name in server.env}
    proc = spawn(dataclasses.replace(launch, env={k: v for k, v in launch.env.items() if k not in gated}))
    assert proc.stdin is not None
    threading.Thread(target=reporter.forward, args=(proc.stderr,), daemon=True).start()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=STREAM_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), proc.stdout)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, proc.stdin)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    conn = ClientSideConnection(as_client(client), writer, reader)

    async def close() -> None:
        with contextlib.suppress(Exception):
            await conn.close()
        with contextlib.suppress(Exception):
            writer.close()
        deadline = time.monotonic() + EXIT_SECONDS
        while proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(POLL_SECONDS)
        await asyncio.to_thread(proc.stop, 0)  # the adapter's whole group goes: no orphans

    def exit_code() -> int | None:
        code = proc.poll()
        return None if code is None else agent_exit_code(code)

    return Channel(conn, close, exit_code, lambda: proc.left_running, proc.session)


async def open_channel(
    plan: AttemptPlan,
    client: HarnessClient,
    reporter: Reporter,
    credentials: Mapping[str, str],
    base_env: Mapping[str, str],
    spawn: Spawn,
) -> Channel:
    assert plan.acp is not None
    if plan.acp.transport == AcpTransport.stdio:
        return await open_stdio(plan, client, reporter, credentials, base_env, spawn)
    from harness_operator.runner.acp_remote import open_remote  # websockets and httpx only when used

    transport, close = await open_remote(plan, credentials, reporter)
    return Channel(ClientSideConnection(as_client(client), transport), close)


@dataclass
class Outcome:
    reason: str | None = None
    message: str = ""
    stopped: bool = False


class Session:
    """One attempt's session, driven to its end under the attempt's limits."""

    def __init__(
        self,
        plan: AttemptPlan,
        credentials: Mapping[str, str],
        base_env: Mapping[str, str],
        reporter: Reporter,
        cancel: threading.Event | None,
        clock: Callable[[], float],
        spawn: Spawn,
    ) -> None:
        assert plan.acp is not None
        self.spawn = spawn
        self.left_running = False
        self.plan = plan
        self.acp = plan.acp
        self.credentials = credentials
        self.base_env = base_env
        self.reporter = reporter
        self.cancel = cancel
        self.clock = clock
        self.state = SessionState()
        self.exit_code: int | None = None
        self.session_files: tuple[bytes | None, str | None] = (None, None)
        timeout = plan.limits.timeout_seconds
        self.deadline = None if timeout is None else clock() + timeout

    def stop_cause(self) -> tuple[str, str] | None:
        if self.cancel is not None and self.cancel.is_set():
            return Reason.Cancelled, "harness: cancelled; cancelling the ACP turn"
        if self.deadline is not None and self.clock() >= self.deadline:
            return (
                Reason.Timeout,
                f"harness: timed out after {self.plan.limits.timeout_seconds}s; cancelling the ACP turn",
            )
        return compute_limit_hit(self.plan, self.state.report())

    async def run(self) -> Outcome:
        wake = asyncio.Event()
        client = HarnessClient(self.plan, self.state, self.reporter, wake)
        channel = await open_channel(
            self.plan, client, self.reporter, self.credentials, self.base_env, self.spawn
        )
        work = asyncio.ensure_future(self.converse(channel.conn, client))
        outcome: Outcome | None = None
        try:
            while not work.done():
                cause = self.stop_cause()
                if cause is not None:
                    outcome = await self.stop(channel.conn, work, cause)
                    break
                wake.clear()
                await asyncio.wait(
                    [work, asyncio.ensure_future(wake.wait())],
                    timeout=POLL_SECONDS,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            if outcome is None:
                outcome = work.result()
                # ACP reports tokens only as the turn ends: a cost computed from them is checked here.
                if outcome.reason is None and (hit := compute_limit_hit(self.plan, self.state.report())):
                    self.reporter.say(hit[1])
                    outcome = Outcome(*hit, stopped=True)
        finally:
            if not work.done():
                work.cancel()
                with contextlib.suppress(BaseException):
                    await work
            await channel.close()
            self.exit_code = channel.exit_code()
            self.left_running = channel.left_running()
            if outcome is not None and outcome.reason is None and self.plan.session_paths:
                self.session_files = channel.session()
        return outcome

    async def converse(self, conn: ClientSideConnection, client: HarnessClient) -> Outcome:
        """initialize, session/new, one session/prompt; the stop reason decides."""
        init = await asyncio.wait_for(
            conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=ClientCapabilities(),
                client_info=Implementation(name="harness-operator", version=__version__),
            ),
            REQUEST_SECONDS,
        )
        if init.agent_info is not None:
            self.state.agent_version = init.agent_info.version
        cwd = self.acp.cwd or os.path.abspath(self.plan.working_dir or os.getcwd())
        servers = build_mcp_servers(self.acp, build_env(self.plan, self.base_env, self.credentials))
        if self.acp.load_session is not None:
            if init.agent_capabilities is None or not init.agent_capabilities.load_session:
                return Outcome(
                    Reason.ProviderFailed,
                    "the agent does not offer session/load, so it cannot continue the earlier session; its "
                    "definition declares capabilities.sessionResume: set it false",
                )
            client.loading = True
            try:
                await asyncio.wait_for(
                    conn.load_session(cwd=cwd, session_id=self.acp.load_session, mcp_servers=servers),
                    REQUEST_SECONDS,
                )
            except RequestError as exc:
                detail = f" ({str(exc.data)[:DETAIL_CHARS]})" if exc.data else ""
                return Outcome(
                    Reason.ProviderFailed,
                    f"the agent could not load the earlier session {self.acp.load_session}: {exc}{detail}",
                )
            client.loading = False
            session_id = self.acp.load_session
        else:
            session_id = (
                await asyncio.wait_for(conn.new_session(cwd=cwd, mcp_servers=servers), REQUEST_SECONDS)
            ).session_id
        self.state.session_id = session_id
        self.reporter.emit(Event("session", session=session_id))
        response = await conn.prompt(session_id=session_id, prompt=[text_block(self.acp.prompt)])
        client.say_text()
        if response.usage is not None:
            u = response.usage
            self.state.tokens = Tokens(
                u.input_tokens, u.output_tokens, u.cached_read_tokens, u.cached_write_tokens
            )
            self.reporter.emit_progress(self.state.report(), self.state.tokens)
        failed = stop_outcome(response.stop_reason)
        if failed is not None:
            return Outcome(*failed)
        if self.state.denied and self.acp.tools is None:  # under spec.tools a refusal is reported, not fatal
            return Outcome(
                Reason.PermissionDenied,
                f"the agent asked for permission to run {', '.join(self.state.denied)} and was refused "
                "(spec.acpPermission)",
            )
        return Outcome()

    async def stop(
        self, conn: ClientSideConnection, work: asyncio.Future[Outcome], cause: tuple[str, str]
    ) -> Outcome:
        """session/cancel, then wait the grace period for the turn to end; the caller closes."""
        reason, message = cause
        self.reporter.say(message)
        if self.state.session_id is not None:
            with contextlib.suppress(Exception):
                await conn.cancel(session_id=self.state.session_id)
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(work), self.plan.grace_seconds)
            if not work.done():
                self.reporter.say(f"harness: the turn did not end within {self.plan.grace_seconds}s; closing")
        return Outcome(reason, message, stopped=True)


def build_mcp_servers(acp: AcpSessionPlan, env: Mapping[str, str]) -> list[SessionMcpServer]:
    """The run's MCP servers as the agent is to start them: each its gate, with the agent's variables the
    gate reads (its headers' secrets, the egress proxy), as values in the session, never in argv."""
    servers: list[SessionMcpServer] = [
        McpServerStdio(
            name=server.name,
            command=sys.executable,
            args=["-I", "-m", GATE_MODULE, *server.gate_args],
            env=[EnvVariable(name=n, value=env[n]) for n in (*server.env, *GATE_ENV) if n in env],
        )
        for server in acp.mcp_servers
    ]
    return servers


def describe_error(exc: BaseException) -> tuple[str, str]:
    """(reason, message) for an error of the conversation; never the agent's payloads."""
    if isinstance(exc, RequestError):
        failure = classify_error(None, str(exc))
        return failure.value, f"the agent answered with an error: {exc}"
    if isinstance(exc, ValidationError):
        return Failure.provider_error.value, "the agent sent an answer that is not valid ACP"
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return Failure.provider_error.value, f"the agent did not answer within {REQUEST_SECONDS:.0f}s"
    if isinstance(exc, (ConnectionError, EOFError, BrokenPipeError)):
        return Reason.ProviderFailed, "the agent closed the connection before the turn ended"
    return Reason.ProviderFailed, f"the ACP session failed: {type(exc).__name__}: {exc}"


def execute_acp(
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
    """Run one ACP attempt to its end and say what happened. Never raises for the agent's failures."""
    sink = stderr if stderr is not None else sys.stderr.buffer
    reporter = Reporter(plan, credentials, sink, on_event, events_to_log)
    if cancel is not None and cancel.is_set():
        return reporter.fail(Reason.Cancelled, "harness: cancelled before the agent started", EXIT_STOPPED)
    session = Session(
        plan, credentials, base_env if base_env is not None else os.environ, reporter, cancel, clock, spawn
    )
    skipped = _SkippedMessages(session.state, reporter)
    root = logging.getLogger()
    root.addHandler(skipped)
    try:
        outcome = asyncio.run(session.run())
    except SetupError as exc:
        return reporter.fail(exc.reason, exc.message)
    except Exception as exc:
        outcome = Outcome(*describe_error(exc))
    finally:
        root.removeHandler(skipped)
    result = finish(plan, session.state, outcome, session.exit_code, reporter)
    if result.succeeded and plan.session_paths:
        result.session = keep_session(session.session_files, reporter)
    if session.left_running:
        reporter.say("harness: the agent's processes did not end; its pod is to be deleted")
        mark_left_running(result)
    return reporter.done(result)


def finish(
    plan: AttemptPlan, state: SessionState, outcome: Outcome, exit_code: int | None, reporter: Reporter
) -> AttemptResult:
    report = drop_unusable_figures(drop_session_totals(plan, state.report(), reporter), reporter)
    usage = compute_usage(report, price_book(plan), plan.model_hint)
    report = with_plan_identity(plan, report)
    result = AttemptResult(
        plan.attempt,
        plan.provider,
        0,
        outcome.reason,
        outcome.message,
        report=report,
        usage=usage,
        agent_exit_code=exit_code,
        start_time=reporter.start,
    )
    if outcome.reason is not None:
        result.exit_code = stop_exit_code(outcome.reason) if outcome.stopped else EXIT_SETUP
        if not outcome.stopped:
            reporter.say(f"harness: {outcome.message}")
    else:
        keep_output(result, reporter.redactor.bytes((report.text or "").encode("utf-8")), plan)
    result.message = reporter.redactor.text(result.message)
    result.completion_time = utc_now()
    return result
