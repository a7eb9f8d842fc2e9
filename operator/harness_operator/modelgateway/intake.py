"""What the model gateway takes from a sandbox before it spends (pure): a path it can name without
decoding, a body of bounded size and shape that it parsed itself, and, under a cap, only the fields whose
cost the request's worst case bounds.

A sandbox may be prompt-injected and hostile; every check here answers one way it could reach an endpoint
or a cost the gateway did not decide on:
- the path is checked as it was sent (raw), in a character set with nothing to decode or normalise, so
  the path checked is the path forwarded (no `..`, no `%2f`, no backslash, no empty segment);
- a metered body is forwarded only as the JSON object the gateway parsed, serialised again: bytes it
  cannot read (invalid UTF-8, a compressed body, NaN) or that another parser reads otherwise (a key twice)
  never reach the vendor unmetered;
- a body's size is capped and its count of objects and arrays bounded before it is parsed, so one request
  cannot take a replica's memory;
- under a cap (maxCostUSD, maxTokens) the worst case counts one answer and the body's own bytes, so a
  request is refused when it asks for more answers (`n`, `candidateCount`), for input the vendor fetches
  itself (URLs, file ids, stored responses, cached content) or for tools the vendor runs (web search and
  fetch, code execution): each metered endpoint has an allowlist of body fields, and a field, tool type or
  content part not on it is refused with a message naming it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from harness_operator.modelgateway.vendors import Flavor

DEFAULT_MAX_REQUEST_BYTES = 8 * 1024 * 1024
# Objects and arrays a body may hold: a floor every real request stays under, and one per this many bytes
# above it. A parsed object or array takes 56 to 250 bytes of memory however few bytes it was written in
# (`{}` is 2 bytes and a 64-byte dict), so a body of little else is refused before it is parsed. A prompt
# is mostly text; tool schemas, the densest part a CLI sends, take 25 to 40 bytes per container.
MIN_CONTAINERS = 20_000
BYTES_PER_CONTAINER = 32

# A path segment as the vendors' endpoints spell them: nothing to decode, nothing a URL parser may
# normalise (a `%` escape, `\`, `;`, an empty or dot segment).
SEGMENT = re.compile(r"^[A-Za-z0-9_\-:][A-Za-z0-9_\-:.]*$")


@dataclass(frozen=True)
class Refusal:
    status: int
    message: str
    kind: str  # as Vendor.error takes it


def check_raw_path(raw_path: str) -> str | Refusal:
    """The gateway path of a raw request target (`request.raw_path`: as sent, query included), or why it
    is refused. Each segment is of SEGMENT's characters, so the raw path is its own decoded and normalised
    form: what is checked and forwarded is what the vendor routes."""
    path = raw_path.partition("?")[0]
    if not path.startswith("/"):
        return Refusal(400, "harness model gateway: the request's path must start with '/'", "bad_request")
    segments = path[1:].split("/")
    for segment in segments:
        if not SEGMENT.match(segment):
            shown = segment if len(segment) <= 40 else segment[:40] + "..."
            return Refusal(
                400,
                f"harness model gateway: the path segment {shown!r} is refused: a path is sent as the "
                "vendor's API spells it, without '.' or '..' segments, '%' escapes, backslashes or empty "
                "segments ('//')",
                "bad_request",
            )
    return path


def check_encoding(headers: Mapping[str, str]) -> Refusal | None:
    """A metered body sent compressed (lower-case header names) is refused: the gateway would have to
    inflate it to read it, and a small compressed body can inflate to any size."""
    encoding = headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return None
    return Refusal(
        400,
        f"harness model gateway: the request body is sent with Content-Encoding {encoding!r}; a metered "
        "endpoint takes its JSON uncompressed (turn the client's request compression off)",
        "bad_request",
    )


def check_size(length: int, limit: int, *, whole: bool = True) -> Refusal | None:
    """A body of `length` bytes (`whole`: its Content-Length; else what was read of it so far) against
    the gateway's limit."""
    if length <= limit:
        return None
    size = f"{length} bytes" if whole else f"more than {limit} bytes"
    return Refusal(
        413,
        f"harness model gateway: the request body is {size}, above the gateway's limit of {limit} "
        "(modelGateway.maxRequestBytes in the chart); send a shorter conversation (compact it) or fewer "
        "inline images",
        "too_large",
    )


