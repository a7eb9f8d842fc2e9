"""The red team's attacks on the model gateway's intake (issue 49), replayed against two real gateway
processes, the vendor stubs (billing `n` and `candidateCount` answers as the vendors do) and a real Redis,
with the grants in the API server (the harness of test_model_gateway.py).

Checked: a path with dot segments or escapes never reaches another vendor endpoint with the platform's
key (item 6); a body the gateway cannot parse is refused, never forwarded unmetered (item 10); a body past
the size limit, or made of empty objects, is refused without the replica's memory growing past a bound,
and the replica serves on (item 8); under a cap, more answers than the worst case holds, input the vendor
fetches itself and tools the vendor runs are refused by name, while the CLIs' own bodies pass (item 4).
"""

from __future__ import annotations

import asyncio
import gzip
import http.client
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes import client

from harness_operator.contract.model_access import ModelAttemptGrant, ModelGrant, token_sha256
from harness_operator.core.pod.model_grant import build_model_grant_map, model_token

from .operator_env import RELEASE_NAMESPACE
from .test_model_gateway import MESSAGE, VENDOR_KEYS, Env, Gateway, env, post, sha

__all__ = ["env"]  # the module's fixture: its own two gateways, Redis and stubs

HEADERS = {"anthropic": "x-api-key", "openai": "authorization", "gemini": "x-goog-api-key"}


def grant(env: Env, name: str, vendor: str, **caps: Any) -> str:
    """A run's grant of one attempt on `vendor` with the run's `caps`, as the operator writes it; its token."""
    run = env.run(name, f"uid-{name}")
    token = model_token(run, env.config, 1)
    attempt = ModelAttemptGrant(token_sha256=token_sha256(token), vendor=vendor)
    body = build_model_grant_map(
        run,
        env.config,
        ModelGrant(namespace="team-a", run=name, uid=f"uid-{name}", attempts={"1": attempt}, **caps),
    )
    core = client.CoreV1Api(env.kube)
    try:
        core.create_namespaced_config_map(RELEASE_NAMESPACE, body)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
        core.replace_namespaced_config_map(body["metadata"]["name"], RELEASE_NAMESPACE, body)
    return token


def raw(
    gateway: Gateway, method: str, target: str, token: str, vendor: str, body: bytes = b"", **headers: str
) -> tuple[int, bytes]:
    """A request sent with its target byte for byte (no client normalises or encodes it)."""
    connection = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=30)
    value = f"Bearer {token}" if vendor == "openai" else token
    connection.putrequest(method, target, skip_accept_encoding=True)
    for name, header in {HEADERS[vendor]: value, "content-type": "application/json", **headers}.items():
        connection.putheader(name, header)
    if "transfer-encoding" not in headers:
        connection.putheader("content-length", str(len(body)))
    connection.endheaders()
    try:
        if "transfer-encoding" in headers:
            for at in range(0, len(body), 1 << 20):
                chunk = body[at : at + (1 << 20)]
                connection.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            connection.send(b"0\r\n\r\n")
        else:
            connection.send(body)
    except (BrokenPipeError, ConnectionResetError):
        pass  # refused before it was all sent: its answer is read below
    response = connection.getresponse()
    try:
        return response.status, response.read()
    finally:
        connection.close()


def seen_since(stub: Any, before: int) -> list[str]:
    return [f"{r.method} {r.path}" for r in stub.requests[before:]]


# --- item 6: dot segments -----------------------------------------------------------------------------

TRAVERSALS = [
    "/openai/v1/models/../files",  # the finding
    "/openai/v1/models/../chat/completions/chatcmpl-1",  # a stored completion
    "/openai/v1/models/../files/file-1/content",
    "/openai/v1/models/../batches",
    "/openai/v1/models/%2e%2e/files",
    "/openai/v1/models/%2E%2E/files",
    "/openai/v1/models/.%2e/files",
    "/openai/v1/models/x%2f..%2f..%2ffiles",
    "/openai/v1/models/x%5c..%5cfiles",
    "/openai/v1/models/x\\..\\files",
    "/openai/v1/models//files",
    "/openai//v1/files",
    "/openai/v1/models/./../files",
    "/anthropic/v1/models/../messages/batches",  # Anthropic's batches
]


