"""Usage and price of one request, from the vendor's own answer (pure).

genai-prices' `extract_usage` reads each vendor's usage shape; a stream is first folded into the one
document that shape describes: Anthropic's input and cache tokens from `message_start` with the
cumulative output of the last `message_delta` (never summed twice) and its stop reason, OpenAI's final
`usage` (a Responses stream's `response.completed`, a Chat Completions stream's last chunk, with the
finish reasons of the chunks before it), Gemini's last `usageMetadata`.
Token counts are kept as the run's status counts them: input without the cache reads and writes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

import genai_prices
from genai_prices import types

from harness_operator.api.v1alpha1 import ModelPricing
from harness_operator.contract.model_access import ModelAttemptGrant
from harness_operator.contract.pricing import PriceBook
from harness_operator.contract.usage import Tokens
from harness_operator.core.plan.pricing import PRICE_TABLE, find_vendor_table
from harness_operator.modelgateway.vendors import Flavor, Vendor

# A worst case needs the input's token count before the vendor has counted it: tokenizers average about
# 4 bytes of English or code a token, so bytes / 3 is a safe estimate for text (a request of rare
# scripts can have more tokens; its cost is then settled above its reservation, by that much only).
BYTES_PER_TOKEN = 3
# An event of a stream is kept until its end arrives, up to this: a stream's events are small (a delta,
# the usage), so a longer one is dropped rather than held in memory.
MAX_EVENT_BYTES = 4 * 1024 * 1024


# What a request billed nothing for counts: every figure known, each 0.
NO_TOKENS = Tokens(0, 0, 0, 0)


@dataclass(frozen=True)
class RequestUsage:
    """One request's model and tokens, as its vendor's answer says them (each count known)."""

    model: str | None
    tokens: Tokens = NO_TOKENS


def usage_of(vendor: Vendor, flavor: Flavor, document: Any) -> RequestUsage | None:
    """The usage a response document reports, or None when it reports none."""
    if not isinstance(document, dict):
        return None
    try:  # the provider's extractor: the usage without the model lookup (an unpriced model has usage too)
        model, usage = _provider(vendor).extract_usage(document, api_flavor=flavor.api_flavor)
    except (ValueError, KeyError, TypeError, LookupError):  # no usage in it, or not this shape
        return None
    cache_read, cache_write = int(usage.cache_read_tokens or 0), int(usage.cache_write_tokens or 0)
    tokens = Tokens(
        input=max(int(usage.input_tokens or 0) - cache_read - cache_write, 0),
        output=int(usage.output_tokens or 0),
        cache_read=cache_read,
        cache_write=cache_write,
    )
    return RequestUsage(model=_model_field(document) or model, tokens=tokens)


@cache
def _provider(vendor: Vendor) -> types.Provider:
    snapshot = genai_prices.data_snapshot.get_snapshot()
    return next(p for p in snapshot.providers if p.id == vendor.provider_id)


def _model_field(document: dict[str, Any]) -> str | None:
    value = document.get("model") or document.get("modelVersion")
    return value if isinstance(value, str) else None


class StreamMeter:
    """Folds a server-sent-event stream into the usage document its vendor's shape describes. Fed the
    bytes as they pass; events may be split anywhere."""

    def __init__(self, flavor: Flavor) -> None:
        self.flavor = flavor
        self.buffer = b""
        self.document: dict[str, Any] | None = None
        self.completed = False
        self.overflowed = False
        self.finishes: list[Any] = []  # a Chat Completions stream's finish reasons, before its usage

    def feed(self, chunk: bytes) -> None:
        self.buffer += chunk
        while True:
            cut = _event_end(self.buffer)
            if cut is None:
                break
            event, self.buffer = self.buffer[: cut[0]], self.buffer[cut[1] :]
            self._event(event)
        if len(self.buffer) > MAX_EVENT_BYTES:  # no event is this long: not kept (its usage is lost, so
            self.buffer, self.overflowed = b"", True  # the request is billed its worst case)

    def _event(self, raw: bytes) -> None:
        data = b"\n".join(
            line[5:].lstrip(b" ")
            for line in raw.replace(b"\r\n", b"\n").split(b"\n")
            if line.startswith(b"data:")
        )
        if not data or data == b"[DONE]":
            return
        try:
            event = json.loads(data)
        except ValueError:
            return
        if isinstance(event, dict):
            self._fold(event)

    def _fold(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if self.flavor == Flavor.anthropic:
            if kind == "message_start" and isinstance(event.get("message"), dict):
                message = event["message"]
                self.document = {"model": message.get("model"), "usage": dict(message.get("usage") or {})}
            elif kind == "message_delta" and self.document is not None:
                delta = {k: v for k, v in (event.get("usage") or {}).items() if v is not None}
                self.document["usage"].update(delta)  # cumulative: replaces, never adds
                stop = (event.get("delta") or {}).get("stop_reason")
                if stop is not None:
                    self.document["stop_reason"] = stop
            elif kind == "message_stop":
                self.completed = True
        elif self.flavor == Flavor.openai_responses:
            if kind in ("response.completed", "response.incomplete", "response.failed"):
                self.document = event.get("response") if isinstance(event.get("response"), dict) else None
                self.completed = True
        elif self.flavor == Flavor.openai_chat:
            for choice in event.get("choices") or ():
                if isinstance(choice, dict) and choice.get("finish_reason") is not None:
                    self.finishes.append(choice["finish_reason"])
            if event.get("usage"):
                choices = [{"finish_reason": reason} for reason in self.finishes]
                self.document = {"model": event.get("model"), "usage": event["usage"], "choices": choices}
                self.completed = True
        elif event.get("usageMetadata"):
            self.document = event
            finish = [c.get("finishReason") for c in event.get("candidates") or [] if isinstance(c, dict)]
            self.completed = self.completed or any(finish)


def _event_end(buffer: bytes) -> tuple[int, int] | None:
    """(end of the first event, start of the rest), events ending in a blank line (LF or CRLF)."""
    found = [(i, i + len(sep)) for sep in (b"\n\n", b"\r\n\r\n") if (i := buffer.find(sep)) >= 0]
    return min(found) if found else None


def fold_json_stream(vendor: Vendor, flavor: Flavor, body: bytes) -> RequestUsage | None:
    """A stream not sent as events (Gemini's JSON array): its last element that reports usage."""
    try:
        document = json.loads(body)
    except ValueError:
        return None
    items = document if isinstance(document, list) else [document]
    for item in reversed(items):
        usage = usage_of(vendor, flavor, item)
        if usage is not None:
            return usage
    return None


def finish_reasons_of(flavor: Flavor, document: Any) -> tuple[str, ...]:
    """Why the answer (a response document, a stream's folded one, or Gemini's JSON array) stopped, one
    reason per generation, as the vendor spells it; () when it does not say."""
    if isinstance(document, list):  # Gemini's stream sent as one JSON array: its last element says
        document = document[-1] if document else None
    if not isinstance(document, dict):
        return ()
    if flavor == Flavor.anthropic:
        reasons = [document.get("stop_reason")]
    elif flavor == Flavor.openai_chat:
        reasons = [c.get("finish_reason") for c in document.get("choices") or () if isinstance(c, dict)]
    elif flavor == Flavor.openai_responses:  # no finish reason: why it is incomplete, else its status
        details = document.get("incomplete_details")
        reasons = [details.get("reason") if isinstance(details, dict) else document.get("status")]
    else:
        reasons = [c.get("finishReason") for c in document.get("candidates") or () if isinstance(c, dict)]
    return tuple(r for r in reasons if isinstance(r, str) and r)


@dataclass(frozen=True)
class Prices:
    """USD per token of one model."""

    input: float
    output: float
    cache_read: float
    cache_write: float

    def cost(self, tokens: Tokens) -> float:
        return (
            (tokens.input or 0) * self.input
            + (tokens.output or 0) * self.output
            + (tokens.cache_read or 0) * self.cache_read
            + (tokens.cache_write or 0) * self.cache_write
        )

    def worst_input(self, tokens: int) -> float:
        """Input tokens at the dearest way they can be billed (a cache write costs more than input)."""
        return tokens * max(self.input, self.cache_write, self.cache_read)


def build_price_book(
    vendor: Vendor,
    model: str,
    grant: ModelAttemptGrant,
    now: datetime,
    prompt_tokens: int | None = None,
    worst: bool = False,
) -> PriceBook:
    """The attempt's prices (its grant's: a namespaced definition's only raise the trusted ones) and the
    vendor's table (at the tier of a request of `prompt_tokens`, or `worst`: the dearest tier)."""
    table = find_vendor_table(vendor.provider_id, model, now, prompt_tokens, worst)
    platform = grant.platform_pricing or {}
    return PriceBook(tenant=grant.pricing, platform=platform, table=table, table_name=PRICE_TABLE)


def _per_token(price: ModelPricing) -> Prices:
    return Prices(price.input / 1e6, price.output / 1e6, price.cache_read / 1e6, price.cache_write / 1e6)


def find_prices(vendor: Vendor, model: str | None, grant: ModelAttemptGrant, now: datetime) -> Prices | None:
    """The model's prices for a worst case (contract/pricing.py's lookup; the table's at its dearest tier,
    a cache price it lacks at the input price); None when nothing prices it."""
    if model is None:
        return None
    found = build_price_book(vendor, model, grant, now, worst=True).find(model)
    return None if found is None else _per_token(found[0])


def estimate_input_tokens(body: bytes) -> int:
    return math.ceil(len(body) / BYTES_PER_TOKEN)


def cost_of(vendor: Vendor, usage: RequestUsage, grant: ModelAttemptGrant, now: datetime) -> float | None:
    """What the request cost, at contract/pricing.py's price of its model: the table's at this request's
    size (a tier above a prompt size applies per request, which the gateway, unlike a run's totals, can
    tell); None when nothing prices it."""
    if usage.model is None:
        return None
    tokens = usage.tokens
    size = (tokens.input or 0) + (tokens.cache_read or 0) + (tokens.cache_write or 0)
    found = build_price_book(vendor, usage.model, grant, now, prompt_tokens=size).find(usage.model)
    return None if found is None else _per_token(found[0]).cost(tokens)