def check_shape(body: bytes) -> Refusal | None:
    """A body's count of objects and arrays against its size, before it is parsed (bytes.count: one pass
    in C, no allocation)."""
    containers = body.count(b"{") + body.count(b"[")
    limit = MIN_CONTAINERS + len(body) // BYTES_PER_CONTAINER
    if containers <= limit:
        return None
    return Refusal(
        400,
        f"harness model gateway: the request body holds {containers} '{{' and '[' in {len(body)} bytes "
        f"(at most {limit}): the gateway refuses a body made mostly of objects and arrays; send the "
        "prompt as text",
        "bad_request",
    )


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_body(body: bytes) -> dict[str, Any] | Refusal:
    """The JSON object a metered request's body is (UTF-8, no NaN or Infinity), or why it
    is refused: the gateway forwards only what it parsed (serialised again), so a body it cannot read
    is never sent, and a key sent twice reaches the vendor once, as the gateway read it."""
    try:
        text = body.decode("utf-8")
        document = json.loads(text, parse_constant=_constant)
    except UnicodeDecodeError as exc:
        return _unparsed(f"it is not UTF-8 (byte {exc.start})")
    except RecursionError:
        return _unparsed("it is nested too deep")
    except ValueError as exc:
        return _unparsed(str(exc))
    if not isinstance(document, dict):
        return _unparsed("it is not a JSON object")
    return document


def _unparsed(why: str) -> Refusal:
    return Refusal(
        400,
        f"harness model gateway: the request body is refused: {why}; a metered endpoint takes one JSON "
        "object in UTF-8, uncompressed (no Content-Encoding)",
        "bad_request",
    )


