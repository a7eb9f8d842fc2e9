"""The model gateway's cost: added latency per request and to the first streamed byte, and memory with
200 concurrent streams, measured side by side against the same stub reached directly.

    KUBECONFIG=... python bench/model_gateway.py [--requests 300] [--streams 200]

Runs a real gateway process (`python -m harness_operator.modelgateway`, its grants watched in the
cluster named by KUBECONFIG, namespace harness-system), a real Redis (Debian's redis-server) and the
Anthropic stub on loopback. It writes one grant as the operator would, then interleaves REQUESTS
non-streamed requests to the stub directly and through the gateway (the same body, one connection
each, so both pay the same client), then as many streamed ones timing the first byte, then holds STREAMS
streams open at once through the gateway (the stub answers after 3 s) and samples the gateway's RSS.
Prints medians, p95s and the ratio; the grant is deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import aiohttp
from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.stubs.anthropic import AnthropicStub  # noqa: E402

from harness_operator.api.v1alpha1 import HarnessRun  # noqa: E402
from harness_operator.contract.model_access import ModelAttemptGrant, ModelGrant, token_sha256  # noqa: E402
from harness_operator.core.config import OperatorConfig  # noqa: E402
from harness_operator.core.pod.model_grant import build_model_grant_map, model_token  # noqa: E402

NAMESPACE = "harness-system"
KEY = "bench-key"
BODY = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 256,
    "messages": [{"role": "user", "content": "hi " * 300}],
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@contextmanager
def gateway(upstream: str) -> Iterator[tuple[subprocess.Popen[bytes], int, str]]:
    """Redis, a grant and the gateway process; yields (process, port, token)."""
    redis_port, port, admin = free_port(), free_port(), free_port()
    redis = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(redis_port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
    )
    settings = OperatorConfig(
        model_gateway_service="x", model_gateway_namespace=NAMESPACE, model_gateway_key=KEY
    )
    metadata = {"name": "bench", "namespace": "bench", "uid": "uid-bench"}
    run = HarnessRun.model_validate({"metadata": metadata, "spec": {"provider": "claude", "prompt": "x"}})
    token = model_token(run, settings, 1)
    grant = ModelGrant(namespace="bench", run="bench", uid="uid-bench", attempts={
        "1": ModelAttemptGrant(token_sha256=token_sha256(token), vendor="anthropic")})  # fmt: skip
    body = build_model_grant_map(run, settings, grant)
    core = client.CoreV1Api()
    with suppress(client.ApiException):
        core.delete_namespaced_config_map(body["metadata"]["name"], NAMESPACE)
    core.create_namespaced_config_map(NAMESPACE, body)
    env = {
        "PATH": os.environ["PATH"], "KUBECONFIG": os.environ["KUBECONFIG"], "HARNESS_NAMESPACE": NAMESPACE,
        "HARNESS_PORT": str(port), "HARNESS_ADMIN_PORT": str(admin),
        "HARNESS_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0", "HARNESS_GATEWAY_KEY": KEY,
        "HARNESS_KEY_ANTHROPIC": "sk-bench", "HARNESS_UPSTREAM_ANTHROPIC": upstream,
    }  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "harness_operator.modelgateway"], env=env)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield proc, port, token
    finally:
        proc.terminate()
        proc.wait()
        redis.terminate()
        redis.wait()
        core.delete_namespaced_config_map(body["metadata"]["name"], NAMESPACE)


async def timed(session: aiohttp.ClientSession, url: str, token: str, stream: bool) -> tuple[float, float]:
    """(seconds to the first byte of the body, seconds to its end) of one request."""
    started = time.perf_counter()
    async with session.post(url, json={**BODY, "stream": stream}, headers={"x-api-key": token}) as response:
        await response.content.readany()
        first = time.perf_counter() - started
        await response.read()
        assert response.status == 200, response.status
    return first, time.perf_counter() - started


def summary(name: str, direct: list[float], through: list[float]) -> None:
    def p95(values: list[float]) -> float:
        return sorted(values)[int(0.95 * (len(values) - 1))]

    d50, g50 = statistics.median(direct), statistics.median(through)
    print(
        f"{name}: direct p50 {d50 * 1000:.2f} ms p95 {p95(direct) * 1000:.2f} ms; through the gateway p50 "
        f"{g50 * 1000:.2f} ms p95 {p95(through) * 1000:.2f} ms; added p50 {(g50 - d50) * 1000:.2f} ms, "
        f"p95 {(p95(through) - p95(direct)) * 1000:.2f} ms; ratio {g50 / d50:.2f}"
    )


async def measure(
    stub: AnthropicStub, port: int, token: str, proc: subprocess.Popen[bytes], args: argparse.Namespace
) -> None:
    direct_url, gateway_url = f"{stub.base_url}/v1/messages", f"http://127.0.0.1:{port}/anthropic/v1/messages"
    async with aiohttp.ClientSession() as session:
        for _ in range(20):  # warm both paths (connections, the grant, the price table)
            await timed(session, direct_url, "sk-bench", False)
            await timed(session, gateway_url, token, False)
        for stream in (False, True):
            direct, through = [], []
            for _ in range(args.requests):
                direct.append((await timed(session, direct_url, "sk-bench", stream))[int(not stream)])
                through.append((await timed(session, gateway_url, token, stream))[int(not stream)])
            summary("first streamed byte" if stream else "request (non-streamed)", direct, through)
    idle = rss_mib(proc.pid)
    stub.delay = 3.0
    peak = idle
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        tasks = [asyncio.ensure_future(timed(session, gateway_url, token, True)) for _ in range(args.streams)]
        while not all(t.done() for t in tasks):
            peak = max(peak, rss_mib(proc.pid))
            await asyncio.sleep(0.1)
        results = [t.result() for t in tasks]
    stub.delay = 0.0
    print(f"memory: {idle:.1f} MiB idle, {peak:.1f} MiB peak with {args.streams} concurrent streams "
          f"({len(results)} answered)")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--streams", type=int, default=200)
    args = parser.parse_args()
    if shutil.which("redis-server") is None:
        print("needs redis-server (apt-get install redis-server)", file=sys.stderr)
        return 2
    config.load_kube_config()
    with AnthropicStub(mode="ok") as stub, gateway(stub.base_url) as (proc, port, token):
        asyncio.run(measure(stub, port, token, proc, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
