"""Red team 49, item 9 (one tenant starves the others), replayed against the real gateway processes, a real
Redis and the vendor stubs (the harness of test_model_gateway.py): tenant A floods one replica with slow
requests through several runs; tenant B's request is answered at once, A's requests past the in-flight
limits are refused with 429 and billed nothing, and a request whose vendor is unreachable is billed nothing
(the meters read back from the gateway's admin port).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import aiohttp
import pytest
from kubernetes import client

from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.contract.model_access import ModelAttemptGrant, ModelGrant, token_sha256
from harness_operator.core.pod.model_grant import build_model_grant_map, model_token

from .operator_env import RELEASE_NAMESPACE, free_port
from .test_model_gateway import MESSAGE, Env, env

__all__ = ["env"]  # the module's fixture: its own gateways, Redis and stubs

SLOW = 8.0  # seconds the flooded vendor takes to answer
RUNS, PER_RUN = 5, 24  # tenant A: 120 requests at once
PER_ATTEMPT, PER_NAMESPACE = 8, 32  # the chart's defaults
COST = 0.0046095  # what the Anthropic stub's answer to MESSAGE costs


def grant(env: Env, namespace: str, name: str, vendor: str) -> str:
    """A run of `namespace` granted one attempt on `vendor`, as the operator writes it; its token."""
    run = HarnessRun.model_validate(
        {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
         "spec": {"provider": "claude", "prompt": "x"}}
    )  # fmt: skip
    token = model_token(run, env.config, 1)
    attempt = ModelAttemptGrant(token_sha256=token_sha256(token), vendor=vendor)
    body = build_model_grant_map(
        run, env.config, ModelGrant(namespace=namespace, run=name, uid=f"uid-{name}", attempts={"1": attempt})
    )
    core = client.CoreV1Api(env.kube)
    try:
        core.create_namespaced_config_map(RELEASE_NAMESPACE, body)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
        core.replace_namespaced_config_map(body["metadata"]["name"], RELEASE_NAMESPACE, body)
    return token


async def send(
    session: aiohttp.ClientSession, url: str, header: str, token: str, body: dict[str, Any]
) -> tuple[int, dict[str, Any], float]:
    """(status, answer, seconds it took)."""
    started = time.monotonic()
    value = f"Bearer {token}" if header == "authorization" else token
    async with session.post(url, json=body, headers={header: value}) as response:
        answer = await response.json(content_type=None)
        return response.status, answer, time.monotonic() - started


def test_a_tenants_flood_is_limited_refused_free_and_another_tenant_is_served_at_once(env: Env) -> None:
    gateway, anthropic = env.gateways[0], env.stubs["anthropic"]
    flooders = [(f"uid-flood-{n}", grant(env, "team-a", f"flood-{n}", "anthropic")) for n in range(RUNS)]
    other = grant(env, "team-b", "patient", "openai")
    before = len(anthropic.model_calls())
    chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}]}

    async def replay() -> tuple[list[tuple[str, int, dict[str, Any]]], tuple[int, dict[str, Any], float]]:
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:
            url = f"{gateway.url}/anthropic/v1/messages"
            flood = [
                (uid, asyncio.create_task(send(session, url, "x-api-key", token, MESSAGE)))
                for uid, token in flooders
                for _ in range(PER_RUN)
            ]
            # Bounded: the flood's first requests reach the vendor and are held there.
            for _ in range(120):
                if len(anthropic.model_calls()) - before >= PER_NAMESPACE:
                    break
                await asyncio.sleep(0.25)
            else:
                pytest.fail(
                    f"the flood never reached the vendor: {len(anthropic.model_calls()) - before} calls"
                )
            patient = await send(
                session, f"{gateway.url}/openai/v1/chat/completions", "authorization", other, chat
            )
            done = [(uid, *(await task)[:2]) for uid, task in flood]
            return done, patient

    anthropic.delay = SLOW
    try:
        flood, (status, answer, took) = asyncio.run(replay())
    finally:
        anthropic.delay = 0.0
    print(
        f"\nmeasured: tenant B answered in {took:.2f} s while tenant A had {RUNS * PER_RUN} slow requests sent"
    )
    assert status == 200, answer
    assert took < SLOW / 2, took  # served beside the flood, never queued behind it for a connection
    verdicts = Counter(code for _, code, _ in flood)
    assert verdicts == {200: PER_NAMESPACE, 429: RUNS * PER_RUN - PER_NAMESPACE}, verdicts
    assert len(anthropic.model_calls()) - before == PER_NAMESPACE  # the refused never reached the vendor
    refusals = [answer for _, code, answer in flood if code == 429]
    assert all(a["error"]["type"] == "rate_limit_error" for a in refusals), refusals[0]
    messages = {a["error"]["message"] for a in refusals}
    assert any(
        "modelGateway.maxInFlightPerNamespace" in m and f"{PER_NAMESPACE} requests" in m for m in messages
    )
    # Billed: exactly the requests that went, per run; nothing held, nothing for the refused.
    answered = Counter(uid for uid, code, _ in flood if code == 200)
    for uid, _ in flooders:
        assert answered[uid] <= PER_ATTEMPT
        meter = env.meter(env.gateways[1], uid, 1)
        assert (meter.requests, meter.refused, meter.reserved_usd) == (answered[uid], 0, 0.0), (uid, meter)
        assert meter.cost_usd == pytest.approx(answered[uid] * COST)


def test_many_namespaces_flooding_leave_room_and_a_full_pool_refuses_at_once(env: Env) -> None:
    """Sixteen namespaces with 8 slow requests each (one attempt's limit; 128 together, past the pool of
    100 this replica used to keep): with the chart's pool every one reaches the vendor and another tenant
    is still answered at once.
    A replica whose pool they fill answers the rest 429 at once, naming the setting, where it used to keep
    them waiting for a connection until a 502 (after 10 s)."""
    anthropic = env.stubs["anthropic"]
    flooders = [grant(env, f"team-flood-{n}", f"spread-{n}", "anthropic") for n in range(16)]
    other = grant(env, "team-b", "patient-2", "openai")
    small = env.start(HARNESS_UPSTREAM_CONNECTIONS="40", HARNESS_MAX_IN_FLIGHT_PER_NAMESPACE="16")
    chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}]}

    async def replay(gateway_url: str) -> tuple[list[tuple[int, dict[str, Any], float]], tuple[int, float]]:
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:
            url = f"{gateway_url}/anthropic/v1/messages"
            flood = [
                asyncio.create_task(send(session, url, "x-api-key", token, MESSAGE))
                for token in flooders
                for _ in range(PER_ATTEMPT)
            ]
            await asyncio.sleep(2.0)  # the flood is in flight, held by the vendor
            status, _, took = await send(
                session, f"{gateway_url}/openai/v1/chat/completions", "authorization", other, chat
            )
            return [await task for task in flood], (status, took)

    anthropic.delay = SLOW
    try:
        flood, (status, took) = asyncio.run(replay(env.gateways[0].url))
        crowded, _ = asyncio.run(replay(small.url))
    finally:
        anthropic.delay = 0.0
    print(f"\nmeasured: tenant B answered in {took:.2f} s beside 16 namespaces' 128 slow requests")
    assert Counter(code for code, _, _ in flood) == {200: 128}
    assert status == 200 and took < SLOW / 2, took
    verdicts = Counter(code for code, _, _ in crowded)
    assert verdicts[200] <= 40 and verdicts[200] + verdicts[429] == 128, verdicts
    refused = [(answer, seconds) for code, answer, seconds in crowded if code == 429]
    assert all(seconds < 2.0 for _, seconds in refused)  # at once, never after waiting for a connection
    messages = {a["error"]["message"] for a, _ in refused}
    assert any("modelGateway.upstreamConnections" in m for m in messages), messages


def test_an_attempt_past_its_limit_gets_429_naming_it_and_is_billed_nothing(env: Env) -> None:
    gateway, anthropic = env.gateways[1], env.stubs["anthropic"]
    token = grant(env, "team-c", "eager", "anthropic")

    async def replay() -> list[tuple[int, dict[str, Any], float]]:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            url = f"{gateway.url}/anthropic/v1/messages"
            return list(
                await asyncio.gather(*(send(session, url, "x-api-key", token, MESSAGE) for _ in range(12)))
            )

    anthropic.delay = 2.0
    try:
        answers = asyncio.run(replay())
    finally:
        anthropic.delay = 0.0
    assert Counter(code for code, _, _ in answers) == {200: PER_ATTEMPT, 429: 12 - PER_ATTEMPT}
    refused = [(answer, took) for code, answer, took in answers if code == 429]
    assert all(took < 2.0 for _, took in refused)  # refused at once, not after waiting
    assert all("modelGateway.maxInFlightPerAttempt" in a["error"]["message"] for a, _ in refused), refused
    meter = env.meter(gateway, "uid-eager", 1)
    assert (meter.requests, meter.refused, meter.reserved_usd) == (PER_ATTEMPT, 0, 0.0)
    assert meter.cost_usd == pytest.approx(PER_ATTEMPT * COST)


def test_a_request_whose_vendor_is_unreachable_is_billed_nothing(env: Env) -> None:
    unreachable = env.start(HARNESS_UPSTREAM_ANTHROPIC=f"http://127.0.0.1:{free_port()}")  # nothing listens
    token = grant(env, "team-b", "stranded", "anthropic")

    async def replay() -> tuple[int, dict[str, Any], float]:
        async with aiohttp.ClientSession() as session:
            return await send(
                session, f"{unreachable.url}/anthropic/v1/messages", "x-api-key", token, MESSAGE
            )

    status, answer, _ = asyncio.run(replay())
    assert status == 502 and answer["error"]["type"] == "api_error", answer
    meter = env.meter(unreachable, "uid-stranded", 1)
    assert (meter.cost_usd, meter.reserved_usd, meter.output_tokens) == (0.0, 0.0, 0), meter
