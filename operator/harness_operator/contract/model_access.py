"""What the operator and the model gateway exchange: an attempt's gateway token, the run's grant (the
ConfigMap in the gateway's namespace that says which tokens are live and what the run may spend), and the
metered usage the gateway keeps per run and per attempt.

The token names its grant and attempt and carries an HMAC of the run's UID under the operator's key, so a
restarted operator derives the same one; the grant holds only its sha256. An attempt joins its grant when
it starts and leaves it when it ends: the gateway refuses its token before and after. The caps are the
run's: they bind the sum of all its attempts' spend, which the gateway keeps in one meter per run.
"""

from __future__ import annotations

import hashlib
import hmac
import json

from pydantic import Field

from harness_operator.api.v1alpha1 import Model, ModelPricing

TOKEN_PREFIX = "hmg-"
LABEL_MODEL_GRANT = "agentharness.dev/model-grant"
MODEL_GRANT_KEY = "grant.json"


class ModelAttemptGrant(Model):
    """One live attempt: its token's hash, the vendor route it may use, its prices and key."""

    token_sha256: str = Field(description="sha256 of the attempt's gateway token, hex.")
    vendor: str = Field(description="The vendor route the token opens (anthropic, openai, gemini).")
    pricing: dict[str, ModelPricing] = Field(
        default_factory=dict,
        description="A namespaced HarnessDefinition's prices: they only raise the trusted price "
        "(contract/pricing.py).",
    )
    platform_pricing: dict[str, ModelPricing] | None = Field(
        default=None,
        description="A ClusterHarnessDefinition's prices: trusted, they win over the price table.",
    )
    key_secret: str | None = Field(
        default=None, description="The Secret of the gateway's namespace with the run's own key, if any."
    )
    key_field: str | None = Field(default=None, description="Its data key for this attempt.")
    trace_parent: str | None = Field(
        default=None,
        description="The attempt's span as a W3C traceparent when its run is traced: the parent of the "
        "gateway's span of each model request (contract/tracing.py).",
    )


class ModelGrant(Model):
    """A run's caps and its live attempts, as the operator writes them for the gateway."""

    namespace: str
    run: str
    uid: str
    max_cost_usd: float | None = Field(
        default=None,
        alias="maxCostUSD",
        description="Spend the gateway lets the run reach, all its attempts together (a budget's reservation "
        "included).",
    )
    max_tokens: int | None = Field(
        default=None, description="Tokens the gateway lets the run use, all its attempts together."
    )
    attempts: dict[str, ModelAttemptGrant] = Field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(self.model_dump(by_alias=True, mode="json", exclude_none=True), sort_keys=True)


class MeteredUsage(Model):
    """A run's or an attempt's usage as the gateway metered it from the vendor's responses."""

    requests: int = Field(default=0, description="Requests forwarded and answered.")
    refused: int = Field(default=0, description="Requests refused at a cap.")
    input_tokens: int = Field(default=0, description="Input tokens, cache reads and writes not included.")
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = Field(default=0.0, alias="costUSD", description="Priced spend of answered requests.")
    unpriced: int = Field(default=0, description="Answered requests whose model has no price.")
    reserved_usd: float = Field(
        default=0.0,
        alias="reservedUSD",
        description="Worst cases still held: requests in flight, or whose end no gateway saw.",
    )
    store_since: str | None = Field(
        default=None, description="Since when the store has kept meters (it lost them before, if ever)."
    )


def build_model_token(key: str, grant: str, run_uid: str, attempt: int) -> str:
    """`hmg-<grant>.<attempt>.<hmac>`: the grant and attempt in the clear (the gateway finds them without
    a search), the HMAC (of another message than the egress proxy's) proving the operator made it."""
    mac = hmac.new(key.encode(), f"model/{run_uid}/{attempt}".encode(), hashlib.sha256).hexdigest()
    return f"{TOKEN_PREFIX}{grant}.{attempt}.{mac}"


def parse_model_token(token: str) -> tuple[str, str] | None:
    """(grant name, attempt) of a token of ours, or None."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    head, dot, mac = token[len(TOKEN_PREFIX) :].rpartition(".")
    grant, dot2, attempt = head.rpartition(".")
    if not (dot and dot2 and grant and attempt.isdigit() and mac):
        return None
    return grant, attempt


def token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def is_token_of(grant: ModelAttemptGrant, token: str) -> bool:
    return hmac.compare_digest(token_sha256(token), grant.token_sha256)


def build_meter_reader_token(key: str) -> str:
    """The bearer the operator reads meters with (the gateway's admin port checks it)."""
    return hmac.new(key.encode(), b"meter-reader", hashlib.sha256).hexdigest()
