"""Shared machinery for the vendor-API stubs (stdlib only).

A stub is a ``ThreadingHTTPServer`` bound to 127.0.0.1 on a port the OS picks. It runs in a
background thread, records every request it sees (method, path, selected headers, JSON body) and
answers according to its ``mode``. Subclasses implement ``handle(req)`` and return a ``Response``
(or write a streaming answer themselves through ``req``).

Modes shared by every stub:
  ``ok``            a fixed short text answer with fixed usage numbers
  ``unauthorized``  HTTP 401 in the vendor's error shape
  ``hang``          hold model calls unanswered until the stub stops (dropped) or ``release()`` (answered)
Vendor stubs may add their own (for example ``tool_use``). ``delay`` (seconds) slows every model call
down, as a real model is, so that a run can be watched turn by turn.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

# Headers worth keeping in the request log. Credentials are never recorded verbatim.
_LOGGED_HEADERS = (
    "content-type",
    "accept",
    "user-agent",
    "anthropic-version",
    "anthropic-beta",
    "x-stainless-lang",
    "originator",
    "openai-beta",
    "upgrade",
    "mcp-session-id",
)
_SECRET_HEADERS = ("authorization", "x-api-key", "x-goog-api-key", "api-key", "private-token")


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any  # parsed JSON, raw text, or None
    auth_present: bool
    # sha256 of each credential the request carried (header or `key=`), never the value itself: a test
    # tells which key reached the vendor without the log holding one.
    auth_sha256: list[str] = field(default_factory=list)
    raw_body: bytes = b""  # the body's bytes as they arrived (a test checks what a proxy sent verbatim)

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "path": self.path,
            "query": self.query,
            "headers": self.headers,
            "auth_present": self.auth_present,
            "auth_sha256": self.auth_sha256,
            "body_keys": sorted(self.body) if isinstance(self.body, dict) else None,
        }


@dataclass
class Response:
    status: int = 200
    body: Any = None  # dict/list -> JSON; str/bytes -> as is
    headers: dict[str, str] = field(default_factory=dict)
    # Server-sent events: an iterable of (event name or None, data dict/str).
    sse: Iterable[tuple[str | None, Any]] | None = None
    # Newline-delimited chunks written one by one (for non-SSE streaming).
    chunks: Iterable[bytes] | None = None


class _Handler(BaseHTTPRequestHandler):
    server_version = "harness-stub/1"
    protocol_version = "HTTP/1.1"
    # Headers and body are separate writes: with Nagle on, a kept-alive client's delayed ACK adds 40 ms
    # that are the stub's, not what a test or a benchmark measures.
    disable_nagle_algorithm = True

    def log_message(self, fmt: str, *args: Any) -> None:  # quiet by default
        stub: StubServer = self.server.stub  # type: ignore[attr-defined]
        if stub.verbose:
            sys.stderr.write(f"[{stub.name}] {fmt % args}\n")

    def _read_body(self) -> tuple[Any, bytes]:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            raw = self._read_chunked()
        if not raw:
            return None, raw
        enc = (self.headers.get("content-encoding") or "").lower()
        data = raw
        if enc == "gzip":
            import gzip

            data = gzip.decompress(raw)
        elif enc == "zstd":
            return None, raw  # not decodable with the stdlib; record as opaque
        try:
            return json.loads(data), raw
        except ValueError:
            return data.decode("utf-8", "replace"), raw

    def _read_chunked(self) -> bytes:
        out = b""
        while True:
            line = self.rfile.readline().strip()
            size = int(line.split(b";")[0] or b"0", 16)
            if size == 0:
                self.rfile.readline()
                return out
            out += self.rfile.read(size)
            self.rfile.readline()

    def _dispatch(self) -> None:
        stub: StubServer = self.server.stub  # type: ignore[attr-defined]
        parts = urlsplit(self.path)
        body, raw = self._read_body()
        headers = {k.lower(): v for k, v in self.headers.items() if k.lower() in _LOGGED_HEADERS}
        auth = any(self.headers.get(h) for h in _SECRET_HEADERS) or "key=" in (parts.query or "")
        credentials = [self.headers[h] for h in _SECRET_HEADERS if self.headers.get(h)]
        credentials += parse_qs(parts.query).get("key", [])
        credentials = [c[7:] if c.lower().startswith("bearer ") else c for c in credentials]
        req = RecordedRequest(
            method=self.command,
            path=parts.path,
            query=parse_qs(parts.query),
            headers=headers,
            body=body,
            auth_present=bool(auth),
            auth_sha256=[hashlib.sha256(c.encode()).hexdigest() for c in credentials],
            raw_body=raw,
        )
        with stub._lock:
            stub.requests.append(req)
        if stub.verbose:
            sys.stderr.write(f"[{stub.name}] {self.command} {self.path}\n")
        if stub.mode == "hang" and stub.is_model_call(req):
            stub._hang.wait()
            if stub._stopping:
                self.close_connection = True
                return
        if stub.delay and stub.is_model_call(req):
            time.sleep(stub.delay)  # a model that takes its time
        try:
            resp = stub.handle(req)
        except Exception as exc:  # answer something instead of dropping the connection
            resp = Response(500, {"error": {"message": f"stub error: {exc}"}})
        self._write(resp)

    def _write(self, resp: Response) -> None:
        if resp.sse is not None:
            self.send_response(resp.status)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("connection", "close")
            for k, v in resp.headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.close_connection = True
            for event, data in resp.sse:
                payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
                msg = ""
                if event:
                    msg += f"event: {event}\n"
                msg += f"data: {payload}\n\n"
                self.wfile.write(msg.encode())
                self.wfile.flush()
            return
        if resp.chunks is not None:
            self.send_response(resp.status)
            self.send_header("connection", "close")
            for k, v in resp.headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.close_connection = True
            for chunk in resp.chunks:
                self.wfile.write(chunk)
                self.wfile.flush()
            return
        if isinstance(resp.body, (dict, list)):
            data = json.dumps(resp.body).encode()
            ctype = "application/json"
        elif isinstance(resp.body, str):
            data = resp.body.encode()
            ctype = "text/plain; charset=utf-8"
        elif resp.body is None:
            data = b""
            ctype = "application/json"
        else:
            data = resp.body
            ctype = "application/octet-stream"
        self.send_response(resp.status)
        self.send_header("content-type", resp.headers.pop("content-type", ctype) if resp.headers else ctype)
        self.send_header("content-length", str(len(data)))
        for k, v in resp.headers.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _dispatch


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # The listen backlog: socketserver's 5 drops a burst's connections (hundreds of streams at once, each
    # a new connection: an event stream closes its own), and each dropped one waits a second for its SYN
    # to be sent again.
    request_queue_size = 1024

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that time out or give up drop the connection; that is expected here.
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class StubServer:
    """Base class: start()/stop() or use as a context manager."""

    name = "stub"
    modes: tuple[str, ...] = ("ok", "unauthorized", "hang")

    def __init__(
        self,
        mode: str = "ok",
        host: str = "127.0.0.1",
        port: int = 0,
        verbose: bool = False,
        delay: float = 0.0,
    ):
        if mode not in self.modes:
            raise ValueError(
                "unknown mode {!r} for {} stub (one of {})".format(mode, self.name, ", ".join(self.modes))
            )
        self.mode = mode
        self.host = host
        self.port = port
        self.verbose = verbose
        self.delay = delay
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._hang = threading.Event()
        self._stopping = False
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> StubServer:
        self._httpd = _Server((self.host, self.port), _Handler)
        self._httpd.stub = self  # type: ignore[attr-defined]
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name=f"{self.name}-stub", daemon=True
        )
        self._thread.start()
        return self

    def release(self, mode: str = "ok") -> None:
        """Answer the calls ``hang`` holds, and every later one, as `mode` does."""
        self.mode = mode
        self._hang.set()

    def stop(self) -> None:
        self._stopping = True
        self._hang.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> StubServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- hooks -----------------------------------------------------------------------------
    def is_model_call(self, req: RecordedRequest) -> bool:
        """Whether a request is a model call (the ones ``hang`` holds)."""
        return False

    def handle(self, req: RecordedRequest) -> Response:
        raise NotImplementedError

    # -- helpers ---------------------------------------------------------------------------
    def model_calls(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if self.is_model_call(r)]

    def unknown_paths(self) -> list[str]:
        with self._lock:
            return sorted({f"{r.method} {r.path}" for r in self.requests if not self.is_known(r)})

    def is_known(self, req: RecordedRequest) -> bool:
        return self.is_model_call(req)


def serve_main(stub_cls: Callable[..., StubServer], argv: list[str] | None = None) -> int:
    """``python -m tests.stubs.<vendor> [--mode M] [--port N]``: serve until Ctrl-C."""
    import argparse

    p = argparse.ArgumentParser(prog=f"python -m tests.stubs.{stub_cls.name}")
    p.add_argument("--mode", default="ok", choices=stub_cls.modes)
    p.add_argument("--port", type=int, default=0, help="0 lets the OS choose")
    p.add_argument("--quiet", action="store_true", help="do not log requests to stderr")
    p.add_argument("--log-json", metavar="FILE", help="on exit, write the request log as JSON to FILE")
    args = p.parse_args(argv)
    import signal

    def _term(*_: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _term)
    stub = stub_cls(mode=args.mode, port=args.port, verbose=not args.quiet)
    stub.start()
    print(stub.base_url, flush=True)
    sys.stderr.write(f"[{stub.name}] serving mode={args.mode} at {stub.base_url} (Ctrl-C to stop)\n")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        stub.stop()
        if args.log_json:
            with open(args.log_json, "w") as f:
                json.dump([r.to_dict() for r in stub.requests], f, indent=2)
    return 0
