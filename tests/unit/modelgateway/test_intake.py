"""What the model gateway takes from a sandbox before it spends: raw paths with nothing to decode or
normalise, body size and shape, bodies it parsed itself, and under a cap only what a worst case bounds
(each attack of the red team's issue 49 as a case; the CLIs' own bodies as the cases that must pass)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness_operator.modelgateway.intake import (
    ALLOWED_FIELDS,
    MIN_CONTAINERS,
    LookupBudget,
    Refusal,
    camel,
    check_capped_body,
    check_encoding,
    check_raw_path,
    check_shape,
    check_size,
    parse_body,
)
from harness_operator.modelgateway.metering import MAX_EVENT_BYTES, StreamMeter
from harness_operator.modelgateway.vendors import VENDORS, Flavor, split_route

# --- paths ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/v1/models",
        "/v1/models/claude-sonnet-4-5",
        "/v1/responses",
        "/v1/chat/completions",
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
        "/v1beta/models/gemini-2.5-flash-preview-09-2025:generateContent",
        "/v1/models/gpt-4.1?after=x/../y",  # the query is not the path
    ],
)
def test_the_vendors_paths_pass_as_sent(raw: str) -> None:
    assert check_raw_path(raw) == raw.partition("?")[0]


@pytest.mark.parametrize(
    "raw",
    [
        "/v1/models/../files",  # the finding: reached /v1/files with the platform's key
        "/v1/models/./../files",
        "/v1/models/..",
        "/v1/models/%2e%2e/files",
        "/v1/models/%2E%2E/files",
        "/v1/models/.%2e/files",
        "/v1/models/x%2f..%2ffiles",
        "/v1/models/x%2F..%2Ffiles",
        "/v1/models/x%5c..%5cfiles",
        "/v1/models/x\\..\\files",
        "/v1/models//files",
        "//v1/files",
        "/v1/models/",
        "/v1/models/x;..",
        "/v1/models/%252e%252e/files",  # double encoding
        "/v1/models/.hidden",
        "/v1/models/x y",
        "/v1/models/\u2024\u2024/files",  # one-dot leaders
        "v1/messages",
        "",
    ],
)
def test_dot_segments_escapes_and_empty_segments_are_refused(raw: str) -> None:
    refused = check_raw_path(raw)
    assert isinstance(refused, Refusal) and refused.status == 400


def test_a_refused_segment_is_named_and_cut_short() -> None:
    refused = check_raw_path("/v1/models/%2e%2e/" + "x" * 100 + "/" + "y" * 100)
    assert isinstance(refused, Refusal) and "'%2e%2e'" in refused.message
    long = check_raw_path("/v1/" + "%" * 100)
    assert isinstance(long, Refusal) and "..." in long.message and "%" * 41 not in long.message


@given(st.text(alphabet="./%2eEfF5cC\\:ab-_", max_size=24))
def test_a_path_passed_is_its_own_normal_form(tail: str) -> None:
    """Whatever is passed has no dot segment, escape or empty segment: nothing a URL parser could turn
    into another path."""
    checked = check_raw_path("/v1/models/" + tail)
    if isinstance(checked, Refusal):
        return
    segments = checked.split("/")[1:]
    assert all(s and s not in (".", "..") and not s.startswith(".") for s in segments)
    assert "%" not in checked and "\\" not in checked


@pytest.mark.parametrize(
    ("vendor", "method", "path", "forwarded"),
    [
        ("anthropic", "GET", "/v1/models", True),
        ("anthropic", "GET", "/v1/models/claude-sonnet-4-5", True),
        ("anthropic", "GET", "/v1/models/x/y", False),  # one model, nothing under it
        ("openai", "GET", "/v1/models/gpt-4.1", True),
        ("openai", "GET", "/v1/models/gpt-4.1/files", False),
        ("openai", "GET", "/v1/files", False),
        ("openai", "GET", "/v1/chat/completions/abc", False),  # stored completions
        ("openai", "GET", "/v1/files/file-1/content", False),
        ("openai", "POST", "/v1/batches", False),
        ("anthropic", "POST", "/v1/messages/batches", False),
        ("gemini", "GET", "/v1beta/files", False),
        ("gemini", "GET", "/v1beta/cachedContents", False),
    ],
)
def test_only_the_listed_endpoints_are_forwarded(
    vendor: str, method: str, path: str, forwarded: bool
) -> None:
    assert (VENDORS[vendor].endpoint(method, path, None) is not None) == forwarded


def test_the_vendor_prefix_is_split_from_the_raw_path_and_its_tail_checked() -> None:
    route = split_route("/openai/v1/models/%2e%2e/files")
    assert route is not None and route[0].name == "openai"
    assert isinstance(check_raw_path(route[1]), Refusal)
    assert split_route("/%6fpenai/v1/files") is None


# --- size, shape, encoding, parsing ---------------------------------------------------------------------


def test_size_is_refused_above_the_limit_naming_the_chart_value() -> None:
    assert check_size(100, 100) is None
    refused = check_size(101, 100)
    assert isinstance(refused, Refusal) and refused.status == 413 and refused.kind == "too_large"
    assert "modelGateway.maxRequestBytes" in refused.message and "101" in refused.message


def test_a_body_of_empty_objects_is_refused_before_it_is_parsed() -> None:
    """The finding: 24 MiB of `{}` took 785 MiB once parsed. Any size of it is refused by its shape."""
    body = b"[" + b"{}," * 400_000 + b"{}]"
    refused = check_shape(body)
    assert isinstance(refused, Refusal) and refused.status == 400 and "'{' and '['" in refused.message
    assert check_shape(b"[" + b"[]," * 400_000 + b"[]]") is not None


def test_real_bodies_pass_the_shape_check() -> None:
    """A long conversation of code and tool schemas passes. Code has one '{' or '[' per 45 to 200 bytes
    (measured: this package's Python 204, npm's JavaScript 97, its minified files 45 to 51, JSON files 69);
    this body's code has one per 38 and its tools one per 25."""
    schema = {
        "type": "object",
        "properties": {f"p{i}": {"type": "string", "description": "d"} for i in range(20)},
    }
    tools = [{"name": f"t{i}", "description": "x" * 200, "input_schema": schema} for i in range(60)]
    code = "function f(a,b){return a.map(function(x){return x+b})}var y=g(1,2)+h(3,4);\n" * 20_000
    messages = [{"role": "user", "content": [{"type": "text", "text": code}]}] * 3
    body = json.dumps({"model": "m", "tools": tools, "messages": messages}).encode()
    assert len(body) > 4 * 1024 * 1024
    assert check_shape(body) is None
    assert check_shape(b"[" + b"{}," * (MIN_CONTAINERS // 2 - 1) + b"{}]") is None  # the floor


@pytest.mark.parametrize(
    ("encoding", "refused"),
    [(None, False), ("identity", False), ("", False), ("gzip", True), ("zstd", True), ("deflate", True)],
)
def test_a_compressed_metered_body_is_refused(encoding: str | None, refused: bool) -> None:
    headers = {} if encoding is None else {"content-encoding": encoding}
    found = check_encoding(headers)
    assert (found is not None) == refused
    if found is not None:
        assert encoding in found.message and "uncompressed" in found.message


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b'{"model": "m", "max_tokens": 32000, "x": "\xff"}', "not UTF-8"),  # the finding
        (b"", "Expecting value"),
        (b"[1]", "not a JSON object"),
        (b'"text"', "not a JSON object"),
        (b'{"max_tokens": NaN}', "NaN is not JSON"),
        (b'{"max_tokens": Infinity}', "Infinity is not JSON"),
        (b'{"a": 1', "Expecting"),
        ('{"a": "b"}'.encode("utf-16"), "not UTF-8"),  # json.loads(bytes) would have guessed UTF-16
        (b"[" * 200_000 + b"]" * 200_000, "nested too deep"),
    ],
)
def test_a_body_the_gateway_cannot_read_is_refused_naming_why(body: bytes, why: str) -> None:
    refused = parse_body(body)
    assert isinstance(refused, Refusal) and refused.status == 400 and why in refused.message
    assert "one JSON object in UTF-8" in refused.message