# --- under a cap: the fields a worst case bounds -------------------------------------------------------


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Top-level body fields per metered endpoint that change neither how many answers are billed nor what
# input the vendor reads beyond the body: derived from what Claude Code, Codex, Gemini CLI, Qwen Code,
# OpenCode, Pi, Copilot and Aider send (tests/fixtures/cli/*/*.requests.json) and the vendors' references.
ALLOWED_FIELDS: dict[Flavor, frozenset[str]] = {
    Flavor.anthropic: _names(
        """model messages max_tokens system metadata stop_sequences stream temperature top_p top_k tools
        tool_choice thinking context_management output_config output_format service_tier"""
    ),
    Flavor.openai_responses: _names(
        """model input instructions max_output_tokens stream stream_options temperature top_p top_logprobs
        tools tool_choice parallel_tool_calls reasoning text include store metadata client_metadata
        prompt_cache_key prompt_cache_retention safety_identifier user service_tier truncation
        max_tool_calls"""
    ),
    Flavor.openai_chat: _names(
        """model messages max_tokens max_completion_tokens stream stream_options temperature top_p
        frequency_penalty presence_penalty tools tool_choice parallel_tool_calls functions function_call
        stop seed response_format logit_bias logprobs top_logprobs user metadata store reasoning_effort
        verbosity prompt_cache_key safety_identifier service_tier n modalities"""
    ),
    # Gemini's JSON takes either spelling of a field; a snake_case one is checked as its camelCase.
    Flavor.gemini: _names(
        "contents systemInstruction generationConfig tools toolConfig safetySettings labels"
    ),
}
# Why a field a CLI could send is not on the list, and what to do instead.
REFUSED_WHY = {
    "previous_response_id": "the vendor would read the stored conversation, which the gateway cannot "
    "count; send the whole conversation in `input` (Codex: leave it stateless)",
    "conversation": "the vendor would read a stored conversation the gateway cannot count; send it in "
    "`input`",
    "prompt": "the vendor would expand a stored prompt the gateway cannot count; send it in `instructions`",
    "background": "a background response is fetched later, past the gateway's meter",
    "cachedContent": "the vendor would read cached content the gateway cannot count; send it in `contents`",
    "mcp_servers": "the vendor would call MCP servers and read their answers, which the gateway cannot "
    "count; run the MCP servers in the sandbox",
    "container": "the vendor would run code in a container the gateway cannot count",
    "web_search_options": "the vendor would search the web and read the results, which the gateway "
    "cannot count",
    "audio": "audio output is billed above text output, which the gateway's worst case does not hold",
    "prediction": "rejected prediction tokens are billed beyond the request's output cap",
}
# Tool types a client runs itself (their results come back in the body); anything else runs at the
# vendor: web search and fetch, code execution, file search, MCP connectors, image generation.
CLIENT_TOOLS: dict[Flavor, tuple[str, ...]] = {
    Flavor.anthropic: ("custom", "bash_", "text_editor_", "computer_", "memory_", "tool_search_tool_"),
    Flavor.openai_responses: ("function", "custom", "local_shell", "shell", "apply_patch"),
    Flavor.openai_chat: ("function", "custom"),
}
GEMINI_CLIENT_TOOLS = frozenset({"functionDeclarations"})
# Service tiers billed at the table's prices or below.
PLAIN_TIERS = frozenset({"auto", "default", "flex", "standard_only"})


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def check_capped_body(flavor: Flavor, document: Mapping[str, Any]) -> str | None:
    """Why a metered request's body cannot be held by its worst case under a cap, or None. The worst case
    counts one answer of the clamped output and the body's own bytes as input."""
    gemini = flavor == Flavor.gemini
    for name in document:
        field = camel(name) if gemini else name
        if field not in ALLOWED_FIELDS[flavor]:
            why = REFUSED_WHY.get(field, "the gateway cannot tell what it costs")
            return _field(name, why)
    if gemini:
        return _check_gemini(document)
    answers = document.get("n")
    if answers is not None and answers != 1:
        why = f"it asks for {answers!r} answers, each billed, and the worst case holds one; send n: 1"
        return _field("n", why)
    tier = document.get("service_tier")
    if tier is not None and tier not in PLAIN_TIERS:
        return _field("service_tier", f"the tier {tier!r} is billed above the price table; leave it out")
    modalities = document.get("modalities")
    if modalities is not None and modalities != ["text"]:
        return _field("modalities", "only text output is held by the worst case; send ['text']")
    for where, tools in _tool_lists(flavor, document):
        found = _check_tools(flavor, where, tools)
        if found:
            return found
    return _check_parts(flavor, document)


def _field(name: str, why: str) -> str:
    return (
        f"harness model gateway: the request's field `{name}` is refused under the attempt's cap "
        f"(maxCostUSD or maxTokens): {why}"
    )


