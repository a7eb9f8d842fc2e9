"""A loopback server on its own asyncio loop in a thread, for the fakes that synchronous tests drive."""

from __future__ import annotations

import asyncio
import ssl
import threading
from typing import Self


class LoopServer:
    """`with` starts `_serve()` on a private loop and waits until it calls `_listening(port)`; leaving
    the block resolves `_stop`, which `_serve()` awaits before it tears down."""

    def __init__(self, tls: tuple[str, str] | None) -> None:
        self.tls = tls
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Future[None] = self._loop.create_future()
        self._thread = threading.Thread(
            target=lambda: self._loop.run_until_complete(self._serve()), daemon=True
        )

    async def _serve(self) -> None:
        raise NotImplementedError

    def _listening(self, port: int) -> None:
        self.port = port
        self._ready.set()

    def _tls_context(self) -> ssl.SSLContext | None:
        """The server side of `tls` (certificate file, key file), or None for plain text."""
        if not self.tls:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(*self.tls)
        return context

    def __enter__(self) -> Self:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set_result, None)
        self._thread.join(10)