@pytest.mark.parametrize("target", TRAVERSALS)
def test_a_path_with_dot_segments_or_escapes_reaches_no_other_endpoint(env: Env, target: str) -> None:
    vendor = target.split("/")[1]
    token = grant(env, f"paths-{vendor}", vendor)
    stub = env.stubs[vendor]
    before = len(stub.requests)
    status, answer = raw(env.gateways[0], "GET", target, token, vendor)
    assert status in (400, 404), (status, answer)
    assert "harness model gateway" in json.loads(answer)["error"]["message"]
    assert seen_since(stub, before) == []  # nothing reached the vendor, with or without its key
    # The endpoint it names directly stays what it was: listed and forwarded, or refused.
    assert raw(env.gateways[0], "GET", f"/{vendor}/v1/models/x", token, vendor)[0] == 200
    assert seen_since(stub, before) == ["GET /v1/models/x"]


# --- item 10: a body the gateway cannot parse -----------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        # The finding: one invalid UTF-8 byte, max_tokens far past what 0.05 USD allows.
        (b'{"model": "claude-sonnet-4-5", "max_tokens": 32000, "messages": [{"role": "user", '
         b'"content": "Hi \xff"}]}', {}),
        (json.dumps({**MESSAGE, "max_tokens": 32000}).encode("utf-16"), {}),
        (b'{"model": "claude-sonnet-4-5", "max_tokens": NaN, "messages": []}', {}),
        (b"[" + json.dumps({**MESSAGE, "max_tokens": 32000}).encode() + b"]", {}),
        (gzip.compress(json.dumps({**MESSAGE, "max_tokens": 32000}).encode()), {"content-encoding": "gzip"}),
    ],
)  # fmt: skip
def test_a_body_the_gateway_cannot_parse_is_refused_never_forwarded(
    env: Env, body: bytes, headers: dict[str, str]
) -> None:
    token = grant(env, "unparsed", "anthropic", max_cost_usd=0.05)
    stub = env.stubs["anthropic"]
    before = len(stub.requests)
    status, answer = raw(
        env.gateways[0], "POST", "/anthropic/v1/messages", token, "anthropic", body, **headers
    )
    error = json.loads(answer)
    assert status == 400 and error["error"]["type"] == "invalid_request_error", answer
    assert (
        "one JSON object in UTF-8" in error["error"]["message"] or "uncompressed" in error["error"]["message"]
    )
    assert seen_since(stub, before) == []


def test_a_key_sent_twice_reaches_the_vendor_once_as_the_gateway_read_it(env: Env) -> None:
    """The gateway reads the last `max_tokens` (100, within the cap: not clamped); a vendor's parser that
    keeps the first would have answered 32000 tokens past the reservation, had the bytes gone as sent."""
    token = grant(env, "twice", "anthropic", max_cost_usd=0.05)
    stub = env.stubs["anthropic"]
    before = len(stub.requests)
    text = '{"max_tokens": 32000, ' + json.dumps({**MESSAGE, "max_tokens": 100})[1:]
    status, _ = raw(env.gateways[0], "POST", "/anthropic/v1/messages", token, "anthropic", text.encode())
    assert status == 200
    sent = stub.requests[before].raw_body
    assert sent.count(b'"max_tokens"') == 1 and json.loads(sent)["max_tokens"] == 100, sent


# --- item 8: memory -------------------------------------------------------------------------------------


