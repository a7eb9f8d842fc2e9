"""A loopback ACP Streamable HTTP bridge: the SDK's server core (`acp.http.server.AcpServer`) served by
aiohttp, one scripted agent (tests/fakes/acp_agent.py) per connection.

    with AcpHttpBridge(mode="ok") as bridge:              # http://127.0.0.1:PORT/acp
    with AcpHttpBridge(mode="ok", tls=(cert, key)):       # https://

initialize answers JSON with an Acp-Connection-Id and sets a cookie; every later request without that
cookie is refused (403), so a client that drops cookies fails. What each request asked for is kept in
`seen` (HTTP method, JSON-RPC method, headers), the connections released by DELETE in `deleted`.
`redirect_to` answers every request with 307 instead; `fail_status` answers initialize with that status
and a body holding SECRET_BODY.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from acp.http.protocol import CONNECTION_ID_HEADER, SESSION_ID_HEADER
from acp.http.server import AcpServer
from aiohttp import web

from tests.fakes.acp_agent import ScriptedAgent
from tests.fakes.loop_server import LoopServer

SECRET_BODY = "internal detail 5e1f"
COOKIE = "acp-affinity"


class AcpHttpBridge(LoopServer):
    def __init__(
        self,
        mode: str = "ok",
        tls: tuple[str, str] | None = None,
        redirect_to: str | None = None,
        fail_status: int | None = None,
    ) -> None:
        super().__init__(tls)
        self.mode, self.redirect_to, self.fail_status = mode, redirect_to, fail_status
        self.seen: list[dict[str, Any]] = []
        self.deleted: list[str] = []
        self.cookie = secrets.token_hex(8)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/acp"

    def acp_methods(self) -> list[str]:
        return [s["acp"] for s in self.seen if s["acp"]]

    async def _serve(self) -> None:
        self.server = AcpServer(lambda conn: ScriptedAgent(self.mode))
        app = web.Application()
        app.router.add_route("*", "/acp", self._handle)
        runner = web.AppRunner(app, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=self._tls_context())
        await site.start()
        self._listening(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        await self._stop
        await self.server.close()
        await runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read() if request.method == "POST" else b""
        message = json.loads(body) if body else None
        acp = message.get("method") if isinstance(message, dict) else None
        self.seen.append({"http": request.method, "acp": acp, "headers": dict(request.headers)})
        if self.redirect_to:
            return web.Response(status=307, headers={"Location": self.redirect_to}, text=SECRET_BODY)
        connection_id = request.headers.get(CONNECTION_ID_HEADER)
        session_id = request.headers.get(SESSION_ID_HEADER)
        if acp == "initialize":
            if self.fail_status:
                return web.Response(status=self.fail_status, text=SECRET_BODY)
        elif request.cookies.get(COOKIE) != self.cookie:
            return web.json_response({"error": "no affinity cookie"}, status=403)
        if request.method == "POST":
            result = await self.server.handle_post(
                message,
                content_type=request.headers.get("Content-Type"),
                connection_id=connection_id,
                session_id=session_id,
            )
            response = web.json_response(result.body, status=result.status, headers=result.headers)
            if acp == "initialize":
                response.set_cookie(COOKIE, self.cookie)
            return response
        if request.method == "DELETE":
            result = await self.server.handle_delete(connection_id=connection_id)
            if result.status == 202 and connection_id:
                self.deleted.append(connection_id)
            return web.Response(status=result.status)
        error = self.server.validate_stream(connection_id=connection_id, session_id=session_id)
        if error is not None or connection_id is None:
            return web.json_response({"error": "bad stream request"}, status=400)
        stream = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await stream.prepare(request)
        async for frame in self.server.open_stream(connection_id=connection_id, session_id=session_id):
            await stream.write(frame)
        return stream