def _tool_lists(flavor: Flavor, document: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """Every list of tools a request offers, with its place: `tools`, and in a Responses request the
    `tools` of an `additional_tools` input item (Codex offers its tools there) and of a `namespace`."""
    yield "tools", document.get("tools")
    items = document.get("input") if flavor == Flavor.openai_responses else None
    for i, item in enumerate(items if isinstance(items, list) else []):
        if isinstance(item, dict) and item.get("type") == "additional_tools":
            yield f"input[{i}].tools", item.get("tools")


def _check_tools(flavor: Flavor, where: str, tools: Any) -> str | None:
    for i, tool in enumerate(tools if isinstance(tools, list) else []):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind is None and flavor == Flavor.anthropic:
            continue  # a custom tool
        if kind == "namespace" and flavor == Flavor.openai_responses:  # a group of tools, each checked
            found = _check_tools(flavor, f"{where}[{i}].tools", tool.get("tools"))
            if found:
                return found
            continue
        if not isinstance(kind, str) or not kind.startswith(CLIENT_TOOLS[flavor]):
            return _field(
                where,
                f"the tool type {kind!r} runs at the vendor, which bills what it fetches, searches or "
                "runs past the gateway's worst case; offer the agent's own tool instead",
            )
    return None


def _walk(value: Any, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every object inside `value` with its JSON path."""
    stack = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            yield path, item
            stack.extend((v, f"{path}.{k}") for k, v in item.items() if isinstance(v, (dict, list)))
        elif isinstance(item, list):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(item) if isinstance(v, (dict, list)))


def _check_parts(flavor: Flavor, document: Mapping[str, Any]) -> str | None:
    """A content part the vendor would fetch or look up itself (a URL, a file id, a stored item)."""
    field = {Flavor.anthropic: "messages", Flavor.openai_chat: "messages"}.get(flavor, "input")
    for path, part in _walk(document.get(field), field):
        kind = part.get("type")
        source = part.get("source")
        if flavor == Flavor.anthropic:
            external = kind == "container_upload" or (
                isinstance(source, dict) and source.get("type") not in (None, "base64", "text", "content")
            )
        else:
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            fetched = (
                kind in ("image_url", "input_image") and isinstance(url, str) and not url.startswith("data:")
            )
            external = (
                kind == "item_reference" or bool(part.get("file_id") or part.get("file_url")) or fetched
            )
        if external:
            return _field(
                path,
                "the vendor would fetch this input (a URL or a file id) and the gateway cannot count it; "
                "send the image or document inline (base64)",
            )
    return None


def _check_gemini(document: Mapping[str, Any]) -> str | None:
    config = _camel_get(document, "generationConfig")
    if isinstance(config, dict):
        count = _camel_get(config, "candidateCount")
        if count is not None and count != 1:
            return _field(
                "generationConfig.candidateCount",
                f"it asks for {count!r} candidates, each billed, and the worst case holds one; send 1",
            )
        modalities = _camel_get(config, "responseModalities")
        if modalities is not None and [str(m).upper() for m in modalities or []] not in ([], ["TEXT"]):
            return _field("generationConfig.responseModalities", "only text output is held; send ['TEXT']")
    tools = _camel_get(document, "tools")
    for tool in tools if isinstance(tools, list) else []:
        for name in tool if isinstance(tool, dict) else []:
            if camel(name) not in GEMINI_CLIENT_TOOLS:
                return _field(
                    f"tools.{name}",
                    "this tool runs at the vendor (search, URL context, code execution), which bills "
                    "what it reads past the gateway's worst case; offer a function declaration instead",
                )
    for path, part in _walk(_camel_get(document, "contents"), "contents"):
        for name in part:
            if camel(name) == "fileData":
                return _field(
                    f"{path}.{name}",
                    "the vendor would read this file and the gateway cannot count it; send it as inlineData",
                )
    return None


def _camel_get(mapping: Mapping[str, Any], field: str) -> Any:
    for name, value in mapping.items():
        if camel(name) == field:
            return value
    return None


# --- tokens ---------------------------------------------------------------------------------------------


@dataclass
class LookupBudget:
    """How often a token whose grant the watch has not delivered may cost a read of the API server: `rate`
    a second, in bursts of up to `burst` (a token bucket). A token's MAC binds its run's UID, which only
    the grant holds, so a made-up token cannot be told from a new one before its grant is read: without a
    bound, a flood of them would be a flood of reads."""

    rate: float
    burst: float
    tokens: float = -1.0  # none yet: a full bucket at the first take
    at: float = 0.0

    def take(self, now: float) -> bool:
        """Spend one read at `now` (monotonic seconds), or False when none is left."""
        if self.tokens < 0:
            self.tokens, self.at = self.burst, now
        self.tokens = min(self.burst, self.tokens + max(now - self.at, 0.0) * self.rate)
        self.at = max(self.at, now)  # a clock that went back earns nothing, then or later
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True
