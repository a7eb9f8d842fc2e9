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
        headers={"content-type": "application/json", "x-api-key": "sk-test-unit", "anthropic-version": "2023-06-01"},
        method="POST",
    )
    return urllib.request.urlopen(req, timeout=timeout)


def _sse_events(raw: str) -> list[tuple[str, dict]]:
    events = []
    for block in raw.split("\n\n"):
        name, data = None, None
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[len("event: "):]
            elif line.startswith("data: "):
                data = json.loads(line[len("data: "):])
        if data is not None:
            events.append((name, data))
    return events


def test_streaming_messages_reports_fixed_usage():
    with AnthropicStub(mode="ok") as stub:
        assert stub.base_url.startswith("http://127.0.0.1:")
        with _post(stub.base_url + "/v1/messages?beta=true", {"model": "claude-x", "stream": True, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}) as resp:
            assert resp.status == 200
            assert resp.headers["content-type"].startswith("text/event-stream")
            events = _sse_events(resp.read().decode())
        names = [n for n, _ in events]
        assert names[0] == "message_start" and names[-1] == "message_stop"
        start = events[0][1]["message"]
        assert start["model"] == "claude-x"
        assert start["usage"]["input_tokens"] == USAGE["input_tokens"]
        delta = [d for n, d in events if n == "message_delta"][0]
        assert delta["usage"] == USAGE
        assert delta["delta"]["stop_reason"] == "end_turn"
        text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
        assert text == TEXT
        calls = stub.model_calls()
        assert len(calls) == 1 and calls[0].query == {"beta": ["true"]} and calls[0].auth_present


def test_non_streaming_messages():
    with AnthropicStub() as stub:
        with _post(stub.base_url + "/v1/messages", {"model": "m", "messages": []}) as resp:
            body = json.load(resp)
    assert body["type"] == "message"
    assert body["content"] == [{"type": "text", "text": TEXT}]
    assert body["usage"] == USAGE


def test_unauthorized_mode_answers_401():
    with AnthropicStub(mode="unauthorized") as stub:
        with pytest.raises(urllib.error.HTTPError) as err:
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
