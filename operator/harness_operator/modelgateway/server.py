"""The model gateway's HTTP server: the vendors' APIs for the sandboxes, meters for the operator (I/O).

A request comes with an attempt's gateway token where the CLI puts its key. The gateway finds the
attempt's grant, refuses a token that is not live, reserves the request's worst case under the run's caps
(all its attempts together; clamping its output tokens to what they leave), forwards it to the vendor
with the real key in the token's place, passes the answer back as it comes and meters the usage the
vendor reported in it. Each model request of a run, answered or refused, leaves an audit record and,
when its run is traced, a span in the run's trace (records.py).
The operator reads an attempt's meter, and its run's (all its attempts together, which its caps bind), on
the admin port with its reader token.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from yarl import URL

from harness_operator.contract.model_access import (
    ModelAttemptGrant,
    ModelGrant,
    is_token_of,
    parse_model_token,
)
from harness_operator.contract.tracing import parse_traceparent
from harness_operator.modelgateway.fairness import InFlight, Limits, is_unsent
from harness_operator.modelgateway.grants import GrantWatch
from harness_operator.modelgateway.intake import (
    DEFAULT_MAX_REQUEST_BYTES,
    LookupBudget,
    Refusal,
    check_capped_body,
    check_encoding,
    check_raw_path,
    check_shape,
    check_size,
    parse_body,
)
from harness_operator.modelgateway.metering import (
    RequestUsage,
    StreamMeter,
    cost_of,
    estimate_input_tokens,
    find_prices,
    finish_reasons_of,
    fold_json_stream,
    usage_of,
)
from harness_operator.modelgateway.records import (
    ModelCall,
    Refused,
    build_audit_record,
    build_model_call_span,
)
from harness_operator.modelgateway.store import MeterKeys, MeterStore, Reservation, meter_keys, run_meter_key
from harness_operator.modelgateway.vendors import (
    CAP_STATUS,
    HOP_BY_HOP,
    NO_RETRY,
    Endpoint,
    Flavor,
    Vendor,
    is_key_refused,
    key_refused_message,
    split_route,
)
from harness_operator.telemetry import Traces

MAX_KEPT_ANSWER = 4 * 1024 * 1024  # a non-streamed answer is kept to be metered, up to this
READ_CHUNK = 64 * 1024
MIN_OUTPUT_TOKENS = 16  # an answer of fewer output tokens than this is not worth forwarding
# Reads of grants the watch has not delivered (a grant made a moment ago, or a made-up token's): the watch
# delivers a new grant within milliseconds, long before its sandbox's first request, so these are rare.
LOOKUPS_PER_SECOND, LOOKUP_BURST = 5.0, 20.0
# Answers that may refuse the key itself (vendors.is_key_refused): read whole before they are passed on.
KEY_REFUSAL_STATUSES = frozenset({400, 401, 403})
DROPPED_ANSWER_HEADERS = HOP_BY_HOP | {"content-length", "content-encoding"}
# One JSON line per run's model request (records.build_audit_record); __main__ sends it to stdout.
audit = logging.getLogger("harness.audit")


def build_request_counter(registry: CollectorRegistry) -> Counter:
    """The gateway's one metric (the chart's dashboard reads it)."""
    return Counter(
        "harness_model_gateway_requests",
        "Requests to the model gateway by namespace, vendor and verdict.",
        ["namespace", "vendor", "verdict"],
        registry=registry,
    )


@dataclass
class Gateway:
    grants: GrantWatch
    store: MeterStore
    keys: Mapping[str, str]  # vendor -> its key
    upstreams: Mapping[str, str]  # vendor -> base URL
    reader_token: str
    key_secrets: Mapping[str, str] = field(default_factory=dict)  # vendor -> its key's Secret, namespace/name
    session: aiohttp.ClientSession | None = None
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    limits: Limits = field(default_factory=Limits)
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    traces: Traces | None = None  # exports the spans of traced runs' requests (None: tracing is off)

    def __post_init__(self) -> None:
        self.requests = build_request_counter(self.registry)
        self.in_flight = InFlight(self.limits)
        self._limited_logged: dict[str, float] = {}  # namespace: when a 429 of its was last logged
        self.lookups = LookupBudget(LOOKUPS_PER_SECOND, LOOKUP_BURST)

    def count(self, grant: ModelGrant | None, vendor: Vendor, verdict: str) -> None:
        self.requests.labels(grant.namespace if grant else "-", vendor.name, verdict).inc()

    # --- the vendors' side --------------------------------------------------------------------------

    async def proxy(self, request: web.Request) -> web.StreamResponse:
        arrived = time.time_ns()
        # The raw path, as sent: what is checked is what is forwarded (request.path is decoded, and a URL
        # parser on the way out would normalise what it was not shown).
        route = split_route(request.raw_path.partition("?")[0])
        if route is None:
            return web.json_response(
                {"error": "unknown route: the gateway serves /anthropic, /openai, /gemini"}, status=404
            )
        vendor, raw = route
        path = check_raw_path(raw)
        if isinstance(path, Refusal):
            self.count(None, vendor, "refused")
            return _refuse(vendor, path)
        headers = {k.lower(): v for k, v in request.headers.items()}
        token = vendor.caller_token(headers, request.query)
        found = await self._attempt(token or "")
        if found == "busy":
            self.count(None, vendor, "unauthenticated")
            return _error(
                vendor,
                503,
                "harness model gateway: too many tokens of unknown grants at once; try again",
                "upstream",
            )
        if found is None or isinstance(found, str):
            self.count(None, vendor, "unauthenticated")
            return _error(
                vendor,
                401,
                "harness model gateway: this token is not live (its attempt has ended, "
                "or it was never issued)",
                "unauthorized",
                NO_RETRY,
            )
        grant, index, attempt = found
        call = ModelCall(
            arrived,
            vendor,
            grant,
            index,
            attempt,
            self.upstreams.get(vendor.name, vendor.default_upstream),
        )
        if attempt.trace_parent:
            call.trace = parse_traceparent(attempt.trace_parent)
            call.traced = (
                self.traces is not None
                and call.trace is not None
                and call.trace.sampled
                and self.traces.is_sampled(call.trace.trace_id)
            )
        try:
            response = await self._serve(request, call, path, headers)
            call.status = response.status
            return response
        finally:
            self._record(call)

    async def _serve(
        self, request: web.Request, call: ModelCall, path: str, headers: Mapping[str, str]
    ) -> web.StreamResponse:
        """A run's request (its token opened `call.attempt`): refused, or forwarded and metered."""
        vendor, grant, index, attempt = call.vendor, call.grant, call.index, call.attempt
        if attempt.vendor != vendor.name:
            self.count(grant, vendor, "refused")
            call.refused = Refused.wrong_vendor
            return _error(
                vendor,
                403,
                f"harness model gateway: this attempt is routed to {attempt.vendor}, not {vendor.name}",
                "unauthorized",
                NO_RETRY,
            )
        key = await asyncio.to_thread(self.grants.own_key, grant, attempt) if attempt.key_secret else None
        key = key or (None if attempt.key_secret else self.keys.get(vendor.name))
        if not key:
            self.count(grant, vendor, "refused")
            call.refused = Refused.no_key
            return _error(
                vendor,
                503,
                f"harness model gateway: the run's own key (Secret {attempt.key_secret}) is gone"
                if attempt.key_secret
                else f"harness model gateway: no key for {vendor.name} is configured "
                "(modelGateway.vendors in the chart)",
                "upstream",
            )
        endpoint = vendor.endpoint(request.method, path, None)
        if endpoint is None:
            self.count(grant, vendor, "refused")
            call.refused = Refused.not_forwarded
            return _error(
                vendor, 404, f"harness model gateway: {request.method} {path} is not forwarded", "not_found"
            )
        call.flavor = endpoint.flavor
        # A place in flight before the body is read or anything reserved: a request over a limit is
        # refused at once and costs next to nothing, and no tenant holds the whole upstream pool.
        slot = self.in_flight.enter(grant.namespace, grant.uid, index)
        if isinstance(slot, str):
            self.count(grant, vendor, "limited")
            call.refused = Refused.limits
            # Counted each (the metric); logged once a second a namespace, or a flood floods the log.
            now, last = time.monotonic(), self._limited_logged.get(grant.namespace, -1.0)
            if now - last >= 1.0:
                self._limited_logged[grant.namespace] = now
            return _error(vendor, 429, slot, "rate_limit", quiet=now - last < 1.0)
        try:
            body = await _read_body(request, self.max_request_bytes)
            document = None
            if not isinstance(body, Refusal) and endpoint.flavor is not None:
                document = _metered_body(endpoint, headers, body, _is_capped(grant))
            if isinstance(body, Refusal) or isinstance(document, Refusal):
                self.count(grant, vendor, "refused")
                refusal: Refusal = body if isinstance(body, Refusal) else document  # type: ignore[assignment]
                call.refused = Refused.too_large if refusal.status == 413 else Refused.bad_request
                return _refuse(vendor, refusal)
            held: Reservation | None = None
            meter = meter_keys(grant.uid, index)
            if document is not None:
                endpoint = vendor.endpoint(request.method, path, document) or endpoint
                call.model, call.stream = vendor.model(path, document), endpoint.streaming
                refused, held, changed = await self._reserve(endpoint, document, body, call, meter)
                if refused is not None:
                    self.count(grant, vendor, "capped")
                    return refused
                # Only what the gateway parsed (and reserved for) goes, never the bytes the caller sent.
                body = json.dumps(changed if changed is not None else document).encode()
            self.count(grant, vendor, "forwarded")
            return await self._forward(request, call, path, headers, key, body, endpoint, held, meter)
        finally:
            self.in_flight.leave(slot)

    def _record(self, call: ModelCall) -> None:
        """The request's span, when its run is traced here, and its audit record."""
        if not call.is_recorded:
            return
        call.ended_ns = time.time_ns()
        if call.traced:
            assert self.traces is not None and call.trace is not None
            self.traces.export(call.trace.trace_id, [build_model_call_span(call, _new_span_id())])
        if audit.isEnabledFor(logging.INFO):
            audit.info(json.dumps(build_audit_record(call)))

    async def _attempt(self, token: str) -> tuple[ModelGrant, str, ModelAttemptGrant] | str | None:
        """The grant, attempt number and attempt a token opens; None when it opens none; "busy" when its
        grant is not in the watch's cache and no read of the API server is left this second."""
        parsed = parse_model_token(token)
        if parsed is None:
            return None
        known = self.grants.grants.get(parsed[0])
        if known is not None and parsed[1] in known.attempts:
            grant: ModelGrant | None = known
        elif not self.lookups.take(time.monotonic()):
            return "busy"
        else:  # a blocking read of the API server: off the event loop
            grant = await asyncio.to_thread(self.grants.get, parsed[0], parsed[1])
        attempt = grant.attempts.get(parsed[1]) if grant else None
        if grant is None or attempt is None or not is_token_of(attempt, token):
            return None
        return grant, parsed[1], attempt

    async def _reserve(
        self,
        endpoint: Endpoint,
        document: dict[str, Any],
        body: bytes,
        call: ModelCall,
        meter: MeterKeys,
    ) -> tuple[web.Response | None, Reservation | None, dict[str, Any] | None]:
        """(refusal, reservation, the body to send when it changed). The caps are the run's (the grant's):
        they bind the sum of all its attempts' spend, kept in its run's meter."""
        vendor, grant, attempt, model = call.vendor, call.grant, call.attempt, call.model
        flavor = endpoint.flavor
        assert flavor is not None
        capped = grant.max_cost_usd is not None or grant.max_tokens is not None
        prices = find_prices(vendor, model, attempt, datetime.now(UTC))
        if prices is None and grant.max_cost_usd is not None:
            call.refused = Refused.unpriced
            return (
                _error(
                    vendor,
                    CAP_STATUS[vendor.name],
                    f"harness model gateway: model {model!r} has no "
                    "price, so the run's maxCostUSD cannot be held; give the definition a pricing "
                    "entry for it",
                    "cap",
                ),
                None,
                None,
            )
        input_tokens = estimate_input_tokens(body)
        requested = vendor.requested_output(flavor, document)
        held = await self.store.reserve(
            meter,
            grant.max_cost_usd,
            grant.max_tokens,
            prices.worst_input(input_tokens) if prices else 0.0,
            prices.output if prices else 0.0,
            input_tokens,
            requested,
            MIN_OUTPUT_TOKENS,
        )
        if not held.granted:
            call.refused = Refused.cap
            # The request's smallest worst case: its input at the dearest price and a minimal answer.
            worst = (prices.worst_input(input_tokens) + MIN_OUTPUT_TOKENS * prices.output) if prices else 0.0
            if grant.max_cost_usd is not None and held.spent + worst > grant.max_cost_usd:
                left = max(0.0, grant.max_cost_usd - held.spent)
                said = (
                    f"the run's maxCostUSD {grant.max_cost_usd} (all its attempts together; spent and in "
                    f"flight: {held.spent:.6f} USD) leaves {left:.6f} USD, below this request's worst case "
                    f"of {worst:.6f} USD (about {input_tokens} input tokens at the dearest price and "
                    f"{MIN_OUTPUT_TOKENS} output tokens): raise the cap (limits.maxCostUSD, or the "
                    "HarnessBudget's), or send a shorter input"
                )
            else:
                said = (
                    f"the run's maxTokens {grant.max_tokens} (all its attempts together) leaves less than "
                    f"this request's about {input_tokens} input tokens and {MIN_OUTPUT_TOKENS} output "
                    "tokens: raise limits.maxTokens"
                )
            return (
                _error(
                    vendor,
                    CAP_STATUS[vendor.name],
                    f"harness model gateway: {said}; the run stops here",
                    "cap",
                ),
                None,
                None,
            )
        call.reserved_usd = held.cost
        changed = None
        if capped and held.output_tokens is not None and held.output_tokens != requested:
            changed = vendor.clamp(flavor, document, held.output_tokens)
        if flavor == Flavor.openai_chat and endpoint.streaming:
            options = (changed or document).get("stream_options") or {}
            if not options.get("include_usage"):  # else a chat stream reports no usage at all
                changed = {**(changed or document), "stream_options": {**options, "include_usage": True}}
        return None, held, changed

    async def _forward(
        self,
        request: web.Request,
        call: ModelCall,
        path: str,
        headers: Mapping[str, str],
        key: str,
        body: bytes,
        endpoint: Endpoint,
        held: Reservation | None,
        meter: MeterKeys,
    ) -> web.StreamResponse:
        assert self.session is not None
        vendor, attempt = call.vendor, call.attempt
        query = [(k, v) for k, v in request.query.items() if k != "key"]
        # encoded=True: the checked path goes as it is (it has nothing to encode or normalise).
        url = URL(call.upstream.rstrip("/") + path, encoded=True)
        flavor = endpoint.flavor
        stream_meter = StreamMeter(flavor) if flavor is not None and endpoint.streaming else None
        kept = bytearray()
        finished = settled = False
        reached = True  # whether the request went to the vendor (an error before it was sent: it did not)
        response: web.StreamResponse | None = None

        async def settle() -> None:
            nonlocal settled
            if settled or held is None or flavor is None:
                return
            settled = True
            usage: RequestUsage | None = None
            document: Any = None
            if stream_meter is not None and stream_meter.document is not None and not stream_meter.overflowed:
                document = stream_meter.document
                usage = usage_of(vendor, flavor, document)
            elif kept:
                document = _json(bytes(kept))
                usage = usage_of(vendor, flavor, document) or fold_json_stream(vendor, flavor, bytes(kept))
            call.usage, call.cost_usd = await self._settle(
                vendor, held, usage, attempt, meter, finished, response, reached
            )
            if call.traced:
                call.finish_reasons = finish_reasons_of(flavor, document)

        try:
            async with self.session.request(
                request.method, url, params=query, headers=vendor.upstream_headers(headers, key), data=body
            ) as upstream:
                if upstream.status in KEY_REFUSAL_STATUSES:
                    answer = await _read_answer(upstream, MAX_KEPT_ANSWER)
                    if is_key_refused(vendor, upstream.status, answer):
                        finished = True
                        call.refused = Refused.key_refused
                        response = self._key_refused(vendor, upstream, answer, attempt)
                        return response
                    kept += answer
                response = web.StreamResponse(status=upstream.status)
                for name, value in upstream.headers.items():
                    if name.lower() not in DROPPED_ANSWER_HEADERS:
                        response.headers[name] = value
                await response.prepare(request)
                if kept:
                    await response.write(bytes(kept))
                async for chunk in upstream.content.iter_any():
                    if call.first_chunk_ns is None:
                        call.first_chunk_ns = time.time_ns()
                    if stream_meter is not None:
                        stream_meter.feed(chunk)
                    elif flavor is not None and len(kept) < MAX_KEPT_ANSWER:
                        kept += chunk
                    await response.write(chunk)
                finished = True
                await settle()  # before the caller sees the end: a meter read after the answer counts it
                await response.write_eof()
        except (TimeoutError, aiohttp.ClientError) as exc:
            reached = response is not None or not is_unsent(exc)
            if response is None:
                return _error(
                    vendor, 502, f"harness model gateway: the vendor did not answer: {exc}", "upstream"
                )
        except ConnectionResetError:  # the caller went away mid-answer
            pass
        finally:
            call.cut_short = response is not None and not finished
            await settle()
        return response  # type: ignore[return-value]

    def _key_refused(
        self, vendor: Vendor, upstream: aiohttp.ClientResponse, answer: bytes, attempt: ModelAttemptGrant
    ) -> web.Response:
        """The answer to a request whose key the vendor refused: final for the CLI (NO_RETRY). The
        platform's key gets the gateway's own error naming its Secret (the team cannot fix it); a run's
        own key, the vendor's answer."""
        if attempt.key_secret:
            headers = {k: v for k, v in upstream.headers.items() if k.lower() not in DROPPED_ANSWER_HEADERS}
            return web.Response(status=upstream.status, body=answer, headers={**headers, **NO_RETRY})
        message = key_refused_message(vendor, upstream.status, self.key_secrets.get(vendor.name))
        return _error(vendor, upstream.status, message, "unauthorized", NO_RETRY)

    async def _settle(
        self,
        vendor: Vendor,
        held: Reservation,
        usage: RequestUsage | None,
        attempt: ModelAttemptGrant,
        meter: MeterKeys,
        finished: bool,
        response: web.StreamResponse | None,
        reached: bool,
    ) -> tuple[RequestUsage, float | None]:
        """Count what the answer says it used; the usage and cost counted are returned. An answer cut
        short, or one that said nothing of its usage while it succeeded, is billed its worst case held; a
        refused one (an error status) nothing, nor one that never reached the vendor (no connection, none
        free in the pool)."""
        ok = response is not None and response.status < 400
        cost: float | None
        if not reached:
            usage, cost = RequestUsage(model=None), 0.0
        elif usage is not None and (finished or not ok):
            cost = cost_of(vendor, usage, attempt, datetime.now(UTC))
        elif ok or not finished:  # a worst case of nothing is a model without a price: unknown
            usage, cost = RequestUsage(model=None), held.cost or None
        else:
            usage, cost = RequestUsage(model=None), 0.0
        await asyncio.shield(self.store.settle(meter, held, usage, cost))
        return usage, cost

    # --- the operator's side ------------------------------------------------------------------------

    async def read_meter(self, request: web.Request) -> web.Response:
        bearer = request.headers.get("Authorization", "")
        if not hmac.compare_digest(bearer.encode(), f"Bearer {self.reader_token}".encode()):
            return web.json_response({"error": "unauthorized"}, status=401)
        uid, attempt = request.match_info["uid"], request.match_info.get("attempt")
        key = run_meter_key(uid) if attempt is None else meter_keys(uid, attempt).attempt
        meter = await self.store.read(key)
        return web.json_response(meter.model_dump(by_alias=True, mode="json"))

    async def ready(self, request: web.Request) -> web.Response:
        try:
            healthy = self.grants.synced.is_set() and await self.store.ping()
        except Exception:  # Redis down: not ready
            healthy = False
        return web.Response(text="ok\n" if healthy else "not ready\n", status=200 if healthy else 503)

    async def alive(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def _new_span_id() -> str:
    """A random span id (nobody else names a request's span), never all zeros (W3C's invalid id)."""
    return f"{int.from_bytes(os.urandom(8)) or 1:016x}"


def _json(body: bytes) -> Any:
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


async def _read_body(request: web.Request, limit: int) -> bytes | Refusal:
    """The request's body, read up to `limit` bytes: a longer one is refused before more of it is held."""
    if request.content_length is not None and (refusal := check_size(request.content_length, limit)):
        return refusal
    body = bytearray()
    async for chunk in request.content.iter_chunked(READ_CHUNK):
        body += chunk
        if len(body) > limit:
            return check_size(len(body), limit, whole=False) or Refusal(413, "", "too_large")
    return bytes(body)


async def _read_answer(upstream: aiohttp.ClientResponse, limit: int) -> bytes:
    """The vendor's answer up to `limit` bytes (an error's is a few hundred); the rest is streamed on."""
    answer = bytearray()
    while len(answer) < limit and (chunk := await upstream.content.read(limit - len(answer))):
        answer += chunk
    return bytes(answer)


def _metered_body(
    endpoint: Endpoint, headers: Mapping[str, str], body: bytes, capped: bool
) -> dict[str, Any] | Refusal:
    """The JSON object a metered request sends, or why it is refused: compressed, shaped to take memory,
    unparsable, or (under a cap) asking for what its worst case cannot hold."""
    refusal = check_encoding(headers) or check_shape(body)
    if refusal is not None:
        return refusal
    document = parse_body(body)
    if isinstance(document, Refusal) or not capped:
        return document
    assert endpoint.flavor is not None
    why = check_capped_body(endpoint.flavor, document)
    return document if why is None else Refusal(400, why, "bad_request")


def _is_capped(grant: ModelGrant) -> bool:
    """Whether the run's caps hold the request."""
    return grant.max_cost_usd is not None or grant.max_tokens is not None


def _refuse(vendor: Vendor, refusal: Refusal) -> web.Response:
    return _error(vendor, refusal.status, refusal.message, refusal.kind)


def _error(
    vendor: Vendor,
    status: int,
    message: str,
    kind: str,
    headers: Mapping[str, str] | None = None,
    quiet: bool = False,
) -> web.Response:
    if not quiet:
        print(
            json.dumps({"msg": "refused", "vendor": vendor.name, "status": status, "reason": message}),
            file=sys.stderr,
            flush=True,
        )
    code, body = vendor.error(status, message, kind)
    return web.Response(status=code, body=body, content_type="application/json", headers=headers)


def build_apps(gateway: Gateway) -> tuple[web.Application, web.Application]:
    """The vendors' app (the sandboxes') and the admin app (meters, readiness, metrics)."""
    public = web.Application(client_max_size=gateway.max_request_bytes)
    public.router.add_route("*", "/{tail:.*}", gateway.proxy)
    admin = web.Application()
    admin.router.add_get("/meters/{uid}", gateway.read_meter)  # the run's: all its attempts together
    admin.router.add_get("/meters/{uid}/{attempt}", gateway.read_meter)
    admin.router.add_get("/readyz", gateway.ready)
    admin.router.add_get("/healthz", gateway.alive)
    admin.router.add_get("/metrics", gateway.metrics)
    return public, admin
