"""The vendors' wire APIs as the model gateway serves them: where a caller's token is, where the real key
goes, which endpoints are metered, the model and output cap of a request, and errors in the vendor's own
shape, so a CLI prints them as it prints the vendor's (pure).

Each vendor is served under its own prefix (`/anthropic`, `/openai`, `/gemini`); the rest of the path and
the query go to the vendor unchanged. Only the endpoints listed here are forwarded: an unknown one could
spend without being metered, so it is refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Flavor(StrEnum):
    """How a metered endpoint reports usage."""

    anthropic = "anthropic"
    openai_responses = "openai-responses"
    openai_chat = "openai-chat"
    gemini = "gemini"

    @property
    def api_flavor(self) -> str:
        """The name genai-prices' extract_usage knows it by."""
        return {"openai-responses": "responses", "openai-chat": "chat"}.get(self.value, "default")


@dataclass(frozen=True)
class Endpoint:
    """A request the gateway forwards: metered (with how usage reads) or free (counting, listing)."""

    flavor: Flavor | None  # None: free, nothing to meter
    streaming: bool = False


@dataclass(frozen=True)
class Vendor:
    name: str
    provider_id: str  # genai-prices' provider
    default_upstream: str
    # The request body field that caps output tokens, per flavor (None: a path in the body, see clamp).
    output_field: str | None

    def caller_token(self, headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
        """The gateway token the CLI sent, where this vendor's clients put their key."""
        bearer = headers.get("authorization", "")
        if bearer.lower().startswith("bearer "):
            return bearer[7:].strip() or None
        for name in ("x-api-key", "x-goog-api-key", "api-key"):
            if headers.get(name):
                return headers[name].strip()
        return query.get("key") or None

    def upstream_headers(self, headers: Mapping[str, str], key: str) -> dict[str, str]:
        """The caller's headers without its token (and hop-by-hop ones), the real key in its place."""
        dropped = {"authorization", "x-api-key", "x-goog-api-key", "api-key", "host", "content-length"}
        dropped |= HOP_BY_HOP
        out = {k: v for k, v in headers.items() if k.lower() not in dropped}
        if self.name == "anthropic":
            out["x-api-key"] = key
        elif self.name == "gemini":
            out["x-goog-api-key"] = key
        else:
            out["authorization"] = f"Bearer {key}"
        return out

    def endpoint(self, method: str, path: str, body: Mapping[str, Any] | None) -> Endpoint | None:
        """The endpoint `method path` is, or None when the gateway does not forward it."""
        streaming = bool(body and body.get("stream"))
        if self.name == "anthropic":
            if method == "POST" and path == "/v1/messages":
                return Endpoint(Flavor.anthropic, streaming)
            if method == "POST" and path == "/v1/messages/count_tokens":
                return Endpoint(None)
            if method == "GET" and MODELS_PATH.match(path):
                return Endpoint(None)
            return None
        if self.name == "openai":
            if method == "POST" and path == "/v1/responses":
                return Endpoint(Flavor.openai_responses, streaming)
            if method == "POST" and path == "/v1/chat/completions":
                return Endpoint(Flavor.openai_chat, streaming)
            if method == "GET" and MODELS_PATH.match(path):
                return Endpoint(None)
            return None
        match = GEMINI_PATH.match(path)
        if match is None:
            return None
        action = match.group("action")
        if method == "POST" and action == "generateContent":
            return Endpoint(Flavor.gemini)
        if method == "POST" and action == "streamGenerateContent":
            return Endpoint(Flavor.gemini, True)
        if method == "POST" and action == "countTokens":
            return Endpoint(None)
        if method == "GET" and not action:
            return Endpoint(None)
        return None

    def model(self, path: str, body: Mapping[str, Any] | None) -> str | None:
        """The model a request asks for: the body's `model`, or Gemini's path."""
        if self.name == "gemini":
            match = GEMINI_PATH.match(path)
            return match.group("model") if match else None
        value = (body or {}).get("model")
        return value if isinstance(value, str) and value else None

    def requested_output(self, flavor: Flavor, body: Mapping[str, Any]) -> int | None:
        """The output tokens the request allows itself, or None when it sets no cap."""
        if self.name == "gemini":
            value = (body.get("generationConfig") or {}).get("maxOutputTokens")
        elif flavor == Flavor.openai_chat:
            value = body.get("max_completion_tokens", body.get("max_tokens"))
        else:
            value = body.get(self.output_field or "")
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    def clamp(self, flavor: Flavor, body: dict[str, Any], tokens: int) -> dict[str, Any]:
        """The body with its output cap set to `tokens` (the caller's own field where it set one)."""
        out = dict(body)
        if self.name == "gemini":
            out["generationConfig"] = {**(body.get("generationConfig") or {}), "maxOutputTokens": tokens}
        elif flavor == Flavor.openai_chat:
            field = "max_tokens" if "max_tokens" in body and "max_completion_tokens" not in body else None
            out[field or "max_completion_tokens"] = tokens
        else:
            out[self.output_field or ""] = tokens
        return out

    def error(self, status: int, message: str, kind: str) -> tuple[int, bytes]:
        """An error as the vendor writes it. `kind`: unauthorized, not_found, cap, bad_request, too_large,
        upstream, rate_limit (a 429 the CLIs retry)."""
        if self.name == "anthropic":
            types = {
                "unauthorized": "authentication_error",
                "not_found": "not_found_error",
                "upstream": "api_error",
                "too_large": "request_too_large",
                "rate_limit": "rate_limit_error",
            }
            body: dict[str, Any] = {
                "type": "error",
                "error": {"type": types.get(kind, "invalid_request_error"), "message": message},
            }
        elif self.name == "openai":
            codes = {
                "unauthorized": "invalid_api_key",
                "cap": "insufficient_quota",
                "not_found": "not_found",
                "rate_limit": "rate_limit_exceeded",
            }
            body = {"error": {"message": message, "type": codes.get(kind, "invalid_request_error")}}
            body["error"]["code"] = codes.get(kind)
        else:
            statuses = {
                "unauthorized": "UNAUTHENTICATED",
                "not_found": "NOT_FOUND",
                "cap": "FAILED_PRECONDITION",
                "upstream": "UNAVAILABLE",
                "rate_limit": "RESOURCE_EXHAUSTED",
            }
            body = {
                "error": {
                    "code": status,
                    "message": message,
                    "status": statuses.get(kind, "INVALID_ARGUMENT"),
                }
            }
        return status, json.dumps(body).encode()


def is_key_refused(vendor: Vendor, status: int, body: bytes) -> bool:
    """Whether the vendor's answer refuses the key itself, which no retry cures: 401 or 403 (Gemini
    answers a key it does not know with 400 API_KEY_INVALID)."""
    if status in (401, 403):
        return True
    return vendor.name == "gemini" and status == 400 and b"API_KEY_INVALID" in body


def key_refused_message(vendor: Vendor, status: int, secret: str | None) -> str:
    """What the CLI prints when the vendor refused the platform's key: whose key it is and where it is
    fixed (never the key, nor the vendor's own message, which may quote part of it)."""
    where = f"Secret {secret}" if secret else "its Secret"
    return (
        f"harness model gateway: the platform's key for {vendor.name} was refused by the vendor "
        f"(HTTP {status}); it is not the run's key: the platform team replaces it in {where} "
        f"(the chart's modelGateway.vendors.{vendor.name}.secretName); retrying will not help"
    )


# Answers a retry cannot cure carry this: the Stainless-generated SDKs (Anthropic's, OpenAI's, and Claude
# Code's own retry loop) then stop retrying.
NO_RETRY = {"x-should-retry": "false"}

# Status codes each kind of refusal answers with: a cap is final (no CLI retries a 400, nor OpenAI's
# insufficient_quota), never a 429 that a CLI would retry for minutes.
CAP_STATUS = {"anthropic": 400, "openai": 429, "gemini": 400}

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "accept-encoding",  # the gateway reads the answer: it asks for it uncompressed
}
# A listing of models, or one model: one segment (the path is checked raw, see intake.check_raw_path).
MODELS_PATH = re.compile(r"^/v1/models(?:/[^/]+)?$")
GEMINI_PATH = re.compile(r"^/v1(?:beta|alpha)?/models/(?P<model>[^/:]+)(?::(?P<action>[A-Za-z]+))?$")

VENDORS = {
    "anthropic": Vendor("anthropic", "anthropic", "https://api.anthropic.com", "max_tokens"),
    "openai": Vendor("openai", "openai", "https://api.openai.com", "max_output_tokens"),
    "gemini": Vendor("gemini", "google", "https://generativelanguage.googleapis.com", None),
}


def split_route(path: str) -> tuple[Vendor, str] | None:
    """(vendor, the vendor's own path) of a gateway path `/<vendor>/...`."""
    head, slash, tail = path.lstrip("/").partition("/")
    vendor = VENDORS.get(head)
    if vendor is None or not slash:
        return None
    return vendor, "/" + tail
