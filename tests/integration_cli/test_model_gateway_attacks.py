"""The red team's attacks on the model gateway's intake (issue 49, items 6, 10, 8, 4) replayed against the
real gateway process (tests/integration_cli/static_gateway.py: modelgateway.server and its store on a real
Redis; grants given at its start instead of watched in a cluster) in front of the vendor stubs, which bill
`n` and `candidateCount` answers as the vendors do. Each request is sent byte for byte (no client
normalises its path); the stubs show what reached a vendor. tests/integration/test_model_gateway_intake.py
replays the same on the cluster's gateways, with the grants in the API server (and item 11)."""

from __future__ import annotations

import gzip
import hashlib
import http.client
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.integration_cli.test_clis_through_model_gateway import _free_port
from tests.lib import processes
from tests.stubs.anthropic import AnthropicStub
from tests.stubs.gemini import GeminiStub
from tests.stubs.openai import OpenAIStub

HEADERS = {"anthropic": "x-api-key", "openai": "authorization", "gemini": "x-goog-api-key"}
MESSAGE = {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": [{"role": "user", "content": "Hi"}]}


def _grant(name: str, token: str, vendor: str, cap: float | None) -> dict[str, Any]:
    attempt: dict[str, Any] = {"token_sha256": hashlib.sha256(token.encode()).hexdigest(), "vendor": vendor}
    grant: dict[str, Any] = {"namespace": "team-a", "run": name, "uid": f"uid-{name}"}
    if cap is not None:
        grant["maxCostUSD"] = cap
    return {**grant, "attempts": {"1": attempt}}


@dataclass
class Gateway:
    proc: subprocess.Popen[bytes]
    port: int
    stubs: dict[str, Any]

    def send(
        self, method: str, target: str, body: bytes = b"", capped: bool = True, **headers: str
    ) -> tuple[int, Any]:
        """A request sent with its target byte for byte; (status, the answer's JSON)."""
        vendor = target.split("/")[1]
        token = _token(f"capped-{vendor}" if capped else f"free-{vendor}")
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        connection.putrequest(method, target, skip_accept_encoding=True)
        connection.putheader(HEADERS[vendor], f"Bearer {token}" if vendor == "openai" else token)
        connection.putheader("content-type", "application/json")
        for name, value in headers.items():
            connection.putheader(name, value)
        chunked = "transfer-encoding" in headers
        if not chunked:
            connection.putheader("content-length", str(len(body)))
        connection.endheaders()
        try:
            if chunked:
                for at in range(0, len(body), 1 << 20):
                    piece = body[at : at + (1 << 20)]
                    connection.send(b"%x\r\n%s\r\n" % (len(piece), piece))
                connection.send(b"0\r\n\r\n")
            else:
                connection.send(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before it was all sent: its answer is read below
        response = connection.getresponse()
        try:
            return response.status, json.loads(response.read() or b"null")
        finally:
            connection.close()

    def peak_rss_mib(self) -> float:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))) / 1024


def _token(name: str) -> str:
    return f"hmg-{name}.1.{hashlib.sha256(name.encode()).hexdigest()}"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    if shutil.which("redis-server") is None:
        pytest.skip("the model gateway's store is Debian's Redis: apt-get install redis-server")
    folder, redis_port, port = tmp_path_factory.mktemp("attacks"), _free_port(), _free_port()
    redis = processes.start(
        ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(folder)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    stubs = {
        "anthropic": AnthropicStub().start(),
        "openai": OpenAIStub().start(),
        "gemini": GeminiStub().start(),
    }
    grants = {}
    for vendor in stubs:
        grants[f"capped-{vendor}"] = _grant(f"capped-{vendor}", _token(f"capped-{vendor}"), vendor, 0.05)
        grants[f"free-{vendor}"] = _grant(f"free-{vendor}", _token(f"free-{vendor}"), vendor, None)
    with (folder / "gateway.log").open("w") as log:
        proc = processes.start(
            [sys.executable, "-m", "tests.integration_cli.static_gateway", str(port),
             f"redis://127.0.0.1:{redis_port}/0", json.dumps({v: s.base_url for v, s in stubs.items()}),
             json.dumps(grants)],
            stdout=subprocess.PIPE, stderr=log,
        )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        yield Gateway(proc, port, stubs)
    finally:
        processes.kill(proc)
        for stub in stubs.values():
            stub.stop()
        processes.stop(redis)


def _seen(stub: Any, before: int) -> list[str]:
    return [f"{r.method} {r.path}" for r in stub.requests[before:]]


@pytest.mark.parametrize(
    "target",
    [
        "/openai/v1/models/../files",  # the finding: reached /v1/files with the platform's key
        "/openai/v1/models/../chat/completions/chatcmpl-1",
        "/openai/v1/models/%2e%2e/files",
        "/openai/v1/models/.%2E/files",
        "/openai/v1/models/x%2f..%2f..%2ffiles",
        "/openai/v1/models/x%5c..%5cfiles",
        "/openai/v1/models/x\\..\\files",
        "/openai/v1/models//files",
        "/anthropic/v1/models/../messages/batches",
    ],
)
def test_item_6_a_path_with_dot_segments_or_escapes_reaches_no_other_endpoint(
    gateway: Gateway, target: str
) -> None:
    stub = gateway.stubs[target.split("/")[1]]
    before = len(stub.requests)
    status, answer = gateway.send("GET", target)
    assert status == 400 and "is refused" in json.dumps(answer), answer
    assert _seen(stub, before) == []
    assert (
        gateway.send("GET", target.split("/v1/")[0] + "/v1/models/x")[0] == 200
    )  # the direct path still goes


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        (b'{"model": "claude-sonnet-4-5", "max_tokens": 32000, "messages": [{"role": "user", '
         b'"content": "Hi \xff"}]}', {}),  # the finding: forwarded raw, unclamped, settled at nothing
        (json.dumps({**MESSAGE, "max_tokens": 32000}).encode("utf-16"), {}),
        (b'{"model": "claude-sonnet-4-5", "max_tokens": NaN, "messages": []}', {}),
        (gzip.compress(json.dumps({**MESSAGE, "max_tokens": 32000}).encode()), {"content-encoding": "gzip"}),
    ],
)  # fmt: skip
def test_item_10_a_body_the_gateway_cannot_parse_is_refused_never_forwarded(
    gateway: Gateway, body: bytes, headers: dict[str, str]
) -> None:
    stub = gateway.stubs["anthropic"]
    before = len(stub.requests)
    status, answer = gateway.send("POST", "/anthropic/v1/messages", body, **headers)
    assert status == 400 and answer["error"]["type"] == "invalid_request_error", answer
    assert _seen(stub, before) == []


