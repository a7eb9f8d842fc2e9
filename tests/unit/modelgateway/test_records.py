"""What the model gateway records of each request of a run (records.py, through server.py): the real
gateway (its aiohttp app, its meters in a real Redis) in front of the vendor stubs, its spans caught by
the OpenTelemetry SDK's in-memory exporter, its audit records by a handler on `harness.audit`. Each span
joins its attempt's span in the run's trace and says what the meter counted; nothing it or an audit
record carries is a token, a key or the prompt."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
import redis
from aiohttp import web
from kubernetes import client
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from tests.lib import processes
from tests.stubs.anthropic import AnthropicStub
from tests.stubs.gemini import GeminiStub
from tests.stubs.openai import OpenAIStub

from harness_operator.contract.model_access import (
    MeteredUsage,
    ModelAttemptGrant,
    ModelGrant,
    build_model_token,
    token_sha256,
)
from harness_operator.contract.tracing import build_traceparent, compute_attempt_span_id, compute_trace_id
from harness_operator.modelgateway.grants import GrantWatch
from harness_operator.modelgateway.server import Gateway, build_apps
from harness_operator.modelgateway.store import MeterStore, meter_key
from harness_operator.telemetry import Traces

KEYS = {
    "anthropic": "sk-ant-vendor-key-7c1e",
    "openai": "sk-openai-vendor-key-7c1e",
    "gemini": "g-vendor-key-7c1e",
}
OPERATOR_KEY = "operator-key"
PROMPT = "the prompt nobody may read 5d2b " * 40
AUDIT_KEYS = {
    "audit", "namespace", "run", "runUID", "attempt", "vendor", "model", "status", "inputTokens",
    "outputTokens", "cacheReadTokens", "cacheWriteTokens", "costUSD", "refused", "traceID", "time",
}  # fmt: skip


@dataclass(frozen=True)
class Shape:
    """A vendor API's request: the gateway path, the body, the header the token goes in, and what the
    span says of it."""

    name: str
    vendor: str
    path: str
    body: dict[str, Any]
    auth: str
    span_name: str
    provider: str
    finish: str

    def headers(self, token: str) -> dict[str, str]:
        return {"authorization": f"Bearer {token}"} if self.auth == "authorization" else {self.auth: token}


MESSAGES = [{"role": "user", "content": PROMPT}]
GEMINI_BODY = {
    "contents": [{"role": "user", "parts": [{"text": PROMPT}]}],
    "generationConfig": {"maxOutputTokens": 256},
}
SHAPES = [
    Shape("anthropic", "anthropic", "/anthropic/v1/messages",
          {"model": "claude-sonnet-4-5", "max_tokens": 256, "messages": MESSAGES}, "x-api-key",
          "chat claude-sonnet-4-5", "anthropic", "end_turn"),
    Shape("openai-chat", "openai", "/openai/v1/chat/completions",
          {"model": "gpt-4.1", "max_tokens": 256, "messages": MESSAGES}, "authorization",
          "chat gpt-4.1", "openai", "stop"),
    Shape("openai-responses", "openai", "/openai/v1/responses",
          {"model": "gpt-4.1", "max_output_tokens": 256, "input": PROMPT}, "authorization",
          "chat gpt-4.1", "openai", "completed"),
    Shape("gemini", "gemini", "/gemini/v1beta/models/gemini-2.5-flash:generateContent", GEMINI_BODY,
          "x-goog-api-key", "generate_content gemini-2.5-flash", "gcp.gemini", "STOP"),
]  # fmt: skip


def streamed(shape: Shape) -> Shape:
    if shape.vendor == "gemini":
        path = shape.path.replace(":generateContent", ":streamGenerateContent") + "?alt=sse"
        return Shape(**{**shape.__dict__, "name": shape.name + "-stream", "path": path})
    body = {**shape.body, "stream": True}
    return Shape(**{**shape.__dict__, "name": shape.name + "-stream", "body": body})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if shutil.which("redis-server") is None:
        pytest.fail(
            "the model gateway's store is Debian's Redis: apt-get install redis-server (.ci/run does)"
        )
    port = free_port()
    proc = processes.start(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path_factory.mktemp("redis"))],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=port).ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        processes.stop(proc)


@pytest.fixture(scope="module")
def stubs() -> Iterator[dict[str, str]]:
    servers = {
        "anthropic": AnthropicStub(mode="ok"),
        "openai": OpenAIStub(mode="ok"),
        "gemini": GeminiStub(mode="ok"),
    }
    for server in servers.values():
        server.start()
    try:
        yield {vendor: server.base_url for vendor, server in servers.items()}
    finally:
        for server in servers.values():
            server.stop()


@pytest.fixture
def audit(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="harness.audit")
    return caplog


def audit_records(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "harness.audit"]


@dataclass
class Run:
    """A run of one attempt, its grant, and its token."""

    uid: str
    grant: ModelGrant
    token: str

    @property
    def trace_id(self) -> str:
        return compute_trace_id(self.uid)

    @property
    def attempt_span(self) -> str:
        return compute_attempt_span_id(self.uid, 1)


def make_run(name: str, vendor: str, *, traced: bool = True, sampled: bool = True, **caps: Any) -> Run:
    uid = f"uid-{name}-{time.time_ns()}"  # a meter of its own, whatever an earlier test left in Redis
    token = build_model_token(OPERATOR_KEY, f"grant-{name}", uid, 1)
    parent = build_traceparent(compute_trace_id(uid), compute_attempt_span_id(uid, 1), sampled)
    attempt = ModelAttemptGrant(
        token_sha256=token_sha256(token), vendor=vendor, trace_parent=parent if traced else None
    )
    grant = ModelGrant.model_validate(
        {"namespace": "team-a", "run": name, "uid": uid, "attempts": {"1": attempt}, **caps}
    )
    return Run(uid, grant, token)


@dataclass
class Answer:
    status: int
    body: bytes
    meter: MeteredUsage


async def _send(
    redis_url: str, stubs: dict[str, str], traces: Traces | None, run: Run, shape: Shape
) -> Answer:
    """One request through a gateway of its own, and the attempt's meter after it."""
    grants = GrantWatch(client.CoreV1Api(), "harness-system")  # not started: its cache is the grants
    grants.grants[f"grant-{run.grant.run}"] = run.grant
    store = MeterStore(redis_url)
    gateway = Gateway(
        grants=grants, store=store, keys=KEYS, upstreams=stubs, reader_token="unused", traces=traces
    )
    gateway.session = aiohttp.ClientSession()
    runner = web.AppRunner(build_apps(gateway)[0], access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"http://127.0.0.1:{port}{shape.path}", json=shape.body, headers=shape.headers(run.token)
            ) as response,
        ):
            body = await response.read()
        meter = await store.read(meter_key(run.uid, "1"))
        return Answer(response.status, body, meter)
    finally:
        await runner.cleanup()
        await gateway.session.close()
        await store.redis.aclose()