def test_a_body_read_is_what_is_forwarded_a_key_sent_twice_once() -> None:
    parsed = parse_body(b'{"max_tokens": 32000, "model": "m", "max_tokens": 16, "t": "\\ud800 \\u00e9"}')
    assert parsed == {"max_tokens": 16, "model": "m", "t": "\ud800 \u00e9"}
    assert json.loads(json.dumps(parsed)) == parsed  # serialised again, read the same way
    assert json.dumps(parsed).count("max_tokens") == 1


# --- under a cap ---------------------------------------------------------------------------------------

# The bodies the CLIs send (top-level fields from tests/fixtures/cli/*/*.requests.json), with the
# contents they carry: each must pass under a cap.
CLI_BODIES: list[tuple[str, Flavor, dict[str, Any]]] = [
    ("claude", Flavor.anthropic, {
        "model": "claude-sonnet-4-5", "max_tokens": 32000, "stream": True,
        "system": [{"type": "text", "text": "You are Claude Code", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "hi"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
                {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}},
            ]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "...", "signature": "s"},
                {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "/a"}},
            ]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
                {"type": "text", "text": "x"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
            ]}]},
        ],
        "tools": [{"name": "Read", "description": "d", "input_schema": {"type": "object"}},
                  {"type": "custom", "name": "X", "input_schema": {}},
                  {"type": "bash_20250124", "name": "bash"},
                  {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}],
        "tool_choice": {"type": "auto"}, "metadata": {"user_id": "u"},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
        "output_config": {"effort": "high"}, "temperature": 1, "service_tier": "auto",
    }),
    ("opencode", Flavor.anthropic, {
        "model": "claude-sonnet-4-5", "max_tokens": 32000, "stream": True, "system": "s",
        "messages": [{"role": "user", "content": "hi"}], "thinking": {"type": "disabled"},
        "tool_choice": {"type": "auto"}, "tools": [{"name": "bash", "input_schema": {}}],
    }),
    ("codex", Flavor.openai_responses, {
        "model": "gpt-5-codex", "instructions": "i", "stream": True, "store": False,
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBO"}]},
            {"type": "reasoning", "summary": [], "encrypted_content": "e"},
            {"type": "function_call", "name": "shell", "arguments": "{}", "call_id": "c"},
            {"type": "function_call_output", "call_id": "c", "output": "ok"},
            {"type": "custom_tool_call", "name": "apply_patch", "input": "x", "call_id": "d"},
            {"type": "local_shell_call", "call_id": "e", "action": {"type": "exec", "command": ["ls"]}},
        ],
        "tools": [{"type": "function", "name": "shell", "parameters": {}},
                  {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}},
                  {"type": "local_shell"}],
    }),
    ("codex 0.171, tools as an input item", Flavor.openai_responses, {
        "model": "gpt-6.2-sol", "stream": True, "store": False,
        "input": [
            {"type": "additional_tools", "id": "at_1", "role": "developer", "tools": [
                {"type": "namespace", "name": "functions", "description": "", "tools": [
                    {"type": "custom", "name": "exec", "format": {"type": "grammar"}},
                    {"type": "function", "name": "wait", "parameters": {}, "strict": False}]},
                {"type": "namespace", "name": "mcp__docs", "tools": [{"type": "function", "name": "echo"}]}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        ],
        "tool_choice": "auto", "parallel_tool_calls": False, "reasoning": {"effort": "medium"},
        "include": ["reasoning.encrypted_content"], "prompt_cache_key": "k",
        "text": {"verbosity": "low"}, "client_metadata": {"x": "y"},
    }),
    ("qwen", Flavor.openai_chat, {
        "model": "qwen3-coder-plus", "max_tokens": 8192, "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [
            {"type": "text", "text": "hi"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
        ]}, {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
            "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "ok"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    }),
    ("copilot", Flavor.openai_chat, {
        "model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100,
        "temperature": 0, "top_p": 1, "frequency_penalty": 0, "presence_penalty": 0, "stream": True,
        "stream_options": {"include_usage": True}, "tools": [], "n": 1,
    }),
    ("aider", Flavor.openai_chat, {
        "model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}], "stream": True, "temperature": 0,
    }),
    ("gemini", Flavor.gemini, {
        "contents": [{"role": "user", "parts": [{"text": "hi"},
            {"inlineData": {"mimeType": "image/png", "data": "iVBO"}}]},
            {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}, "thoughtSignature": "s"}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}],
        "systemInstruction": {"parts": [{"text": "s"}]},
        "generationConfig": {"temperature": 0, "topP": 1, "thinkingConfig": {"includeThoughts": True},
                             "candidateCount": 1, "responseModalities": ["TEXT"]},
        "tools": [{"functionDeclarations": [{"name": "f", "parameters": {}}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}},
        "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
    }),
    ("gemini, snake_case", Flavor.gemini, {
        "contents": [{"parts": [{"inline_data": {"mime_type": "image/png", "data": "iVBO"}}]}],
        "system_instruction": {"parts": [{"text": "s"}]}, "generation_config": {"candidate_count": 1},
        "tools": [{"function_declarations": []}],
    }),
]  # fmt: skip


@pytest.mark.parametrize(("cli", "flavor", "body"), CLI_BODIES, ids=[c for c, _, _ in CLI_BODIES])
def test_the_clis_bodies_pass_under_a_cap(cli: str, flavor: Flavor, body: dict[str, Any]) -> None:
    assert check_capped_body(flavor, body) is None


FIXTURE_FIELDS = {
    # Every top-level field the recorded CLIs sent (tests/fixtures/cli/*/*.requests.json).
    Flavor.anthropic: "context_management max_tokens messages metadata model output_config stream system "
    "thinking tool_choice tools",
    Flavor.openai_responses: "client_metadata include input model parallel_tool_calls prompt_cache_key "
    "reasoning store stream text tool_choice",
    Flavor.openai_chat: "frequency_penalty max_tokens messages model presence_penalty stream stream_options "
    "temperature tools top_p",
    Flavor.gemini: "contents generationConfig systemInstruction tools",
}


@pytest.mark.parametrize("flavor", list(FIXTURE_FIELDS))
def test_every_field_the_recorded_clis_sent_is_allowed(flavor: Flavor) -> None:
    assert set(FIXTURE_FIELDS[flavor].split()) <= ALLOWED_FIELDS[flavor]


def _refused(flavor: Flavor, body: dict[str, Any]) -> str:
    why = check_capped_body(flavor, body)
    assert why is not None, body
    assert "under the attempt's cap" in why
    return why


BASE = {
    Flavor.anthropic: {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]},
    Flavor.openai_responses: {"model": "m", "input": "hi"},
    Flavor.openai_chat: {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    Flavor.gemini: {"contents": [{"parts": [{"text": "hi"}]}]},
}


@pytest.mark.parametrize(
    ("flavor", "extra", "named"),
    [
        # More answers than the worst case holds.
        (Flavor.openai_chat, {"n": 8}, "`n`"),
        (Flavor.openai_chat, {"n": "2"}, "`n`"),
        (Flavor.gemini, {"generationConfig": {"candidateCount": 8}}, "candidateCount"),
        (Flavor.gemini, {"generation_config": {"candidate_count": 8}}, "candidateCount"),
        # Input the vendor fetches or looks up itself.
        (Flavor.openai_responses, {"previous_response_id": "resp_1"}, "`previous_response_id`"),
        (Flavor.openai_responses, {"conversation": "conv_1"}, "`conversation`"),
        (Flavor.openai_responses, {"prompt": {"id": "pmpt_1"}}, "`prompt`"),
        (Flavor.openai_responses, {"background": True}, "`background`"),
        (Flavor.gemini, {"cachedContent": "cachedContents/x"}, "`cachedContent`"),
        (Flavor.gemini, {"cached_content": "cachedContents/x"}, "`cached_content`"),
        (Flavor.anthropic, {"mcp_servers": [{"type": "url", "url": "https://x"}]}, "`mcp_servers`"),
        (Flavor.anthropic, {"container": "c"}, "`container`"),
        (Flavor.openai_chat, {"web_search_options": {}}, "`web_search_options`"),
        (Flavor.openai_chat, {"audio": {"voice": "alloy"}}, "`audio`"),
        (Flavor.openai_chat, {"modalities": ["text", "audio"]}, "`modalities`"),
        (Flavor.gemini, {"generationConfig": {"responseModalities": ["IMAGE"]}}, "responseModalities"),
        (Flavor.openai_chat, {"service_tier": "priority"}, "`service_tier`"),
        (Flavor.anthropic, {"something_new": 1}, "`something_new`"),
        # Tools the vendor runs.
        (Flavor.anthropic, {"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "web_search"),
        (Flavor.anthropic, {"tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}]}, "web_fetch"),
        (Flavor.anthropic, {"tools": [{"type": "code_execution_20250825", "name": "c"}]}, "code_execution"),
        (Flavor.openai_responses, {"tools": [{"type": "web_search_preview"}]}, "web_search_preview"),
        (Flavor.openai_responses, {"tools": [{"type": "web_search"}]}, "'web_search'"),
        (Flavor.openai_responses, {"tools": [{"type": "file_search", "vector_store_ids": ["v"]}]}, "file_search"),
        (Flavor.openai_responses, {"tools": [{"type": "code_interpreter"}]}, "code_interpreter"),
        (Flavor.openai_responses, {"tools": [{"type": "image_generation"}]}, "image_generation"),
        (Flavor.openai_responses, {"tools": [{"type": "mcp", "server_url": "https://x"}]}, "'mcp'"),
        (Flavor.openai_responses, {"tools": [{"type": "namespace", "tools": [{"type": "web_search"}]}]},
         "`tools[0].tools`"),
        (Flavor.openai_responses, {"input": [{"type": "additional_tools", "tools": [{"type": "web_search"}]}]},
         "`input[0].tools`"),
        (Flavor.openai_responses, {"input": [{"type": "additional_tools", "tools": [
            {"type": "namespace", "tools": [{"type": "function"}, {"type": "code_interpreter"}]}]}]},
         "`input[0].tools[0].tools`"),
        (Flavor.openai_chat, {"tools": [{"function": {"name": "f"}}]}, "None"),
        (Flavor.gemini, {"tools": [{"googleSearch": {}}]}, "tools.googleSearch"),
        (Flavor.gemini, {"tools": [{"url_context": {}}]}, "tools.url_context"),
        (Flavor.gemini, {"tools": [{"functionDeclarations": [], "codeExecution": {}}]}, "codeExecution"),
    ],
)  # fmt: skip
def test_what_a_worst_case_cannot_bound_is_refused_by_name(
    flavor: Flavor, extra: dict[str, Any], named: str
) -> None:
    assert named in _refused(flavor, {**BASE[flavor], **extra})


def _anthropic_part(part: dict[str, Any]) -> dict[str, Any]:
    return {**BASE[Flavor.anthropic], "messages": [{"role": "user", "content": [part]}]}


@pytest.mark.parametrize(
    ("flavor", "body", "named"),
    [
        (Flavor.anthropic, _anthropic_part({"type": "image", "source": {"type": "url", "url": "https://x/a.png"}}),
         "messages[0].content[0]"),
        (Flavor.anthropic, _anthropic_part({"type": "document", "source": {"type": "file", "file_id": "f"}}),
         "messages[0].content[0]"),
        (Flavor.anthropic, _anthropic_part({"type": "container_upload", "file_id": "f"}), "content[0]"),
        (Flavor.anthropic, _anthropic_part({"type": "tool_result", "tool_use_id": "t", "content": [
            {"type": "image", "source": {"type": "url", "url": "https://x"}}]}), "content[0].content[0]"),
        (Flavor.openai_chat, {**BASE[Flavor.openai_chat], "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://x/a.png"}}]}]}, "messages[0].content[0]"),
        (Flavor.openai_chat, {**BASE[Flavor.openai_chat], "messages": [{"role": "user", "content": [
            {"type": "file", "file": {"file_id": "file-1"}}]}]}, "content[0].file"),
        (Flavor.openai_responses, {"model": "m", "input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": "https://x/a.png"}]}]}, "input[0].content[0]"),
        (Flavor.openai_responses, {"model": "m", "input": [{"role": "user", "content": [
            {"type": "input_image", "file_id": "file-1"}]}]}, "input[0].content[0]"),
        (Flavor.openai_responses, {"model": "m", "input": [{"role": "user", "content": [
            {"type": "input_file", "file_url": "https://x/a.pdf"}]}]}, "input[0].content[0]"),
        (Flavor.openai_responses, {"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]},
         "input[0]"),
        (Flavor.gemini, {"contents": [{"parts": [{"fileData": {"fileUri": "https://x"}}]}]},
         "contents[0].parts[0].fileData"),
        (Flavor.gemini, {"contents": [{"parts": [{"file_data": {"file_uri": "gs://x"}}]}]}, "file_data"),
    ],
)  # fmt: skip
def test_content_the_vendor_fetches_is_refused_by_its_place(
    flavor: Flavor, body: dict[str, Any], named: str
) -> None:
    why = _refused(flavor, body)
    assert named in why and ("inline" in why)


