"""Remote ACP transports: WebSocket (`websockets`) and Streamable HTTP (the SDK's client on `httpx`),
with headers from Secrets, extra CA roots for one connection, no redirects and bounded deadlines (I/O)."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import ssl
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx
from acp.http.client import AcpHttpStatusError, create_http_stream
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import AcpTransport
from harness_operator.contract.plan import AcpSessionPlan, AttemptPlan
from harness_operator.runner.attempt import Reporter
from harness_operator.runner.stops import SetupError

CONNECT_SECONDS = 15.0
WRITE_SECONDS = 30.0
# A POST's answer, or the next event on an SSE stream: ACP servers send a keepalive every 15 s.
READ_SECONDS = 60.0
PING_SECONDS = 20.0
MAX_MESSAGE_BYTES = 50 << 20
SUBPROTOCOL = "acp.v1"

Close = Callable[[], Awaitable[None]]


def resolve_headers(acp: AcpSessionPlan, credentials: Mapping[str, str]) -> dict[str, str]:
    """Header values: literal, or from their credential variable (a Secret); a missing one is refused."""
    headers = {}
    for header in acp.headers:
        if header.credential_env is None:
            headers[header.name] = header.value or ""
        elif header.credential_env in credentials:
            headers[header.name] = credentials[header.credential_env]
        else:
            raise SetupError(
                Reason.CredentialsMissing, f"harness: the Secret value of ACP header {header.name} is not set"
            )
    return headers


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def plain_header_warning(url: str, headers: Mapping[str, str]) -> str | None:
    """A warning when headers would travel unencrypted (ws://, http://) to a host that is not loopback."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if headers and parts.scheme in ("ws", "http") and not is_loopback(host):
        return f"harness: warning: ACP headers go unencrypted to {host} ({parts.scheme}://)"
    return None


def bearer_subprotocol(headers: dict[str, str]) -> str:
    """`bearer.<token>` from the Authorization header, which then is not sent itself."""
    value = next((headers.pop(k) for k in list(headers) if k.lower() == "authorization"), "")
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise SetupError(
            Reason.SetupFailed, "harness: bearerSubprotocol needs an 'Authorization: Bearer <token>' header"
        )
    if "/" in token or "=" in token:
        raise SetupError(
            Reason.SetupFailed,
            "harness: the bearer token has '/' or '=', which a WebSocket subprotocol cannot carry; "
            "send it as the Authorization header (bearerSubprotocol: false)",
        )
    return f"bearer.{token}"


def build_ssl_context(acp: AcpSessionPlan, credentials: Mapping[str, str]) -> ssl.SSLContext | None:
    """For wss/https: the system roots plus the definition's CA bundle, verification always on."""
    scheme = urlsplit(acp.url or "").scheme
    if scheme not in ("wss", "https"):
        return None
    context = ssl.create_default_context()
    if acp.ca_bundle_env is not None:
        pem = credentials.get(acp.ca_bundle_env)
        if not pem:
            raise SetupError(
                Reason.CredentialsMissing, "harness: the CA bundle Secret (caBundleSecretRef) is not set"
            )
        try:
            context.load_verify_locations(cadata=pem)
        except ssl.SSLError as exc:
            raise SetupError(
                Reason.SetupFailed, "harness: caBundleSecretRef holds no valid PEM certificate"
            ) from exc
    return context


class WebSocketTransport:
    """ACP messages over one WebSocket: a text frame holds one message or newline-separated ones; a
    binary frame ends the connection."""

    def __init__(self, ws: ClientConnection, reporter: Reporter) -> None:
        self.ws = ws
        self.reporter = reporter
        self.pending: deque[dict[str, Any]] = deque()

    async def send(self, message: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(message, separators=(",", ":")))

    async def receive(self) -> dict[str, Any] | None:
        while not self.pending:
            try:
                frame = await self.ws.recv()
            except ConnectionClosed:
                return None
            if isinstance(frame, bytes):
                self.reporter.say(
                    "harness: the agent sent a binary WebSocket frame, which ACP does not use; closing"
                )
                await self.ws.close(code=1003)
                return None
            for line in frame.split("\n"):
                if not line.strip():
                    continue
                try:
                    message = json.loads(line)
                except ValueError:
                    message = None
                if isinstance(message, dict):
                    self.pending.append(message)
                else:
                    self.reporter.say("harness: skipped a WebSocket message that is not JSON-RPC")
        return self.pending.popleft()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.ws.close()


async def open_websocket(
    acp: AcpSessionPlan, headers: dict[str, str], context: ssl.SSLContext | None, reporter: Reporter
) -> tuple[WebSocketTransport, Close]:
    subprotocols = [SUBPROTOCOL]
    if acp.bearer_subprotocol:
        subprotocols.append(bearer_subprotocol(headers))
    try:
        ws = await _ConnectWithoutRedirects(
            acp.url or "",
            additional_headers=headers or None,
            subprotocols=subprotocols,  # type: ignore[arg-type]
            ssl=context,
            open_timeout=CONNECT_SECONDS,
            ping_interval=PING_SECONDS,
            ping_timeout=PING_SECONDS,
            max_size=MAX_MESSAGE_BYTES,
        )
    except Exception as exc:
        raise SetupError(
            Reason.ProviderFailed, f"harness: cannot open the ACP WebSocket: {describe_connect_error(exc)}"
        ) from exc
    transport = WebSocketTransport(ws, reporter)
    return transport, transport.close


class _ConnectWithoutRedirects(connect):
    """websockets follows redirects by default; an ACP endpoint that redirects is refused."""

    def process_redirect(self, exc: Exception) -> Exception | str:
        return exc


def describe_connect_error(exc: Exception) -> str:
    """The kind of failure, never a response body or header value."""
    status = getattr(exc, "status_code", None) or getattr(getattr(exc, "response", None), "status_code", None)
    if status is not None:
        if 300 <= status < 400:
            return f"the endpoint answered HTTP {status} (a redirect); redirects are refused"
        return f"the endpoint answered HTTP {status}"
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, ssl.SSLError):
        cause = cause.__cause__ or cause.__context__
    if isinstance(cause, ssl.SSLError):
        return f"TLS failed: {cause.reason or type(cause).__name__}"
    if isinstance(exc, (TimeoutError, httpx.TimeoutException)):
        return f"no answer within the deadline (connect {CONNECT_SECONDS:.0f}s, read {READ_SECONDS:.0f}s)"
    return type(exc).__name__ + (f": {exc.strerror}" if isinstance(exc, OSError) and exc.strerror else "")


