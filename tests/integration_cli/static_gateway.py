"""`python -m tests.integration_cli.static_gateway PORT REDIS_URL UPSTREAMS GRANTS`: the real model gateway
(modelgateway.server, its real store on a real Redis) with its grants given on the command line instead of
watched in a cluster, for the CLI tier (no cluster). UPSTREAMS: {vendor: base URL}; GRANTS: {name: grant}.
Prints `ready` once it serves; its refusals go to stderr as the gateway logs them."""

from __future__ import annotations

import asyncio
import json
import sys
import threading

import aiohttp
from aiohttp import web

from harness_operator.contract.model_access import ModelAttemptGrant, ModelGrant
from harness_operator.modelgateway.server import Gateway, build_apps
from harness_operator.modelgateway.store import MeterStore

KEYS = {
    "anthropic": "sk-ant-gateway-held",
    "openai": "sk-openai-gateway-held",
    "gemini": "gemini-gateway-held",
}


class StaticGrants:
    """The grants the gateway serves, fixed (GrantWatch's interface, without a cluster)."""

    def __init__(self, grants: dict[str, ModelGrant]) -> None:
        self.grants = grants
        self.synced = threading.Event()
        self.synced.set()

    def get(self, name: str, attempt: str | None = None) -> ModelGrant | None:
        return self.grants.get(name)

    def own_key(self, grant: ModelGrant, attempt: ModelAttemptGrant) -> str | None:
        return None


async def serve(port: int, redis_url: str, upstreams: dict[str, str], grants: dict[str, ModelGrant]) -> None:
    gateway = Gateway(
        grants=StaticGrants(grants),  # type: ignore[arg-type]
        store=MeterStore(redis_url, None),
        keys=KEYS,
        upstreams=upstreams,
        reader_token="unused",
    )
    gateway.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, connect=10))
    public, _admin = build_apps(gateway)
    runner = web.AppRunner(public, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    grants = {name: ModelGrant.model_validate(g) for name, g in json.loads(sys.argv[4]).items()}
    asyncio.run(serve(int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3]), grants))