def test_item_10_a_key_sent_twice_reaches_the_vendor_once_as_the_gateway_read_it(gateway: Gateway) -> None:
    stub = gateway.stubs["anthropic"]
    before = len(stub.requests)
    text = '{"max_tokens": 32000, ' + json.dumps(MESSAGE)[1:]  # read as 100 here; a first-key parser: 32000
    assert gateway.send("POST", "/anthropic/v1/messages", text.encode())[0] == 200
    sent = stub.requests[before].raw_body
    assert sent.count(b'"max_tokens"') == 1 and json.loads(sent)["max_tokens"] == 100, sent


def _empty_objects(size: int) -> bytes:
    head = b'{"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": ['
    return head + b"{}," * ((size - len(head) - 2) // 3) + b"{}]}"


def test_item_8_a_body_past_the_limit_or_made_of_objects_never_takes_the_replicas_memory(
    gateway: Gateway,
) -> None:
    stub, peak = gateway.stubs["anthropic"], gateway.peak_rss_mib()
    before = len(stub.requests)
    for headers in ({}, {"transfer-encoding": "chunked"}):  # the finding: 24 MiB of `{}` took 785 MiB
        status, answer = gateway.send("POST", "/anthropic/v1/messages", _empty_objects(24 << 20), **headers)
        assert status == 413 and answer["error"]["type"] == "request_too_large", answer
    status, answer = gateway.send("POST", "/anthropic/v1/messages", _empty_objects(7 << 20))
    assert status == 400 and "'{' and '['" in answer["error"]["message"], answer
    grown = gateway.peak_rss_mib() - peak
    print(
        f"\nmeasured: the replica's peak RSS grew {grown:.1f} MiB over the 24 MiB (twice) and 7 MiB attacks"
    )
    assert grown < 64, grown
    assert _seen(stub, before) == []
    assert gateway.send("POST", "/anthropic/v1/messages", json.dumps(MESSAGE).encode())[0] == 200


CHAT = {"model": "gpt-4.1", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4000}
GEMINI = "/gemini/v1beta/models/gemini-2.5-flash:generateContent"


@pytest.mark.parametrize(
    ("target", "body", "named"),
    [
        ("/openai/v1/chat/completions", {**CHAT, "n": 64}, "`n`"),
        (GEMINI, {"contents": [{"parts": [{"text": "Hi"}]}], "generationConfig": {"candidateCount": 8}},
         "candidateCount"),
        ("/openai/v1/responses", {"model": "gpt-4.1", "input": "Hi", "previous_response_id": "resp_1"},
         "previous_response_id"),
        ("/openai/v1/responses", {"model": "gpt-4.1", "input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": "https://example.com/a.png"}]}]}, "input[0].content[0]"),
        ("/openai/v1/responses", {"model": "gpt-4.1", "input": [{"type": "additional_tools", "tools": [
            {"type": "web_search"}]}]}, "input[0].tools"),
        ("/anthropic/v1/messages", {**MESSAGE, "tools": [{"type": "web_fetch_20250910", "name": "f"}]}, "tools"),
        ("/anthropic/v1/messages", {**MESSAGE, "messages": [{"role": "user", "content": [
            {"type": "document", "source": {"type": "file", "file_id": "f"}}]}]}, "messages[0].content[0]"),
        (GEMINI, {"contents": [{"parts": [{"text": "Hi"}]}], "cachedContent": "cachedContents/x"}, "cachedContent"),
        (GEMINI, {"contents": [{"parts": [{"text": "Hi"}]}], "tools": [{"googleSearch": {}}]}, "googleSearch"),
    ],
)  # fmt: skip
def test_item_4_what_the_worst_case_cannot_bound_is_refused_under_a_cap_by_name(
    gateway: Gateway, target: str, body: dict[str, Any], named: str
) -> None:
    stub = gateway.stubs[target.split("/")[1]]
    before = len(stub.requests)
    status, answer = gateway.send("POST", target, json.dumps(body).encode())
    assert status == 400 and named in answer["error"]["message"], answer
    assert _seen(stub, before) == []
    status, _ = gateway.send("POST", target, json.dumps(body).encode(), capped=False)
    assert status == 200  # without a cap there is nothing to hold: forwarded, and metered from the answer


def test_item_4_n_answers_are_billed_n_times_by_the_vendor(gateway: Gateway) -> None:
    """Why `n` cannot pass under a cap whose worst case holds one answer: the vendor bills each."""
    status, answer = gateway.send(
        "POST", "/openai/v1/chat/completions", json.dumps({**CHAT, "n": 8}).encode(), capped=False
    )
    assert status == 200 and len(answer["choices"]) == 8 and answer["usage"]["completion_tokens"] == 8 * 56
