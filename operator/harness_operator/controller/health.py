"""The operator's probes on its health port (I/O): `/livez` answers while the process serves (it asks
the API server nothing, so a slow API server never restarts a healthy operator); `/readyz` answers 200
once the watch caches are listed and this replica can do its part: the leader once kopf is ready, a
standby while it reads the Lease (it can take over). Its body says which role this replica has."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from harness_operator.controller.cache import Watcher
from harness_operator.controller.leader import LeaderElector

LIVE, READY = "/livez", "/readyz"


class HealthServer:
    """`ready()` returns (ready, role); the server runs in a daemon thread."""

    def __init__(self, port: int, ready: Callable[[], tuple[bool, str]]) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == LIVE:
                    code, body = 200, "ok"
                elif self.path == READY:
                    ok, role = outer.ready()
                    code, body = (200 if ok else 503), role
                else:
                    code, body = 404, f"not found: use {LIVE} or {READY}"
                data = (body + "\n").encode()
                with contextlib.suppress(ConnectionError):  # a prober that gave up waiting
                    self.send_response(code)
                    self.send_header("Content-Type", "text/plain; charset=utf-8")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                return  # probes every few seconds are not log lines

        self.ready = ready
        self.server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
        self.server.daemon_threads = True

    def start(self) -> None:
        threading.Thread(target=self.server.serve_forever, name="health", daemon=True).start()


def readiness(
    watchers: Sequence[Watcher[Any]], elector: LeaderElector | None, kopf_ready: threading.Event
) -> tuple[bool, str]:
    """Ready, and the role: without an election this process leads."""
    listed = all(w.synced.is_set() for w in watchers)
    if elector is None:
        return listed and kopf_ready.is_set(), "leader (no election)"
    if elector.lost.is_set():
        return False, "stopped leading"
    if elector.leading.is_set():
        return listed and kopf_ready.is_set(), "leader"
    return listed and elector.can_take_over(), "standby"