def peak_rss_mib(gateway: Gateway) -> float:
    status = Path(f"/proc/{gateway.proc.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))) / 1024


def empty_objects(size: int) -> bytes:
    """The finding's body: a message list of empty objects, `size` bytes."""
    head = b'{"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": ['
    count = (size - len(head) - 2) // 3
    return head + b"{}," * count + b"{}]}"


def test_a_body_past_the_limit_or_made_of_objects_never_takes_the_replicas_memory(env: Env) -> None:
    token = grant(env, "memory", "anthropic")
    gateway, stub = env.gateways[1], env.stubs["anthropic"]
    before, peak = len(stub.requests), peak_rss_mib(gateway)
    url = "/anthropic/v1/messages"
    # 24 MiB (the finding), with its length said and chunked: 413 in Anthropic's shape, read no further.
    for headers in ({}, {"transfer-encoding": "chunked"}):
        status, answer = raw(gateway, "POST", url, token, "anthropic", empty_objects(24 << 20), **headers)
        assert status == 413 and json.loads(answer)["error"]["type"] == "request_too_large", answer
        assert "modelGateway.maxRequestBytes" in json.loads(answer)["error"]["message"]
    # Under the limit (7 MiB), the same shape is refused before it is parsed.
    status, answer = raw(gateway, "POST", url, token, "anthropic", empty_objects(7 << 20))
    assert status == 400 and "'{' and '['" in json.loads(answer)["error"]["message"], answer
    grown = peak_rss_mib(gateway) - peak
    print(f"\nmeasured: peak RSS of the replica grew {grown:.1f} MiB over the 24 MiB and 7 MiB attacks")
    assert grown < 64, grown  # the body held once or twice, never its parse (785 MiB before)
    assert seen_since(stub, before) == []
    assert post(f"{gateway.url}{url}", token, MESSAGE)[0] == 200  # and it serves on


# --- item 4: what a worst case cannot bound, under a cap --------------------------------------------------

CHAT = {"model": "gpt-4.1", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4000}
RESPONSES = {"model": "gpt-4.1", "input": "Hi", "max_output_tokens": 4000}
GEMINI_URL = "/gemini/v1beta/models/gemini-2.5-flash:generateContent"
ATTACKS = [
    ("openai", "/openai/v1/chat/completions", {**CHAT, "n": 64}, "`n`"),
    ("gemini", GEMINI_URL, {"contents": [{"parts": [{"text": "Hi"}]}],
                            "generationConfig": {"candidateCount": 8, "maxOutputTokens": 4000}}, "candidateCount"),
    ("openai", "/openai/v1/responses", {**RESPONSES, "previous_response_id": "resp_big"}, "previous_response_id"),
    ("openai", "/openai/v1/responses", {**RESPONSES, "input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "https://example.com/huge.png"}]}]}, "input[0].content[0]"),
    ("openai", "/openai/v1/responses", {**RESPONSES, "input": [{"role": "user", "content": [
        {"type": "input_file", "file_id": "file-big"}]}]}, "input[0].content[0]"),
    ("openai", "/openai/v1/responses", {**RESPONSES, "tools": [{"type": "web_search_preview"}]}, "web_search"),
    ("openai", "/openai/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]}, "messages[0].content[0]"),
    ("anthropic", "/anthropic/v1/messages", {**MESSAGE, "tools": [
        {"type": "web_fetch_20250910", "name": "web_fetch"}]}, "web_fetch"),
    ("anthropic", "/anthropic/v1/messages", {**MESSAGE, "messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}}]}]}, "messages[0]"),
    ("gemini", GEMINI_URL, {"contents": [{"parts": [{"text": "Hi"}]}], "cachedContent": "cachedContents/big"},
     "cachedContent"),
    ("gemini", GEMINI_URL, {"contents": [{"parts": [{"text": "Hi"}]}], "tools": [{"urlContext": {}}]},
     "urlContext"),
]  # fmt: skip


@pytest.mark.parametrize(("vendor", "target", "body", "named"), ATTACKS, ids=[a[3] for a in ATTACKS])
def test_what_the_worst_case_cannot_bound_is_refused_under_a_cap_by_name(
    env: Env, vendor: str, target: str, body: dict[str, Any], named: str
) -> None:
    token = grant(env, f"bounded-{vendor}", vendor, max_cost_usd=0.05)
    stub = env.stubs[vendor]
    before = len(stub.requests)
    status, answer = raw(env.gateways[0], "POST", target, token, vendor, json.dumps(body).encode())
    message = json.loads(answer)["error"]["message"]
    assert status == 400 and named in message and "under the attempt's cap" in message, answer
    assert seen_since(stub, before) == []


def test_more_answers_are_billed_as_many_times_and_refused_only_under_a_cap(env: Env) -> None:
    """The stubs bill `n` and `candidateCount` answers as the vendors do: uncapped, the meter counts each;
    under a cap the worst case holds one answer, so asking for eight is refused, not billed eight times
    what was held."""
    token = grant(env, "answers", "openai")
    status, _ = raw(env.gateways[0], "POST", "/openai/v1/chat/completions", token, "openai",
                    json.dumps({**CHAT, "n": 8}).encode())  # fmt: skip
    assert status == 200
    meter = env.meter(env.gateways[0], "uid-answers", 1)
    assert meter.output_tokens == 8 * 56
    capped = grant(env, "answers-capped", "openai", max_cost_usd=0.05)
    status, _ = raw(env.gateways[0], "POST", "/openai/v1/chat/completions", capped, "openai",
                    json.dumps({**CHAT, "n": 8}).encode())  # fmt: skip
    assert status == 400
    assert env.meter(env.gateways[0], "uid-answers-capped", 1).output_tokens == 0


CLI_LIKE = [
    ("anthropic", "/anthropic/v1/messages", {
        **MESSAGE, "stream": True, "system": [{"type": "text", "text": "s"}], "metadata": {"user_id": "u"},
        "thinking": {"type": "enabled", "budget_tokens": 1024}, "context_management": {"edits": []},
        "output_config": {"effort": "high"}, "tool_choice": {"type": "auto"},
        "tools": [{"name": "Read", "input_schema": {"type": "object"}}, {"type": "bash_20250124", "name": "bash"}],
    }),
    ("openai", "/openai/v1/responses", {
        "model": "gpt-4.1", "instructions": "i", "input": [{"type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "Hi"}]}], "stream": True, "store": False,
        "tools": [{"type": "function", "name": "shell", "parameters": {}}], "tool_choice": "auto",
        "parallel_tool_calls": False, "reasoning": {"effort": "low"}, "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "k", "text": {"verbosity": "low"}, "client_metadata": {},
    }),
    ("openai", "/openai/v1/chat/completions", {
        **CHAT, "stream": True, "stream_options": {"include_usage": True}, "temperature": 0, "top_p": 1,
        "frequency_penalty": 0, "presence_penalty": 0,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    }),
    ("gemini", "/gemini/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", {
        "contents": [{"role": "user", "parts": [{"text": "Hi"}]}], "systemInstruction": {"parts": [{"text": "s"}]},
        "generationConfig": {"temperature": 0, "thinkingConfig": {"includeThoughts": True}},
        "tools": [{"functionDeclarations": [{"name": "f", "parameters": {"type": "object"}}]}],
    }),
]  # fmt: skip


@pytest.mark.parametrize(("vendor", "target", "body"), CLI_LIKE, ids=[c[1] for c in CLI_LIKE])
def test_the_clis_bodies_are_forwarded_under_a_cap(
    env: Env, vendor: str, target: str, body: dict[str, Any]
) -> None:
    token = grant(env, f"clis-{vendor}", vendor, max_cost_usd=5.0)
    stub = env.stubs[vendor]
    before = len(stub.requests)
    status, answer = raw(env.gateways[0], "POST", target, token, vendor, json.dumps(body).encode())
    assert status == 200, answer
    assert len(seen_since(stub, before)) == 1
    assert set(stub.requests[before].body) >= set(body)


def test_the_vendors_key_never_follows_a_refused_path(env: Env) -> None:
    """The stub logs the hash of each key it sees: none arrived on any refused request above."""
    for vendor, stub in env.stubs.items():
        assert all(r.path.startswith(("/v1/models", "/v1/messages", "/v1/responses", "/v1/chat", "/v1beta/models"))
                   for r in stub.requests), [r.path for r in stub.requests]  # fmt: skip
        assert {tuple(r.auth_sha256) for r in stub.requests} <= {(sha(VENDOR_KEYS[vendor]),)}


# --- item 11: made-up tokens ------------------------------------------------------------------------------


def configmap_gets(kube: client.ApiClient) -> float:
    """GETs of ConfigMaps the API server has answered (its own apiserver_request_total)."""
    method, url, headers, body, _ = kube.param_serialize("GET", "/metrics", auth_settings=["BearerToken"])
    response = kube.call_api(method, url, header_params=headers, body=body)
    response.read()
    total = 0.0
    for line in response.data.decode().splitlines():
        labels = ('resource="configmaps"', 'verb="GET"', 'scope="resource"')
        if line.startswith("apiserver_request_total{") and all(label in line for label in labels):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_flood_of_made_up_tokens_costs_a_bounded_number_of_reads_and_blocks_no_one(env: Env) -> None:
    token = grant(env, "flooded", "anthropic")
    gateway = env.gateways[0]
    url = f"{gateway.url}/anthropic/v1/messages"
    assert post(url, token, MESSAGE)[0] == 200  # its grant is in the watch's cache

    async def flood() -> tuple[list[int], list[float]]:
        async with aiohttp.ClientSession() as session:

            async def made_up(i: int) -> int:
                headers = {"x-api-key": f"hmg-model-grant.made-up-{i}.1.{'0' * 64}"}
                async with session.post(url, json=MESSAGE, headers=headers) as response:
                    return response.status

            async def real() -> float:
                started = time.monotonic()
                async with session.post(url, json=MESSAGE, headers={"x-api-key": token}) as response:
                    assert response.status == 200
                return time.monotonic() - started

            tasks = [asyncio.ensure_future(made_up(i)) for i in range(600)]
            waits = [await real() for _ in range(5)]
            return list(await asyncio.gather(*tasks)), waits

    before, started = configmap_gets(env.kube), time.monotonic()
    statuses, waits = asyncio.run(flood())
    took, reads = time.monotonic() - started, configmap_gets(env.kube) - before
    print(
        f"\nmeasured: 600 made-up tokens in {took:.2f}s cost {reads:.0f} ConfigMap reads; a live token's "
        f"requests meanwhile answered in {max(waits) * 1000:.0f} ms at most"
    )
    assert set(statuses) <= {401, 503} and 503 in statuses, set(statuses)
    assert reads <= 20 + 5 * took + 10, reads  # the burst, the rate, and the cluster's own reads
    assert max(waits) < 2.0, waits
