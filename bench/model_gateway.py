"""The model gateway's cost: added latency per request and to the first streamed byte, measured side by
side against the same stub reached directly, one request at a time (bench/model_gateway_load.py measures
it at concurrency, with its memory, and reuses the helpers here).

    KUBECONFIG=... python bench/model_gateway.py [--requests 300]

Runs a real gateway process (`python -m harness_operator.modelgateway`, its grants watched in the
cluster named by KUBECONFIG, namespace harness-system), a real Redis (Debian's redis-server) and the
Anthropic stub on loopback. It writes one grant as the operator would, then interleaves REQUESTS
non-streamed requests to the stub directly and through the gateway (the same body, one connection
each, so both pay the same client), then as many streamed ones timing the first byte. Prints medians,
p95s and the ratio; the grant is deleted at the end.
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
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

import aiohttp
from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.stubs.anthropic import AnthropicStub  # noqa: E402

from harness_operator.api.v1alpha1 import HarnessRun  # noqa: E402
from harness_operator.contract.model_access import ModelAttemptGrant, ModelGrant, token_sha256  # noqa: E402
from harness_operator.contract.tracing import (  # noqa: E402
    build_traceparent,
    compute_attempt_span_id,
    compute_trace_id,
)
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


def cpu_seconds(pid: int) -> float:
    """The process's user and system CPU so far (utime + stime of /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: Sequence[float], share: float) -> float:
    """The nearest-rank percentile (`share` 0.5 is the median's lower neighbour)."""
    return sorted(values)[int(share * (len(values) - 1))]


def build_grant(
    namespace: str, vendors: Sequence[str], max_cost_usd: float | None = None, traced: bool = False
) -> tuple[dict[str, Any], list[str]]:
    """A run's grant ConfigMap as the operator writes it, one attempt per entry of `vendors` (its route),
    and the attempts' tokens in that order; `traced`: each attempt carries its span's traceparent, as the
    operator writes it when the run is traced."""
    settings = OperatorConfig(
        model_gateway_service="x", model_gateway_namespace=NAMESPACE, model_gateway_key=KEY
    )
    uid = f"uid-{namespace}"
    metadata = {"name": "bench", "namespace": namespace, "uid": uid}
    run = HarnessRun.model_validate({"metadata": metadata, "spec": {"provider": "claude", "prompt": "x"}})
    tokens = [model_token(run, settings, i) for i in range(1, len(vendors) + 1)]
    attempts = {
        str(i): ModelAttemptGrant(
            token_sha256=token_sha256(token),
            vendor=vendor,
            trace_parent=build_traceparent(compute_trace_id(uid), compute_attempt_span_id(uid, i))
            if traced
            else None,
        )
        for i, (token, vendor) in enumerate(zip(tokens, vendors, strict=True), start=1)
    }
    grant = ModelGrant.model_validate(
        {"namespace": namespace, "run": "bench", "uid": uid, "attempts": attempts, "maxCostUSD": max_cost_usd}
    )
    return build_model_grant_map(run, settings, grant), tokens


@contextmanager
def grant_maps(bodies: Sequence[dict[str, Any]]) -> Iterator[None]:
    """The grants' ConfigMaps in the gateway's namespace while the block runs."""
    core = client.CoreV1Api()
    names = [body["metadata"]["name"] for body in bodies]
    for name, body in zip(names, bodies, strict=True):
        with suppress(client.ApiException):
            core.delete_namespaced_config_map(name, NAMESPACE)
        core.create_namespaced_config_map(NAMESPACE, body)
    try:
        yield
    finally:
        for name in names:
            core.delete_namespaced_config_map(name, NAMESPACE)


@contextmanager
def redis_server() -> Iterator[str]:
    """Debian's redis-server on loopback, without persistence; yields its URL."""
    port = free_port()
    redis = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        redis.terminate()
        redis.wait()


@contextmanager
def gateway_process(
    redis_url: str,
    upstreams: Mapping[str, str],
    log: IO[bytes] | None = None,
    settings: Mapping[str, str] | None = None,
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """The gateway process (its grants watched in NAMESPACE), each vendor of `upstreams` keyed, once it
    is ready; yields (process, port). `log` takes its output (default: this process's); `settings`:
    environment variables of its own (HARNESS_TRACING_ENDPOINT)."""
    port, admin = free_port(), free_port()
    env = {
        "PATH": os.environ["PATH"], "KUBECONFIG": os.environ["KUBECONFIG"], "HARNESS_NAMESPACE": NAMESPACE,
        "HARNESS_PORT": str(port), "HARNESS_ADMIN_PORT": str(admin), "HARNESS_REDIS_URL": redis_url,
        "HARNESS_GATEWAY_KEY": KEY,
        **{f"HARNESS_KEY_{vendor.upper()}": f"sk-bench-{vendor}" for vendor in upstreams},
        **{f"HARNESS_UPSTREAM_{vendor.upper()}": url for vendor, url in upstreams.items()},
    }  # fmt: skip
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    env.update(settings or {})
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness_operator.modelgateway"], env=env, stdout=log, stderr=log
    )
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
        yield proc, port
    finally:
        proc.terminate()
        proc.wait()


@contextmanager
def gateway(upstream: str) -> Iterator[tuple[subprocess.Popen[bytes], int, str]]:
    """Redis, a grant and the gateway process; yields (process, port, token)."""
    body, (token,) = build_grant("bench", ["anthropic"])
    with redis_server() as url, grant_maps([body]), gateway_process(url, {"anthropic": upstream}) as found:
        yield found[0], found[1], token


async def time_request(
    session: aiohttp.ClientSession, url: str, body: Mapping[str, Any], headers: Mapping[str, str]
) -> tuple[float, float, int]:
    """(seconds to the first byte of the answer's body, seconds to its end, status) of one request."""
    started = time.perf_counter()
    async with session.post(url, json=body, headers=headers) as response:
        await response.content.readany()
        first = time.perf_counter() - started
        await response.read()
    return first, time.perf_counter() - started, response.status


async def timed(session: aiohttp.ClientSession, url: str, token: str, stream: bool) -> tuple[float, float]:
    """(seconds to the first byte of the body, seconds to its end) of one request."""
    first, total, status = await time_request(session, url, {**BODY, "stream": stream}, {"x-api-key": token})
    assert status == 200, status
    return first, total


def summary(name: str, direct: list[float], through: list[float]) -> None:
    d50, g50 = statistics.median(direct), statistics.median(through)
    d95, g95 = percentile(direct, 0.95), percentile(through, 0.95)
    print(
        f"{name}: direct p50 {d50 * 1000:.2f} ms p95 {d95 * 1000:.2f} ms; through the gateway p50 "
        f"{g50 * 1000:.2f} ms p95 {g95 * 1000:.2f} ms; added p50 {(g50 - d50) * 1000:.2f} ms, "
        f"p95 {(g95 - d95) * 1000:.2f} ms; ratio {g50 / d50:.2f}"
    )


async def measure(stub: AnthropicStub, port: int, token: str, args: argparse.Namespace) -> None:
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


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    if shutil.which("redis-server") is None:
        print("needs redis-server (apt-get install redis-server)", file=sys.stderr)
        return 2
    config.load_kube_config()
    with AnthropicStub(mode="ok") as stub, gateway(stub.base_url) as (_, port, token):
        asyncio.run(measure(stub, port, token, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
