"""`python3 -m harness_operator.receiver`: the trigger receiver, configured from its environment (I/O).

  HARNESS_PORT                 the forges' port (8080): POST /hooks/<namespace>/<trigger>
  HARNESS_ADMIN_PORT           the admin port (9103): /healthz, /readyz, /metrics
  HARNESS_MAX_DELIVERY_BYTES   the largest delivery it reads (default 1 MiB; the chart's
                               triggerReceiver.maxDeliveryBytes): a longer one is refused with 413
  HARNESS_NAMESPACES           the namespaces whose triggers it serves, comma-separated (the chart's
                               watchNamespaces); empty: every namespace
In a pod it talks to the API server as its ServiceAccount; elsewhere through KUBECONFIG.
"""

from __future__ import annotations

import asyncio
import os
import signal

from aiohttp import web

from harness_operator.receiver.kube import ReceiverKube, load_api_client
from harness_operator.receiver.server import DEFAULT_MAX_DELIVERY_BYTES, Receiver, build_apps


async def serve() -> None:
    receiver = Receiver(
        kube=ReceiverKube(load_api_client()),
        max_delivery_bytes=int(os.environ.get("HARNESS_MAX_DELIVERY_BYTES") or DEFAULT_MAX_DELIVERY_BYTES),
        namespaces=tuple(n for n in os.environ.get("HARNESS_NAMESPACES", "").split(",") if n),
    )
    hooks, admin = build_apps(receiver)
    runners = [web.AppRunner(hooks, access_log=None), web.AppRunner(admin, access_log=None)]
    for app_runner in runners:
        await app_runner.setup()
    await web.TCPSite(runners[0], "0.0.0.0", int(os.environ.get("HARNESS_PORT", "8080"))).start()
    await web.TCPSite(runners[1], "0.0.0.0", int(os.environ.get("HARNESS_ADMIN_PORT", "9103"))).start()
    print("harness-trigger-receiver: serving", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    # Stop taking deliveries; those in flight finish (their runs created and recorded), then go.
    for app_runner in runners:
        await app_runner.cleanup()


def main() -> int:
    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
