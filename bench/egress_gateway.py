"""The egress gateway's cost: added latency per request and memory with 100 concurrent grants.

    KUBECONFIG=... python bench/egress_gateway.py [--runs 100] [--requests 20]

Needs the chart installed with its gateway (tests/integration/test_egress_gateway.py installs it) and
the cluster lock (`flock /tmp/harness-cluster.lock ...`). It writes RUNS grants as the operator would
(`egress.build_egress_grant`, each granting this machine's node address on a local HTTP server's port),
then, from the node, times plain GETs to that server directly and through one gateway pod: one request
per credential first (Squid asks its helpers), sequential requests on one credential, then REQUESTS per
credential with every credential in flight at once (there the test's own Python client and server
share the machine's cores with Squid, so compare medians, not their difference). Memory is the
kubelet's working set of each gateway pod (Squid, its helpers and the exporter) before and after. The
grants are deleted at the end.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import statistics
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kubernetes import client, config

from harness_operator.api.v1alpha1 import HarnessDefinitionSpec, HarnessRun
from harness_operator.core.attempt import decide_attempts
from harness_operator.core.config import OperatorConfig
from harness_operator.core.pod.egress_grant import build_egress_grant, build_proxy_token, proxy_user
from harness_operator.core.resolve.resolution import AttemptTarget

NODE = "10.88.0.1"
NAMESPACE = "harness-system"
GATEWAY = "harness-operator-egress"


class Ok(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body are two writes: without this, Nagle and a delayed ACK on a kept-alive
    # connection (Squid's to this server) add 40 ms that are the server's, not the gateway's.
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        pass


def timed_get(url: str, proxy: str | None) -> float:
    handlers = [urllib.request.ProxyHandler({"http": proxy} if proxy else {})]
    opener = urllib.request.build_opener(*handlers)
    start = time.perf_counter()
    with opener.open(url, timeout=30) as resp:
        resp.read()
        assert resp.status == 200, resp.status
    return (time.perf_counter() - start) * 1000


def memory_mib(core: client.CoreV1Api, pods: list[Any]) -> dict[str, float]:
    """The kubelet's working set of each gateway pod, MiB."""
    node = pods[0].spec.node_name
    response = core.connect_get_node_proxy_with_path(node, "stats/summary", _preload_content=False)
    stats = json.loads(response.data)
    names = {p.metadata.name for p in pods}
    return {
        p["podRef"]["name"]: round(p["memory"]["workingSetBytes"] / 2**20, 1)
        for p in stats["pods"]
        if p["podRef"]["name"] in names
    }


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(name: str, values: list[float]) -> str:
    return (
        f"{name:<26} n={len(values):<5} median {statistics.median(values):6.2f} ms   "
        f"p95 {pct(values, 0.95):6.2f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()
    config.load_kube_config()
    core = client.CoreV1Api()
    key = base64.b64decode(core.read_namespaced_secret(f"{GATEWAY}-key", NAMESPACE).data["key"]).decode()
    pods = core.list_namespaced_pod(
        NAMESPACE, label_selector="app.kubernetes.io/name=harness-egress-gateway"
    ).items
    pod_ip = pods[0].status.pod_ip

    ThreadingHTTPServer.request_queue_size = 256  # 100 clients connect at once
    server = ThreadingHTTPServer((NODE, 0), Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    url = f"http://{NODE}:{port}/"
    cfg = OperatorConfig(
        egress_gateway_service=pod_ip, egress_gateway_namespace=NAMESPACE, egress_gateway_key=key
    )
    definition = HarnessDefinitionSpec.model_validate(
        {"binary": "x", "egress": [{"host": NODE, "ports": [port]}]}
    )
    proxies = []
    # The kubelet reports a new pod's memory only after its first stats collection.
    before = memory_mib(core, pods)
    for _ in range(60):
        if all(before.values()):
            break
        time.sleep(1)
        before = memory_mib(core, pods)
    try:
        for i in range(args.runs):
            run = HarnessRun.model_validate(
                {
                    "metadata": {"name": f"bench-{i}", "namespace": "bench", "uid": f"bench-uid-{i}"},
                    "spec": {"provider": "x", "prompt": "x"},
                }
            )
            grant = build_egress_grant(
                run, decide_attempts(run, [AttemptTarget(1, "x", definition, 1)], cfg), cfg
            )
            assert grant is not None
            core.create_namespaced_config_map(NAMESPACE, grant)
            token = build_proxy_token(key, f"bench-uid-{i}", 1)
            proxies.append(f"http://{proxy_user(run, 1)}:{token}@{pod_ip}:3128")
        direct = [timed_get(url, None) for _ in range(args.requests * 5)]
        cold = [timed_get(url, proxy) for proxy in proxies]
        sequential = [timed_get(url, proxies[0]) for _ in range(args.requests * 5)]
        with ThreadPoolExecutor(max_workers=args.runs) as pool:
            warm = list(
                pool.map(lambda p: timed_get(url, p), [p for p in proxies for _ in range(args.requests)])
            )
        direct_loaded = [timed_get(url, None) for _ in range(args.requests * 5)]
        with ThreadPoolExecutor(max_workers=args.runs) as pool:
            direct_parallel = list(pool.map(lambda _: timed_get(url, None), range(args.runs * args.requests)))
        after = memory_mib(core, pods)
    finally:
        for i in range(args.runs):
            with contextlib.suppress(client.ApiException):
                core.delete_namespaced_config_map(f"bench.bench-{i}", NAMESPACE)
        server.shutdown()
    print(f"egress gateway: {args.runs} grants, gateway pod {pods[0].metadata.name}, from the node")
    print(summary("direct (sequential)", direct + direct_loaded))
    print(summary("direct (100 in parallel)", direct_parallel))
    print(summary("gateway, first request", cold))
    print(summary("gateway (sequential)", sequential))
    print(summary("gateway, 100 in parallel", warm))
    added = statistics.median(sequential) - statistics.median(direct)
    print(f"added per request (median, sequential): {added:.2f} ms")
    first = statistics.median(cold) - statistics.median(direct)
    print(f"added per first request of a run (median): {first:.2f} ms")
    print(f"gateway pods' working set before: {before} MiB; after {args.runs} grants and load: {after} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