def test_every_refusal_says_what_to_do() -> None:
    why = _refused(Flavor.openai_responses, {"model": "m", "previous_response_id": "r"})
    assert "send the whole conversation in `input`" in why
    assert "send n: 1" in _refused(Flavor.openai_chat, {**BASE[Flavor.openai_chat], "n": 3})
    assert "offer the agent's own tool" in _refused(Flavor.openai_responses, {"tools": [{"type": "mcp"}]})


@pytest.mark.parametrize(("name", "expected"), [("candidate_count", "candidateCount"), ("contents", "contents"),
                                                ("system_instruction", "systemInstruction"), ("a_b_c", "aBC")])  # fmt: skip
def test_camel(name: str, expected: str) -> None:
    assert camel(name) == expected


# --- memory of an answer -------------------------------------------------------------------------------


def test_a_stream_event_past_the_bound_is_dropped_and_the_answer_billed_its_worst_case() -> None:
    meter = StreamMeter(Flavor.openai_chat)
    for _ in range(MAX_EVENT_BYTES // (1 << 20) + 1):
        meter.feed(b"data: " + b"x" * (1 << 20))  # one event that never ends
    assert meter.overflowed and len(meter.buffer) <= MAX_EVENT_BYTES
    meter.feed(b"\n\ndata: " + json.dumps({"model": "m", "usage": {"prompt_tokens": 1}}).encode() + b"\n\n")
    assert meter.document is not None  # later events are still read; the server bills the worst case


def test_a_stream_of_small_events_is_never_dropped() -> None:
    meter = StreamMeter(Flavor.openai_chat)
    event = b"data: " + json.dumps({"choices": [{"delta": {"content": "x" * 1000}}]}).encode() + b"\n\n"
    for _ in range(MAX_EVENT_BYTES // len(event) * 2):
        meter.feed(event)
    assert not meter.overflowed and meter.buffer == b""


# --- tokens of unknown grants --------------------------------------------------------------------------


def test_reads_of_unknown_grants_are_bounded_to_a_burst_then_a_rate() -> None:
    budget = LookupBudget(rate=4.0, burst=20.0)
    assert sum(budget.take(100.0) for _ in range(1000)) == 20  # a flood at one instant: the burst only
    assert not budget.take(100.125)  # half a read earned
    assert budget.take(100.25) and not budget.take(100.25)  # one read a quarter of a second
    assert sum(budget.take(100.25 + t / 64) for t in range(641)) == 40  # 10 s of flood: 4 a second
    assert sum(budget.take(1000.0) for _ in range(100)) == 20  # idle: back to a full burst, never above


@given(st.lists(st.floats(min_value=0, max_value=60, allow_nan=False), max_size=300))
def test_reads_never_pass_burst_plus_rate_times_time(times: list[float]) -> None:
    budget = LookupBudget(rate=5.0, burst=20.0)
    moments = sorted(times)
    taken = sum(budget.take(now) for now in moments)
    span = moments[-1] - moments[0] if moments else 0.0
    assert taken <= 20 + 5.0 * span + 1e-9


def test_a_clock_going_back_earns_nothing() -> None:
    budget = LookupBudget(rate=5.0, burst=1.0)
    assert budget.take(10.0) and not budget.take(5.0) and not budget.take(10.0)


def test_a_body_cut_off_at_the_limit_says_more_than_the_limit() -> None:
    refused = check_size(8_450_994, 8_388_608, whole=False)
    assert refused is not None and "is more than 8388608 bytes" in refused.message
    assert "8450994" not in refused.message