def send(redis_url: str, stubs: dict[str, str], traces: Traces | None, run: Run, shape: Shape) -> Answer:
    return asyncio.run(_send(redis_url, stubs, traces, run, shape))


def in_memory() -> tuple[Traces, InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    return Traces("harness-model-gateway", 1.0, SimpleSpanProcessor(memory)), memory


def assert_no_secret(values: list[Any], run: Run) -> None:
    secrets = [run.token, *KEYS.values(), PROMPT.split(" 5d2b")[0], "5d2b"]
    for value in values:
        for secret in secrets:
            assert secret not in str(value), (secret, value)


@pytest.mark.parametrize("shape", [*SHAPES, *map(streamed, SHAPES)], ids=lambda s: s.name)
def test_a_request_is_one_span_in_its_runs_trace_with_the_meters_figures(redis_url, stubs, audit, shape):
    traces, memory = in_memory()
    run = make_run(shape.name, shape.vendor, maxCostUSD=5.0)
    before = time.time_ns()
    answer = send(redis_url, stubs, traces, run, shape)
    after = time.time_ns()
    assert answer.status == 200, answer.body
    meter = answer.meter
    assert meter.requests == 1 and meter.output_tokens > 0 and meter.cache_read_tokens > 0

    (span,) = memory.get_finished_spans()
    assert isinstance(span, ReadableSpan) and span.parent is not None and span.context is not None
    assert f"{span.context.trace_id:032x}" == run.trace_id
    assert f"{span.parent.span_id:016x}" == run.attempt_span
    assert span.context.span_id != 0 and f"{span.context.span_id:016x}" != run.attempt_span
    assert span.name == shape.span_name and span.kind == SpanKind.CLIENT
    assert span.status.status_code == StatusCode.UNSET
    assert span.start_time is not None and span.end_time is not None
    assert before <= span.start_time <= span.end_time <= after
    attributes = dict(span.attributes or {})
    operation, model = shape.span_name.split(" ")
    assert attributes["gen_ai.operation.name"] == operation
    assert attributes["gen_ai.request.model"] == model
    assert str(attributes["gen_ai.response.model"]).startswith(model)
    assert attributes["gen_ai.provider.name"] == attributes["gen_ai.system"] == shape.provider
    assert attributes["gen_ai.request.stream"] is (shape.name.endswith("-stream"))
    # The conventions' input counts the cache reads and writes, which the meter counts apart.
    cached = meter.cache_read_tokens + meter.cache_write_tokens
    assert attributes["gen_ai.usage.input_tokens"] == meter.input_tokens + cached
    assert attributes["gen_ai.usage.output_tokens"] == meter.output_tokens
    assert attributes["gen_ai.usage.cache_read.input_tokens"] == meter.cache_read_tokens
    assert attributes["gen_ai.usage.cache_creation.input_tokens"] == meter.cache_write_tokens
    assert attributes["harness.cost_usd"] == pytest.approx(meter.cost_usd) and meter.cost_usd > 0
    reserved = attributes["harness.reserved_usd"]
    assert isinstance(reserved, float) and reserved > 0
    assert attributes["gen_ai.response.finish_reasons"] == (shape.finish,)
    assert attributes["http.response.status_code"] == 200
    assert attributes["server.address"] == "127.0.0.1"
    assert attributes["server.port"] == int(stubs[shape.vendor].rsplit(":", 1)[1].split("/")[0])
    assert (attributes["harness.namespace"], attributes["harness.run"], attributes["harness.attempt"]) == (
        "team-a",
        shape.name,
        1,
    )
    assert "harness.refused" not in attributes and "error.type" not in attributes
    if shape.name.endswith("-stream"):
        first_chunk = attributes["gen_ai.response.time_to_first_chunk"]
        assert isinstance(first_chunk, float) and 0 < first_chunk < (after - before) / 1e9
    assert_no_secret([*attributes.values(), span.name], run)

    (record,) = audit_records(audit)
    assert set(record) == AUDIT_KEYS
    assert record["audit"] == "model-request" and record["refused"] is None and record["status"] == 200
    assert (record["namespace"], record["run"], record["runUID"], record["attempt"]) == (
        "team-a",
        shape.name,
        run.uid,
        1,
    )
    assert record["vendor"] == shape.vendor and str(record["model"]).startswith(model)
    assert (record["inputTokens"], record["outputTokens"]) == (meter.input_tokens, meter.output_tokens)
    assert (record["cacheReadTokens"], record["cacheWriteTokens"]) == (
        meter.cache_read_tokens,
        meter.cache_write_tokens,
    )
    assert record["costUSD"] == pytest.approx(meter.cost_usd)
    assert record["traceID"] == run.trace_id and record["time"].endswith("Z")
    assert_no_secret(list(record.values()), run)


@pytest.mark.parametrize(
    ("why", "caps", "routed", "status"),
    [
        ("cap", {"maxCostUSD": 1e-9}, "anthropic", 400),
        ("wrong-vendor", {}, "openai", 403),
    ],
)
def test_a_refused_request_is_an_error_span_and_an_audit_record_of_why(
    redis_url, stubs, audit, why, caps, routed, status
):
    traces, memory = in_memory()
    run = make_run(f"refused-{why}", routed, **caps)
    answer = send(redis_url, stubs, traces, run, SHAPES[0])
    assert answer.status == status
    assert answer.meter.requests == 0 and answer.meter.cost_usd == 0

    (span,) = memory.get_finished_spans()
    assert span.parent is not None and f"{span.parent.span_id:016x}" == run.attempt_span
    assert span.status.status_code == StatusCode.ERROR and why in str(span.status.description)
    attributes = dict(span.attributes or {})
    assert attributes["harness.refused"] == attributes["error.type"] == why
    assert attributes["http.response.status_code"] == status
    assert "gen_ai.usage.input_tokens" not in attributes and "harness.cost_usd" not in attributes
    assert_no_secret(list(attributes.values()), run)

    (record,) = audit_records(audit)
    assert set(record) == AUDIT_KEYS
    assert (record["refused"], record["status"], record["costUSD"]) == (why, status, 0.0)
    assert record["inputTokens"] == record["outputTokens"] == 0
    assert_no_secret(list(record.values()), run)


@pytest.mark.parametrize(
    ("traced", "sampled", "tracing"),
    [(False, True, True), (True, False, True), (True, True, False)],
    ids=["no-trace-parent", "not-sampled", "tracing-off"],
)
def test_no_span_unless_the_run_is_traced_and_tracing_is_on_but_always_an_audit_record(
    redis_url, stubs, audit, traced, sampled, tracing
):
    traces, memory = in_memory()
    run = make_run("untraced", "anthropic", traced=traced, sampled=sampled)
    answer = send(redis_url, stubs, traces if tracing else None, run, SHAPES[0])
    assert answer.status == 200
    assert memory.get_finished_spans() == ()
    (record,) = audit_records(audit)
    assert record["traceID"] == (run.trace_id if traced else None)
    assert (record["inputTokens"], record["outputTokens"]) == (
        answer.meter.input_tokens,
        answer.meter.output_tokens,
    )


def test_an_answered_free_request_is_not_recorded(redis_url, stubs, audit):
    traces, memory = in_memory()
    run = make_run("free", "anthropic")
    count = Shape(**{**SHAPES[0].__dict__, "path": "/anthropic/v1/messages/count_tokens"})
    assert send(redis_url, stubs, traces, run, count).status == 200
    assert memory.get_finished_spans() == () and audit_records(audit) == []
