"""A local HTTP server standing in for the API server: it records each request's path and headers and
answers every request with one canned status and JSON body (for kubeconfig and error-line tests)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class RecordingApi:
    """What the server answers (`status`, `body`) and what it was asked (`requests`: path and the
    headers as (name, value) pairs, repeated names kept)."""

    status: int = 404
    body: dict[str, Any] = field(
        default_factory=lambda: {
            "kind": "Status",
            "reason": "NotFound",
            "message": "nothing here",
            "code": 404,
        }
    )
    requests: list[tuple[str, list[tuple[str, str]]]] = field(default_factory=list)
    url: str = ""


@contextmanager
def recording_api() -> Iterator[RecordingApi]:
    """A RecordingApi served on 127.0.0.1 (a free port) until the block ends."""
    api = RecordingApi()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            api.requests.append((self.path, list(self.headers.items())))
            data = json.dumps(api.body).encode()
            self.send_response(api.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PATCH = do_POST = _answer

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    api.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