class HttpTransport:
    """The SDK's Streamable HTTP client; a failed POST becomes a stated error without the answer's body."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def send(self, message: dict[str, Any]) -> None:
        try:
            await self.inner.send(message)
        except (AcpHttpStatusError, httpx.HTTPError) as exc:
            raise SetupError(
                Reason.ProviderFailed, f"harness: the ACP endpoint failed: {describe_connect_error(exc)}"
            ) from None

    async def receive(self) -> dict[str, Any] | None:
        message: dict[str, Any] | None = await self.inner.receive()
        return message

    async def close(self) -> None:
        await self.inner.close()


async def open_http(
    acp: AcpSessionPlan, headers: dict[str, str], context: ssl.SSLContext | None
) -> tuple[HttpTransport, Close]:
    client = httpx.AsyncClient(
        verify=context if context is not None else True,
        follow_redirects=False,
        timeout=httpx.Timeout(
            connect=CONNECT_SECONDS, read=READ_SECONDS, write=WRITE_SECONDS, pool=CONNECT_SECONDS
        ),
    )
    transport = HttpTransport(create_http_stream(acp.url or "", client=client, headers=headers))

    async def close() -> None:
        with contextlib.suppress(Exception):
            await transport.close()  # DELETE releases the connection
        await client.aclose()

    return transport, close


async def open_remote(
    plan: AttemptPlan, credentials: Mapping[str, str], reporter: Reporter
) -> tuple[Any, Close]:
    """The transport to a remote agent and how to close it."""
    acp = plan.acp
    assert acp is not None and acp.url is not None
    headers = resolve_headers(acp, credentials)
    warning = plain_header_warning(acp.url, headers)
    if warning is not None:
        reporter.say(warning)
    context = build_ssl_context(acp, credentials)
    if acp.transport == AcpTransport.websocket:
        return await open_websocket(acp, headers, context, reporter)
    return await open_http(acp, headers, context)
