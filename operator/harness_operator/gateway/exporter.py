"""The egress gateway's exporter, Squid's access-log daemon: logs refused requests naming the run and the
host (on stderr, which is Squid's log) and serves counts to Prometheus by bounded labels only (namespace,
verdict, and the host of allowed requests, which the grants bound), never the agent's choice of host (I/O).

Squid starts it (`logfile_daemon`) and writes it one `L<line>` per request; its UDP log module would
hold lines back until 1400 bytes had gathered. It lists grants as the helpers do, to name a proxy user's
run (`namespace/run`).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness_operator.gateway.helper import GrantStore
from harness_operator.gateway.rules import (
    VERDICT_ALLOWED,
    build_metric_key,
    parse_access,
    render_metrics,
    run_of,
)


class Exporter:
    """Counts and refusals of the access log; thread-safe (the UDP reader and the HTTP server share it)."""

    def __init__(self, store: GrantStore) -> None:
        self.store = store
        self.counts: Counter[tuple[str, str, str]] = Counter()
        self.lock = threading.Lock()

    def record(self, line: str) -> None:
        access = parse_access(line)
        if access is None:
            return
        run = run_of(self.store.current(access.user), access.user) if access.attempt else "-"
        host = f"{access.host}:{access.port}"
        with self.lock:
            self.counts[build_metric_key(run, host, access.verdict)] += 1
        if access.verdict != VERDICT_ALLOWED:
            event = {
                "msg": "egress refused",
                "verdict": access.verdict,
                "run": run,
                "attempt": access.attempt,
                "host": host,
                "method": access.method,
                "status": access.status,
            }
            print(json.dumps(event, sort_keys=True), file=sys.stderr, flush=True)

    def metrics(self) -> str:
        with self.lock:
            return render_metrics(dict(self.counts))


def serve_metrics(exporter: Exporter, port: int) -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = exporter.metrics().encode() if self.path == "/metrics" else b"ok\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # scrapes are not worth a line
            pass

    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    """Squid gives the log's path as the one argument; the lines come on stdin."""
    exporter = Exporter(GrantStore())
    serve_metrics(exporter, int(os.environ.get("HARNESS_GATEWAY_METRICS_PORT", "9101")))
    for line in sys.stdin:
        if line.startswith("L"):
            exporter.record(line[1:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
