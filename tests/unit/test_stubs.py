"""The vendor stubs themselves answer as documented (stdlib urllib client, no CLI needed)."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

import pytest
from tests.stubs.anthropic import TEXT, USAGE, AnthropicStub


def _post(url: str, body: dict, timeout: float = 10.0):
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={
            "content-type": "application/json",
            "x-api-key": "sk-test-unit",
            "anthropic-version": "2023-06-01",
        },
        method="POST",
    )
    return urllib.request.urlopen(req, timeout=timeout)


def _sse_events(raw: str) -> list[tuple[str, dict]]:
    events = []
    for block in raw.split("\n\n"):
        name, data = None, None
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                data = json.loads(line[len("data: ") :])
        if data is not None:
            events.append((name, data))
    return events


def test_streaming_messages_reports_fixed_usage():
    with AnthropicStub(mode="ok") as stub:
        assert stub.base_url.startswith("http://127.0.0.1:")
        with _post(
            stub.base_url + "/v1/messages?beta=true",
            {
                "model": "claude-x",
                "stream": True,
                "max_tokens": 10,
                "messages": [{"role": "user", "content": "hi"}],
            },
        ) as resp:
            assert resp.status == 200
            assert resp.headers["content-type"].startswith("text/event-stream")
            events = _sse_events(resp.read().decode())
        names = [n for n, _ in events]
        assert names[0] == "message_start" and names[-1] == "message_stop"
        start = events[0][1]["message"]
        assert start["model"] == "claude-x"
        assert start["usage"]["input_tokens"] == USAGE["input_tokens"]
        delta = next(d for n, d in events if n == "message_delta")
        assert delta["usage"] == {**USAGE, "output_tokens": 10}  # never more than max_tokens, as the API
        assert delta["delta"]["stop_reason"] == "end_turn"
        text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
        assert text == TEXT
        calls = stub.model_calls()
        assert len(calls) == 1 and calls[0].query == {"beta": ["true"]} and calls[0].auth_present


def test_non_streaming_messages():
    with (
        AnthropicStub() as stub,
        _post(stub.base_url + "/v1/messages", {"model": "m", "messages": []}) as resp,
    ):
        body = json.load(resp)
    assert body["type"] == "message"
    assert body["content"] == [{"type": "text", "text": TEXT}]
    assert body["usage"] == USAGE


def test_unauthorized_mode_answers_401():
    with AnthropicStub(mode="unauthorized") as stub, pytest.raises(urllib.error.HTTPError) as err:
        _post(stub.base_url + "/v1/messages", {"model": "m", "stream": True, "messages": []})
    assert err.value.code == 401
    assert json.load(err.value)["error"]["type"] == "authentication_error"


def test_tool_use_mode_calls_an_offered_tool_once():
    with AnthropicStub(mode="tool_use") as stub:
        body = {"model": "m", "messages": [], "tools": [{"name": "Read", "input_schema": {}}]}
        with _post(stub.base_url + "/v1/messages", body) as resp:
            first = json.load(resp)
        with _post(stub.base_url + "/v1/messages", body) as resp:
            second = json.load(resp)
    assert first["stop_reason"] == "tool_use" and first["content"][0]["name"] == "Read"
    assert second["stop_reason"] == "end_turn" and second["content"][0]["text"] == TEXT


def test_hang_mode_never_answers_model_calls():
    with AnthropicStub(mode="hang") as stub:
        with pytest.raises((socket.timeout, TimeoutError, urllib.error.URLError)):
            _post(stub.base_url + "/v1/messages", {"model": "m", "messages": []}, timeout=0.5)
        # other paths still answer
        with urllib.request.urlopen(stub.base_url + "/v1/models", timeout=5) as resp:
            assert json.load(resp)["data"]


def test_unknown_paths_are_logged_and_answered():
    with AnthropicStub() as stub:
        with urllib.request.urlopen(stub.base_url + "/api/hello", timeout=5) as resp:
            assert resp.status == 200
        assert stub.unknown_paths() == ["GET /api/hello"]


def test_openai_responses_stream_reports_fixed_usage():
    from tests.stubs import openai as oa

    with (
        oa.OpenAIStub() as stub,
        _post(stub.base_url + "/v1/responses", {"model": "gpt-x", "stream": True, "input": []}) as resp,
    ):
        events = _sse_events(resp.read().decode())
    names = [n for n, _ in events]
    assert names[0] == "response.created" and names[-1] == "response.completed"
    done = events[-1][1]["response"]
    assert done["usage"]["input_tokens"] == oa.USAGE["input_tokens"]
    assert done["usage"]["output_tokens"] == oa.USAGE["output_tokens"]
    assert done["output"][0]["content"][0]["text"] == oa.TEXT


def test_openai_chat_stream_ends_with_usage_and_done():
    from tests.stubs import openai as oa

    with (
        oa.OpenAIStub() as stub,
        _post(stub.base_url + "/v1/chat/completions", {"model": "m", "stream": True, "messages": []}) as resp,
    ):
        raw = resp.read().decode()
    assert raw.rstrip().endswith("data: [DONE]")
    chunks = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == oa.TEXT
    assert chunks[-1]["usage"]["prompt_tokens"] == oa.USAGE["input_tokens"]


def test_openai_unauthorized():
    from tests.stubs import openai as oa

    with oa.OpenAIStub(mode="unauthorized") as stub, pytest.raises(urllib.error.HTTPError) as err:
        _post(stub.base_url + "/v1/chat/completions", {"model": "m", "messages": []})
    assert err.value.code == 401
    assert json.load(err.value)["error"]["code"] == "invalid_api_key"


def test_gemini_stream_and_router_json():
    from tests.stubs import gemini as gm

    with gm.GeminiStub() as stub:
        url = stub.base_url + "/v1beta/models/gemini-x:streamGenerateContent?alt=sse"
        with _post(url, {"contents": []}) as resp:
            events = _sse_events(resp.read().decode())
        router = {
            "contents": [{"parts": [{"text": "model_choice"}]}],
            "generationConfig": {"responseMimeType": "application/json"},
        }
        with _post(stub.base_url + "/v1beta/models/gemini-lite:generateContent", router) as resp:
            routed = json.load(resp)
    assert events[-1][1]["usageMetadata"] == gm.USAGE
    assert events[0][1]["candidates"][0]["content"]["parts"][0]["text"] == gm.TEXT
    answer = json.loads(routed["candidates"][0]["content"]["parts"][0]["text"])
    assert answer["model_choice"] == "flash"
