"""What the model gateway records of each model request of a run (pure): its span in the run's trace, as
the OpenTelemetry GenAI semantic conventions name an inference call (https://opentelemetry.io/docs/specs/
semconv/gen-ai/), and its audit record, one JSON line. Both are built from the same ModelCall, whose usage
is the one the meter settled, so what a trace and an audit record say equals what the run is billed.

Neither carries a secret or a prompt: no header, body, key or token; the model a request names is cut to
MAX_MODEL_CHARS (the sandbox writes it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from harness_operator.contract.model_access import ModelAttemptGrant, ModelGrant
from harness_operator.contract.tracing import CLIENT, AttributeValue, SpanRecord, TraceParent
from harness_operator.modelgateway.metering import NO_TOKENS, RequestUsage
from harness_operator.modelgateway.vendors import Flavor, Vendor

MAX_MODEL_CHARS = 200
# gen_ai.provider.name (and the deprecated gen_ai.system) as the conventions spell our vendors.
PROVIDERS = {"anthropic": "anthropic", "openai": "openai", "gemini": "gcp.gemini"}
OPENAI_API_TYPES = {Flavor.openai_chat: "chat_completions", Flavor.openai_responses: "responses"}


class Refused(StrEnum):
    """Why the gateway refused a run's request (a closed set: the audit's `refused`, the span's
    harness.refused and error.type)."""

    wrong_vendor = "wrong-vendor"  # the token's attempt is routed to another vendor
    no_key = "no-key"  # no key for the vendor, or the run's own key's Secret is gone
    not_forwarded = "not-forwarded"  # an endpoint the gateway does not forward
    limits = "limits"  # over an in-flight limit (429)
    too_large = "too-large"  # a body above the gateway's limit
    bad_request = "bad-request"  # a path, encoding, shape or (under a cap) field the gateway refuses
    unpriced = "unpriced"  # a model without a price under maxCostUSD
    cap = "cap"  # the run's caps leave less than the request's worst case
    key_refused = "key-refused"  # the vendor refused the key


@dataclass(slots=True)
class ModelCall:
    """What the gateway learned of one request of a run's attempt while it served it. Times are
    nanoseconds since the epoch."""

    arrived_ns: int
    vendor: Vendor
    grant: ModelGrant
    index: str  # the attempt's number
    attempt: ModelAttemptGrant
    upstream: str  # the vendor's base URL
    trace: TraceParent | None = None  # the attempt's span, when its run is traced
    traced: bool = False  # whether this gateway exports the request's span
    flavor: Flavor | None = None  # None: not a metered endpoint (or not known yet)
    model: str | None = None  # as the request names it
    stream: bool = False
    reserved_usd: float | None = None  # the worst case held for it
    status: int | None = None  # the HTTP status answered
    refused: Refused | None = None
    usage: RequestUsage | None = None  # as settled in the meter (None: nothing settled)
    cost_usd: float | None = None  # as settled (None: unpriced)
    finish_reasons: tuple[str, ...] = ()
    first_chunk_ns: int | None = None
    cut_short: bool = False  # the answer began and did not end
    ended_ns: int = 0

    @property
    def is_recorded(self) -> bool:
        """A model request (a metered endpoint's) or any refusal; an answered free request (counting
        tokens, listing models) is neither billed nor a model call."""
        return self.flavor is not None or self.refused is not None

    @property
    def billed_model(self) -> str | None:
        """The model the answer came from, else the one asked for."""
        model = self.usage.model if self.usage is not None and self.usage.model else self.model
        return model[:MAX_MODEL_CHARS] if model else None


def _failure(call: ModelCall) -> tuple[str, str] | None:
    """(error.type, status description) of a request that failed, or None."""
    if call.refused is not None:
        return call.refused.value, f"refused by the gateway: {call.refused.value}"
    if call.status is not None and call.status >= 400:
        return str(call.status), f"HTTP {call.status}"
    if call.cut_short:
        return "cut_short", "the answer was cut short"
    return None


def build_model_call_span(call: ModelCall, span_id: str) -> SpanRecord:
    """The request's span (kind CLIENT: the gateway calls the vendor), a child of its attempt's span, from
    its arrival to the end of its answer. gen_ai.usage.input_tokens counts the cache reads and writes (the
    conventions' total), which the meter counts apart."""
    assert call.trace is not None
    operation = "generate_content" if call.vendor.name == "gemini" else "chat"
    provider = PROVIDERS.get(call.vendor.name, call.vendor.name)
    upstream = urlsplit(call.upstream)
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": provider,
        "gen_ai.system": provider,
        "gen_ai.request.stream": call.stream,
        "server.address": upstream.hostname or "",
        "server.port": upstream.port or (443 if upstream.scheme == "https" else 80),
        "harness.namespace": call.grant.namespace,
        "harness.run": call.grant.run,
        "harness.attempt": int(call.index),
    }
    model = call.model[:MAX_MODEL_CHARS] if call.model else None
    if model:
        attributes["gen_ai.request.model"] = model
    api_type = OPENAI_API_TYPES.get(call.flavor) if call.flavor is not None else None
    if api_type is not None:
        attributes["openai.api.type"] = api_type
    if call.status is not None:
        attributes["http.response.status_code"] = call.status
    if call.reserved_usd is not None:
        attributes["harness.reserved_usd"] = call.reserved_usd
    if call.usage is not None:
        tokens = call.usage.tokens
        cache_read, cache_write = tokens.cache_read or 0, tokens.cache_write or 0
        attributes["gen_ai.usage.input_tokens"] = (tokens.input or 0) + cache_read + cache_write
        attributes["gen_ai.usage.output_tokens"] = tokens.output or 0
        attributes["gen_ai.usage.cache_read.input_tokens"] = cache_read
        attributes["gen_ai.usage.cache_creation.input_tokens"] = cache_write
        if call.usage.model:
            attributes["gen_ai.response.model"] = call.usage.model[:MAX_MODEL_CHARS]
        if call.cost_usd is not None:
            attributes["harness.cost_usd"] = call.cost_usd
    if call.finish_reasons:
        attributes["gen_ai.response.finish_reasons"] = list(call.finish_reasons)
    if call.stream and call.first_chunk_ns is not None:
        attributes["gen_ai.response.time_to_first_chunk"] = (call.first_chunk_ns - call.arrived_ns) / 1e9
    error = _failure(call)
    if call.refused is not None:
        attributes["harness.refused"] = call.refused.value
    if error is not None:
        attributes["error.type"] = error[0]
    return SpanRecord(
        name=f"{operation} {model}" if model else operation,
        span_id=span_id,
        parent_id=call.trace.span_id,
        start_ns=call.arrived_ns,
        end_ns=call.ended_ns,
        attributes=attributes,
        error=None if error is None else error[1],
        kind=CLIENT,
    )


def build_audit_record(call: ModelCall) -> dict[str, Any]:
    """The request's audit record: who (the run), what (vendor, model), the answer's status, what the meter
    counted for it (tokens as the run's status counts them, input without the cache) and why it was
    refused; the run's trace id when it is traced. A fixed set of keys."""
    tokens = call.usage.tokens if call.usage is not None else NO_TOKENS
    ended = datetime.fromtimestamp(call.ended_ns / 1e9, UTC)
    return {
        "audit": "model-request",
        "namespace": call.grant.namespace,
        "run": call.grant.run,
        "runUID": call.grant.uid,
        "attempt": int(call.index),
        "vendor": call.vendor.name,
        "model": call.billed_model,
        "status": call.status,
        "inputTokens": tokens.input or 0,
        "outputTokens": tokens.output or 0,
        "cacheReadTokens": tokens.cache_read or 0,
        "cacheWriteTokens": tokens.cache_write or 0,
        "costUSD": call.cost_usd if call.usage is not None else 0.0,
        "refused": None if call.refused is None else call.refused.value,
        "traceID": None if call.trace is None else call.trace.trace_id,
        "time": ended.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
    }
