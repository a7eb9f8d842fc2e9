"""`python3 -m harness_operator.modelgateway`: the model gateway, configured from its environment (I/O).

  HARNESS_NAMESPACE            the namespace whose grants it serves (default: its pod's)
  HARNESS_REDIS_URL            the meters' Redis (redis://HOST:PORT/DB); HARNESS_REDIS_PASSWORD its password
  HARNESS_GATEWAY_KEY          the operator's key, from which the meter reader's token is derived
  HARNESS_KEY_<VENDOR>         a vendor's key (ANTHROPIC, OPENAI, GEMINI); a vendor without one is refused
  HARNESS_UPSTREAM_<VENDOR>    a vendor's base URL (default: the vendor's public API)
  HARNESS_KEY_SECRET_<VENDOR>  the Secret (in HARNESS_NAMESPACE) holding the vendor's key: named to the CLI
                               when the vendor refuses the key (never its value)
  HARNESS_PORT, HARNESS_ADMIN_PORT   the vendors' port (8080) and the admin port (9102)
  HARNESS_MAX_REQUEST_BYTES    the largest request body it takes (default 8 MiB; the chart's
                               modelGateway.maxRequestBytes)
  HARNESS_MAX_IN_FLIGHT_PER_ATTEMPT, HARNESS_MAX_IN_FLIGHT_PER_NAMESPACE   the requests one attempt (8) and
                               one namespace (32) may have in flight on a replica; more are refused (429)
  HARNESS_UPSTREAM_CONNECTIONS the replica's connections to the vendors (512), above the namespace's limit
  HARNESS_TRACING_ENDPOINT, HARNESS_TRACING_SAMPLING   the OTLP/HTTP collector that takes the spans of
                               traced runs' model requests, and the share of runs traced (telemetry.py);
                               unset: no spans
Each model request of a run writes one audit record, a JSON line on stdout (logger harness.audit).
In a pod it talks to the API server as its ServiceAccount; elsewhere through KUBECONFIG.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

import aiohttp
from aiohttp import web
from kubernetes import client, config

from harness_operator.contract.model_access import build_meter_reader_token
from harness_operator.modelgateway.fairness import Limits, check_limits
from harness_operator.modelgateway.grants import GrantWatch
from harness_operator.modelgateway.intake import DEFAULT_MAX_REQUEST_BYTES
from harness_operator.modelgateway.server import Gateway, audit, build_apps
from harness_operator.modelgateway.store import MeterStore
from harness_operator.modelgateway.vendors import VENDORS
from harness_operator.telemetry import traces_from_env

SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def _namespace() -> str:
    if os.environ.get("HARNESS_NAMESPACE"):
        return os.environ["HARNESS_NAMESPACE"]
    with open(SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as handle:
        return handle.read().strip()


def _limits() -> Limits:
    defaults = Limits()
    return Limits(
        per_attempt=int(os.environ.get("HARNESS_MAX_IN_FLIGHT_PER_ATTEMPT") or defaults.per_attempt),
        per_namespace=int(os.environ.get("HARNESS_MAX_IN_FLIGHT_PER_NAMESPACE") or defaults.per_namespace),
        upstream_connections=int(
            os.environ.get("HARNESS_UPSTREAM_CONNECTIONS") or defaults.upstream_connections
        ),
    )


def _audit_to_stdout() -> None:
    """The audit records, one JSON line each, on stdout (the message is the line)."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    audit.addHandler(handler)
    audit.setLevel(logging.INFO)
    audit.propagate = False


async def serve() -> None:
    limits = _limits()
    if why := check_limits(limits):
        raise SystemExit(f"harness-model-gateway: {why}")
    try:
        traces = traces_from_env("harness-model-gateway")
    except ValueError as exc:
        raise SystemExit(f"harness-model-gateway: {exc}") from None
    _audit_to_stdout()
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    namespace = _namespace()
    grants = GrantWatch(client.CoreV1Api(), namespace)
    grants.start()
    gateway = Gateway(
        grants=grants,
        store=MeterStore(os.environ["HARNESS_REDIS_URL"], os.environ.get("HARNESS_REDIS_PASSWORD") or None),
        keys={
            v: os.environ[f"HARNESS_KEY_{v.upper()}"]
            for v in VENDORS
            if os.environ.get(f"HARNESS_KEY_{v.upper()}")
        },
        upstreams={
            v: os.environ[f"HARNESS_UPSTREAM_{v.upper()}"]
            for v in VENDORS
            if os.environ.get(f"HARNESS_UPSTREAM_{v.upper()}")
        },
        key_secrets={
            v: f"{namespace}/{os.environ[f'HARNESS_KEY_SECRET_{v.upper()}']}"
            for v in VENDORS
            if os.environ.get(f"HARNESS_KEY_SECRET_{v.upper()}")
        },
        reader_token=build_meter_reader_token(os.environ["HARNESS_GATEWAY_KEY"]),
        max_request_bytes=int(os.environ.get("HARNESS_MAX_REQUEST_BYTES") or DEFAULT_MAX_REQUEST_BYTES),
        limits=limits,
        traces=traces,
    )
    # No read timeout: a model streams for as long as it thinks; the connection's own keepalive ends it.
    # The in-flight limits admit no more requests than the pool has connections, so none waits for one.
    gateway.session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=limits.upstream_connections),
        timeout=aiohttp.ClientTimeout(total=None, connect=10),
    )
    public, admin = build_apps(gateway)
    runners = [web.AppRunner(public, access_log=None), web.AppRunner(admin, access_log=None)]
    for app_runner in runners:
        await app_runner.setup()
    await web.TCPSite(runners[0], "0.0.0.0", int(os.environ.get("HARNESS_PORT", "8080"))).start()
    await web.TCPSite(runners[1], "0.0.0.0", int(os.environ.get("HARNESS_ADMIN_PORT", "9102"))).start()
    print("harness-model-gateway: serving", sorted(gateway.keys), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    # Stop taking requests, let the ones in flight finish (and settle), then go.
    for app_runner in runners:
        await app_runner.cleanup()
    await gateway.session.close()
    grants.stop()
    if traces is not None:
        traces.shutdown()  # the spans still queued go first


def main() -> int:
    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
