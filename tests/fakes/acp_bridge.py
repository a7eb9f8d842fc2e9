"""A loopback WebSocket bridge exposing the stdio scripted ACP agent (tests/fakes/acp_agent.py): one agent
process per connection, its stdout lines sent as text frames.

    with AcpWebSocketBridge(mode="ok") as bridge:          # ws://127.0.0.1:PORT/acp
    with AcpWebSocketBridge(mode="ok", tls=(cert, key)):    # wss://

`frames`: "one" (a message per frame), "batch" (notifications held back and sent in one frame with the
next response, newline-separated) or "binary" (the first message as a binary frame). `redirect_to`
answers the upgrade with 302 instead. What each upgrade asked for is kept in `seen`.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from tests.fakes.loop_server import LoopServer

AGENT = str(Path(__file__).with_name("acp_agent.py"))


class AcpWebSocketBridge(LoopServer):
    def __init__(
        self,
        mode: str = "ok",
        frames: str = "one",
        tls: tuple[str, str] | None = None,
        redirect_to: str | None = None,
    ) -> None:
        super().__init__(tls)
        self.mode, self.frames, self.redirect_to = mode, frames, redirect_to
        self.seen: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"{'wss' if self.tls else 'ws'}://127.0.0.1:{self.port}/acp"

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        self.seen.append({"headers": dict(request.headers.raw_items()), "path": request.path})
        if self.redirect_to:
            return Response(302, "Found", Headers({"Location": self.redirect_to}), b"secret body")
        return None

    async def _serve(self) -> None:
        async with serve(
            self._handle,
            "127.0.0.1",
            0,
            ssl=self._tls_context(),
            subprotocols=["acp.v1"],  # type: ignore[list-item]
            process_request=self._process_request,
        ) as server:
            self._listening(next(iter(server.sockets)).getsockname()[1])
            await self._stop

    async def _handle(self, ws: ServerConnection) -> None:
        self.seen[-1]["subprotocol"] = ws.subprotocol
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            AGENT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env={"PATH": os.environ.get("PATH", ""), "ACP_MODE": self.mode},
            limit=50 << 20,
        )
        assert proc.stdin is not None and proc.stdout is not None

        async def inbound() -> None:
            async for frame in ws:
                proc.stdin.write((frame if isinstance(frame, str) else frame.decode()).encode() + b"\n")  # type: ignore[union-attr]
                await proc.stdin.drain()  # type: ignore[union-attr]

        async def outbound() -> None:
            held: list[str] = []
            first = True
            while line := await proc.stdout.readline():  # type: ignore[union-attr]
                text = line.decode().strip()
                if self.frames == "binary" and first:
                    await ws.send(text.encode())
                elif self.frames == "batch" and "id" not in json.loads(text):
                    held.append(text)
                elif self.frames == "batch":
                    await ws.send("\n".join([*held, text]))
                    held = []
                else:
                    await ws.send(text)
                first = False

        tasks = [asyncio.ensure_future(inbound()), asyncio.ensure_future(outbound())]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
