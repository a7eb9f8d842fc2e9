"""The model gateway as it runs: two real gateway processes (`python -m harness_operator.modelgateway`)
under the chart's ServiceAccount, a real Redis (Debian's redis-server) for their meters, grants in the
API server as the operator writes them, and the vendor stubs as upstreams.

Checked: the vendor sees the gateway's key and never the attempt's token; answers pass unchanged and
are metered from the vendor's own usage; a token is refused once its attempt leaves the grant, and a
token never opens another run's grant; concurrent streams of one attempt across both replicas, one of
them killed mid-request, end refused at the cap, overspending by at most the clamped worst cases. With
the operator's own grant writer and meter reader (red team 49): a run's cap binds all its attempts
together, a token is live only from its attempt's start, spend through any of the run's tokens is in its
cost, and a namespace named `model` never takes (nor is given) another run's grant.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import Attempt, HarnessDefinitionSpec, HarnessRun, Usage
from harness_operator.contract.model_access import (
    MeteredUsage,
    ModelAttemptGrant,
    ModelGrant,
    build_meter_reader_token,
    token_sha256,
)
from harness_operator.controller.grants import Grants
from harness_operator.controller.kube import Kube
from harness_operator.controller.metering import AttemptMetering, MeterReader
from harness_operator.core.attempt import Attempt as DecidedAttempt
from harness_operator.core.attempt import decide_attempts
from harness_operator.core.config import OperatorConfig
from harness_operator.core.pod.egress_grant import grant_name as egress_grant_name
from harness_operator.core.pod.model_grant import (
    build_model_grant_map,
    model_grant_name,
    model_token,
    without_attempts,
)
from harness_operator.core.resolve.resolution import AttemptTarget, RunFailure
from harness_operator.core.status.metered import build_metered_usage
from harness_operator.core.status.usage import sum_usage
from tests.monitoring import RELEASE, dashboard_queries_by_source
from tests.stubs.anthropic import AnthropicStub
from tests.stubs.gemini import GeminiStub
from tests.stubs.openai import OpenAIStub

from ..lib import processes
from .conftest import wait_until
from .operator_env import (
    RELEASE_NAMESPACE,
    free_port,
    install_chart_rbac_and_catalog,
    service_account_kubeconfig,
)
from .prometheus import prometheus

KEY = "gateway-test-key"
VENDOR_KEYS = {
    "anthropic": "sk-ant-real-vendor-key",
    "openai": "sk-openai-real-vendor-key",
    "gemini": "g-real",
}
SERVICE_ACCOUNT = "harness-operator-model"  # the chart's (templates/model-gateway.yaml)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class Gateway:
    proc: subprocess.Popen[bytes]
    port: int
    admin: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass
class Env:
    kube: client.ApiClient
    config: OperatorConfig
    gateways: list[Gateway]
    stubs: dict[str, Any]
    start: Any  # (**settings) -> Gateway

    @staticmethod
    def run(name: str, uid: str) -> HarnessRun:
        metadata = {"name": name, "namespace": "team-a", "uid": uid}
        return HarnessRun.model_validate(
            {"metadata": metadata, "spec": {"provider": "claude", "prompt": "x"}}
        )

    def grant(self, name: str, uid: str, attempts: dict[str, ModelAttemptGrant], **caps: Any) -> HarnessRun:
        """Write the run's grant as the operator does: before the run's first request."""
        run = self.run(name, uid)
        grant = ModelGrant(namespace="team-a", run=name, uid=uid, attempts=attempts, **caps)
        body = build_model_grant_map(run, self.config, grant)
        core = client.CoreV1Api(self.kube)
        try:
            core.create_namespaced_config_map(RELEASE_NAMESPACE, body)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
            core.replace_namespaced_config_map(body["metadata"]["name"], RELEASE_NAMESPACE, body)
        return run

    def attempt(self, run: HarnessRun, index: int) -> tuple[str, ModelAttemptGrant]:
        token = model_token(run, self.config, index)
        return token, ModelAttemptGrant(token_sha256=token_sha256(token), vendor="anthropic")

    def meter(self, gateway: Gateway, uid: str, attempt: int) -> MeteredUsage:
        request = urllib.request.Request(
            f"http://127.0.0.1:{gateway.admin}/meters/{uid}/{attempt}",
            headers={"Authorization": f"Bearer {build_meter_reader_token(KEY)}"},
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            return MeteredUsage.model_validate(json.load(response))


@pytest.fixture(scope="module")
def env(
    kube: client.ApiClient,
    kubeconfig_path: str,
    cluster_bin_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Env]:
    if shutil.which("redis-server") is None:
        pytest.fail(
            "the model gateway's store is Debian's Redis: apt-get install redis-server (.ci/run does)"
        )
    install_chart_rbac_and_catalog(cluster_bin_dir, kubeconfig_path)
    folder = tmp_path_factory.mktemp("model-gateway")
    sa_config = service_account_kubeconfig(kube, kubeconfig_path, folder / "kubeconfig", SERVICE_ACCOUNT)
    redis_port = free_port()
    redis = processes.start(
        ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--requirepass", "store-pw", "--dir", str(folder)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    stubs = {"anthropic": AnthropicStub(mode="ok").start(), "openai": OpenAIStub(mode="ok").start(),
             "gemini": GeminiStub(mode="ok").start()}  # fmt: skip
    gateways: list[Gateway] = []
    started: list[subprocess.Popen[bytes]] = [redis]  # stopped after, also one whose start failed

    def start(**settings: str) -> Gateway:
        """A gateway process; `settings`: environment variables of its own (an upstream, a limit)."""
        port, admin = free_port(), free_port()
        environ = {
            "PATH": os.environ["PATH"],
            # The tree under test, not the one the venv installed.
            **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ},
            "KUBECONFIG": sa_config,
            "HARNESS_NAMESPACE": RELEASE_NAMESPACE,
            "HARNESS_PORT": str(port),
            "HARNESS_ADMIN_PORT": str(admin),
            "HARNESS_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
            "HARNESS_REDIS_PASSWORD": "store-pw",
            "HARNESS_GATEWAY_KEY": KEY,
            **{f"HARNESS_KEY_{v.upper()}": k for v, k in VENDOR_KEYS.items()},
            **{f"HARNESS_UPSTREAM_{v.upper()}": s.base_url for v, s in stubs.items()},
            **settings,
        }
        with (folder / f"gateway-{len(gateways)}.log").open("wb") as log:
            proc = processes.start(
                [sys.executable, "-m", "harness_operator.modelgateway"], env=environ, stdout=log, stderr=log
            )
        started.append(proc)
        gateway = Gateway(proc, port, admin)

        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=1) as response:
                    return response.status == 200
            except (urllib.error.URLError, OSError):
                assert proc.poll() is None, (folder / f"gateway-{len(gateways)}.log").read_text()
                return False

        wait_until(ready, timeout=30, what="the model gateway's /readyz")
        gateways.append(gateway)
        return gateway

    config = OperatorConfig(
        model_gateway_service="unused", model_gateway_namespace=RELEASE_NAMESPACE, model_gateway_key=KEY
    )
    try:
        start(), start()
        yield Env(kube, config, gateways, stubs, start)
    finally:
        for proc in reversed(started):  # the gateways, then their store
            processes.stop(proc, grace=30)
        for stub in stubs.values():
            stub.stop()
        core = client.CoreV1Api(kube)
        for item in core.list_namespaced_config_map(
            RELEASE_NAMESPACE, label_selector="agentharness.dev/model-grant=true"
        ).items:
            core.delete_namespaced_config_map(item.metadata.name, RELEASE_NAMESPACE)


def post(url: str, token: str, body: dict[str, Any], header: str = "x-api-key") -> tuple[int, bytes]:
    value = f"Bearer {token}" if header == "authorization" else token
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={header: value, "content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


MESSAGE = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": [{"role": "user", "content": "Hi"}]}


def test_the_vendor_sees_the_key_never_the_token_and_usage_is_metered(env: Env) -> None:
    run = env.run("keyswap", "uid-keyswap")
    token, attempt = env.attempt(run, 1)
    env.grant("keyswap", "uid-keyswap", {"1": attempt})
    gateway = env.gateways[0]
    anthropic = env.stubs["anthropic"]
    before = len(anthropic.requests)
    status, body = post(f"{gateway.url}/anthropic/v1/messages", token, MESSAGE)
    assert status == 200, body
    assert json.loads(body)["usage"]["output_tokens"] == 56  # the vendor's answer, unchanged
    status, streamed = post(f"{gateway.url}/anthropic/v1/messages", token, {**MESSAGE, "stream": True})
    assert status == 200 and b"event: message_stop" in streamed
    seen = anthropic.requests[before:]
    assert [r.auth_sha256 for r in seen] == [[sha(VENDOR_KEYS["anthropic"])]] * 2
    assert all(sha(token) not in r.auth_sha256 for r in anthropic.requests)
    meter = env.meter(env.gateways[1], "uid-keyswap", 1)  # either replica: one store
    assert (meter.requests, meter.input_tokens, meter.output_tokens) == (2, 2468, 112)
    assert (meter.cache_read_tokens, meter.cache_write_tokens, meter.reserved_usd) == (200, 20, 0.0)
    assert meter.cost_usd == pytest.approx(2 * 0.0046095)


def test_a_refused_platform_key_is_final_for_the_cli_and_names_its_secret(env: Env) -> None:
    """The vendor refuses the platform's key: the CLI gets the gateway's own error, in the vendor's shape,
    saying whose key it is and which Secret holds it, with the header that stops the SDKs' retries; the
    key itself never shows, and the refused request costs nothing."""
    refusing = {"anthropic": AnthropicStub(mode="unauthorized").start(),
                "openai": OpenAIStub(mode="unauthorized").start()}  # fmt: skip
    gateway = env.start(
        HARNESS_UPSTREAM_ANTHROPIC=refusing["anthropic"].base_url,
        HARNESS_UPSTREAM_OPENAI=refusing["openai"].base_url,
        HARNESS_KEY_SECRET_ANTHROPIC="anthropic-api-key",
    )
    try:
        run = env.run("refused", "uid-refused")
        token, attempt = env.attempt(run, 1)
        openai_token, _ = env.attempt(run, 2)
        openai = ModelAttemptGrant(token_sha256=token_sha256(openai_token), vendor="openai")
        env.grant("refused", "uid-refused", {"1": attempt, "2": openai}, max_cost_usd=1.0)
        for body in (MESSAGE, {**MESSAGE, "stream": True}):
            status, answer, headers = post_with_headers(f"{gateway.url}/anthropic/v1/messages", token, body)
            assert (status, headers.get("x-should-retry")) == (401, "false"), answer
            error = json.loads(answer)
            assert error["type"] == "error" and error["error"]["type"] == "authentication_error"
            message = error["error"]["message"]
            assert "the platform's key for anthropic was refused by the vendor" in message
            assert f"Secret {RELEASE_NAMESPACE}/anthropic-api-key" in message
            assert "not the run's key" in message and VENDOR_KEYS["anthropic"] not in message
        # Without the Secret's name configured, the message still says whose key it is.
        status, answer, headers = post_with_headers(
            f"{gateway.url}/openai/v1/chat/completions",
            openai_token,
            {"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}]},
            header="authorization",
        )
        assert (status, headers.get("x-should-retry")) == (401, "false"), answer
        error = json.loads(answer)["error"]
        assert error["code"] == "invalid_api_key" and "the platform's key for openai" in error["message"]
        assert len(refusing["anthropic"].model_calls()) == 2  # each request went once, none retried here
        assert env.meter(gateway, "uid-refused", 1).cost_usd == 0.0
    finally:
        # Not one of the module's two replicas: the later tests take env.gateways[0] and [1].
        env.gateways.remove(gateway)
        processes.stop(gateway.proc, grace=30)
        for stub in refusing.values():
            stub.stop()


def post_with_headers(
    url: str, token: str, body: dict[str, Any], header: str = "x-api-key"
) -> tuple[int, bytes, dict[str, str]]:
    value = f"Bearer {token}" if header == "authorization" else token
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={header: value, "content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read(), {k.lower(): v for k, v in response.headers.items()}
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), {k.lower(): v for k, v in exc.headers.items()}


def test_openai_and_gemini_routes_swap_their_own_headers(env: Env) -> None:
    run = env.run("vendors", "uid-vendors")
    openai_token = model_token(run, env.config, 1)
    gemini_token = model_token(run, env.config, 2)
    env.grant("vendors", "uid-vendors", {
        "1": ModelAttemptGrant(token_sha256=token_sha256(openai_token), vendor="openai"),
        "2": ModelAttemptGrant(token_sha256=token_sha256(gemini_token), vendor="gemini"),
    })  # fmt: skip
    url = env.gateways[0].url
    body = {"model": "gpt-4.1", "input": "Hi", "stream": True}
    assert post(f"{url}/openai/v1/responses", openai_token, body, "authorization")[0] == 200
    chat = {"model": "gpt-4.1", "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    assert post(f"{url}/openai/v1/chat/completions", openai_token, chat, "authorization")[0] == 200
    gemini = f"{url}/gemini/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert post(gemini, gemini_token, {"contents": [{"parts": [{"text": "Hi"}]}]}, "x-goog-api-key")[0] == 200
    assert (
        post(f"{url}/openai/v1/responses", gemini_token, body, "authorization")[0] == 403
    )  # its vendor only
    assert {tuple(r.auth_sha256) for r in env.stubs["openai"].requests} == {(sha(VENDOR_KEYS["openai"]),)}
    assert {tuple(r.auth_sha256) for r in env.stubs["gemini"].requests} == {(sha(VENDOR_KEYS["gemini"]),)}
    assert env.meter(env.gateways[0], "uid-vendors", 1).output_tokens == 112
    assert env.meter(env.gateways[0], "uid-vendors", 2).output_tokens == 56


def test_a_token_is_refused_once_its_attempt_leaves_the_grant_and_never_opens_another_run(env: Env) -> None:
    run = env.run("revoked", "uid-revoked")
    token, attempt = env.attempt(run, 1)
    env.grant("revoked", "uid-revoked", {"1": attempt})
    url = f"{env.gateways[0].url}/anthropic/v1/messages"
    assert post(url, token, MESSAGE)[0] == 200
    # Another run's token with this run's grant name: its HMAC is not this grant's.
    other = HarnessRun.model_validate(
        {
            "metadata": {"name": "revoked", "namespace": "team-a", "uid": "uid-other"},
            "spec": {"provider": "claude", "prompt": "x"},
        }
    )
    assert post(url, model_token(other, env.config, 1), MESSAGE)[0] == 401
    ended = time.monotonic()
    grant = ModelGrant(namespace="team-a", run="revoked", uid="uid-revoked", attempts={"1": attempt})
    body = build_model_grant_map(run, env.config, without_attempts(grant, {1}))
    client.CoreV1Api(env.kube).replace_namespaced_config_map(
        body["metadata"]["name"], RELEASE_NAMESPACE, body
    )
    status = wait_until(lambda: post(url, token, MESSAGE)[0] == 401 or None, timeout=10, what="the refusal")
    print(
        f"\nmeasured: a revoked token refused {time.monotonic() - ended:.3f}s after its grant was rewritten"
    )
    assert status
    status, answer, headers = post_with_headers(url, token, MESSAGE)
    assert status == 401 and json.loads(answer)["error"]["type"] == "authentication_error"
    assert headers.get("x-should-retry") == "false"  # final: the CLI does not retry an ended token
    assert model_grant_name("team-a", "revoked") == body["metadata"]["name"]


def gateway_requests(gateway: Gateway) -> dict[tuple[str, str, str], float]:
    """harness_model_gateway_requests_total from the admin port, by (namespace, vendor, verdict)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{gateway.admin}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (s.labels["namespace"], s.labels["vendor"], s.labels["verdict"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "harness_model_gateway_requests_total"
    }


def test_metrics_count_requests_by_namespace_vendor_and_verdict(env: Env, tmp_path: Path) -> None:
    run = env.run("counted", "uid-counted")
    token, attempt = env.attempt(run, 1)
    env.grant("counted", "uid-counted", {"1": attempt})
    gateway = env.gateways[0]
    before = gateway_requests(gateway)
    url = f"{gateway.url}/anthropic/v1/messages"
    assert post(url, token, MESSAGE)[0] == 200
    assert post(url, "not-a-gateway-token", MESSAGE)[0] == 401
    after = gateway_requests(gateway)
    for key in (("team-a", "anthropic", "forwarded"), ("-", "anthropic", "unauthenticated")):
        assert after[key] == before.get(key, 0) + 1, (key, before, after)
    # The dashboard's model gateway panel, on a real Prometheus scraping the gateway, shows both.
    panels = dashboard_queries_by_source()["model"]
    with prometheus(tmp_path, {f"{RELEASE}-model": [f"127.0.0.1:{gateway.admin}"]}) as prom:
        wait_until(lambda: not prom.empty(panels), timeout=30, what="the model gateway panel's series")
        shown = {(r["metric"]["vendor"], r["metric"]["verdict"]) for r in prom.query(panels[0][1])}
    assert {("anthropic", "forwarded"), ("anthropic", "unauthenticated")} <= shown, shown


# A prompt of the size the stub bills (1344 input tokens): the gateway estimates input at 3 bytes a token.
LONG = {**MESSAGE, "messages": [{"role": "user", "content": "word " * 1000}], "stream": True}


async def _stream(session: aiohttp.ClientSession, url: str, token: str) -> int:
    async with session.post(url, json=LONG, headers={"x-api-key": token}) as response:
        await response.read()
        return response.status


def test_concurrent_streams_across_replicas_end_at_the_cap_with_one_replica_killed(env: Env) -> None:
    cap = 0.1
    run = env.run("capped", "uid-capped")
    token, attempt = env.attempt(run, 1)
    env.grant("capped", "uid-capped", {"1": attempt}, max_cost_usd=cap)
    anthropic: AnthropicStub = env.stubs["anthropic"]
    anthropic.delay = 1.0  # the model thinks: requests overlap
    victim, survivor = env.gateways[0], env.gateways[1]

    def url(gateway: Gateway) -> str:
        return f"{gateway.url}/anthropic/v1/messages"

    async def fire() -> list[int | BaseException]:
        async with aiohttp.ClientSession() as session:

            async def at_the_vendor(gateway: Gateway) -> asyncio.Future[int]:
                seen = len(anthropic.requests)
                call = asyncio.ensure_future(_stream(session, url(gateway), token))
                while len(anthropic.requests) == seen:
                    await asyncio.sleep(0.01)
                return call

            # One request of each replica is in flight at the vendor, then a flood on both.
            tasks = [await at_the_vendor(victim), await at_the_vendor(survivor)]
            tasks += [
                asyncio.ensure_future(_stream(session, url(victim if i % 2 else survivor), token))
                for i in range(22)
            ]
            await asyncio.sleep(0.3)
            victim.proc.send_signal(signal.SIGKILL)
            return list(await asyncio.gather(*tasks, return_exceptions=True))

    try:
        first = asyncio.run(fire())
    finally:
        anthropic.delay = 0.0
        env.gateways.remove(victim)
        env.start()  # the module's other tests keep two replicas
    assert 400 in [r for r in first if isinstance(r, int)], first  # refused at the cap, Anthropic's shape
    assert isinstance(first[0], BaseException), first  # the killed replica's caller was cut off
    assert first[1] == 200, first  # the survivor's answered, and settled
    meter = env.meter(survivor, "uid-capped", 1)
    spent = meter.cost_usd + meter.reserved_usd
    # The killed replica's requests in flight stay held at their worst case: billed, never lost.
    assert meter.requests > 0 and meter.refused > 0 and meter.reserved_usd > 0, meter
    # Each forwarded request was reserved before it went, its output clamped to what the cap left: the
    # worst cases, and so what was spent, never pass the cap together.
    assert spent <= cap + 1e-9, meter
    print(
        f"\nmeasured: {meter.requests} answered, {meter.refused} refused, {meter.reserved_usd:.4f} USD held by "
        f"the killed replica, {spent:.4f} of {cap} USD spent or held"
    )


# --- red team 49: one meter and one cap per run across its attempts; grants that never collide ----------

# What the Anthropic stub bills an answer (its fixed usage at claude-sonnet-4-5's table prices); an answer
# clamped under a cap has fewer output tokens.
BILLED_USD = 0.0046095
SONNET_USD_PER_MTOK = {"input_tokens": 3.0, "output_tokens": 15.0, "cache_read_input_tokens": 0.3,
                       "cache_creation_input_tokens": 3.75}  # fmt: skip


# A prompt the size of what the stub bills (its input, cache reads and writes: 1344 tokens), so the
# gateway's worst case, estimated at 3 bytes a token, covers each answer.
SIZED = {**MESSAGE, "messages": [{"role": "user", "content": "word " * 1000}]}


def billed_usd(answer: bytes) -> float:
    """What the vendor billed for an answer: its own usage at the table's prices."""
    usage = json.loads(answer)["usage"]
    return sum(usage.get(kind, 0) * usd for kind, usd in SONNET_USD_PER_MTOK.items()) / 1e6


ROUTED_CLAUDE = HarnessDefinitionSpec.model_validate(
    {
        "binary": "claude",
        "modelRoute": {
            "vendor": "anthropic",
            "env": [
                {"name": "ANTHROPIC_BASE_URL", "value": "$(HARNESS_MODEL_GATEWAY_URL)"},
                {"name": "ANTHROPIC_API_KEY", "value": "$(HARNESS_MODEL_GATEWAY_TOKEN)"},
            ],
        },
    }
)


def operator_side(env: Env, gateway: Gateway) -> tuple[OperatorConfig, Grants]:
    """The operator's own grant writer on the real API server, its meter reader on `gateway`'s admin port."""
    config = OperatorConfig(
        model_gateway_service="127.0.0.1",
        model_gateway_admin_port=gateway.admin,
        model_gateway_namespace=RELEASE_NAMESPACE,
        model_gateway_vendors=("anthropic",),
        model_gateway_key=KEY,
        egress_gateway_service="egress.invalid",
        egress_gateway_namespace=RELEASE_NAMESPACE,
        egress_gateway_key="egress-test-key",
    )
    return config, Grants(Kube(env.kube), config)


def routed_run(
    config: OperatorConfig, name: str, attempts: int, namespace: str = "team-a", **spec: Any
) -> tuple[HarnessRun, list[DecidedAttempt]]:
    run = HarnessRun.model_validate(
        {
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
            "spec": {"provider": "claude", "prompt": "x", **spec}
            | ({"retry": {"limit": attempts - 1}} if attempts > 1 else {}),
        }
    )
    targets = [AttemptTarget(i, "claude", ROUTED_CLAUDE, 1) for i in range(1, attempts + 1)]
    return run, decide_attempts(run, targets, config)


def spend(url: str, token: str, until: int | None = None, times: int = 100) -> tuple[list[float], list[int]]:
    """Post SIZED with `token` `times` times or until the answer is `until`: (what the vendor billed for
    each answer, the statuses seen)."""
    statuses, billed = [], []
    for _ in range(times):
        status, answer = post(url, token, SIZED)
        statuses.append(status)
        if status == 200:
            billed.append(billed_usd(answer))
        if status == until:
            break
    return billed, statuses


def refused(url: str, token: str) -> bool:
    """Whether the gateway refuses the token (401), asked on a path it never forwards: nothing is spent."""
    return post(url.replace("/v1/messages", "/v1/not-forwarded"), token, {})[0] == 401


def test_a_runs_cap_binds_all_its_attempts_and_a_token_is_live_only_while_its_attempt_runs(env: Env) -> None:
    """Red team 49, item 5: each attempt's grant carried the whole cap (three attempts spent 0.09 USD of a
    0.05 maxCostUSD), and every attempt's token was live from the first attempt's start."""
    cap = 0.05
    config, grants = operator_side(env, env.gateways[1])
    run, targets = routed_run(config, "sum-capped", 3, limits={"maxCostUSD": cap})
    # Every attempt's token is in the plan Secret from the start: an `edit` user can read them all.
    secrets = grants.write(run, targets)
    tokens = {i: secrets[f"model-env-{i}-ANTHROPIC_API_KEY"] for i in (1, 2, 3)}
    url = f"{env.gateways[0].url}/anthropic/v1/messages"
    stub: AnthropicStub = env.stubs["anthropic"]
    before = len(stub.requests)
    grants.admit(run, targets, 1)  # the operator starts attempt 1: its token, and only its, is live
    billed, _ = spend(url, tokens[1], times=3)
    assert billed == [pytest.approx(BILLED_USD)] * 3
    for later in (2, 3):  # not started: refused, and nothing reaches the vendor
        status, body = post(url, tokens[later], SIZED)
        assert status == 401, body
    assert len(stub.requests) - before == 3
    # Attempt 1 fails (a retry can cure it); the operator reads its meter (revoking it), starts attempt 2.
    grants.revoke_attempt(run, 1)
    wait_until(lambda: refused(url, tokens[1]) or None, timeout=10, what="attempt 1's refusal")
    grants.admit(run, targets, 2)
    more, statuses = spend(url, tokens[2], until=400)
    assert statuses[-1] == 400 and more, statuses  # refused at the run's cap, Anthropic's shape
    billed += more
    grants.revoke_attempt(run, 2)
    grants.admit(run, targets, 3)
    status, body = post(url, tokens[3], SIZED)  # the cap is the run's: attempt 3 gets nothing more
    assert status == 400 and b"all its attempts together" in body, body
    assert b"below this request's worst case of 0.0" in body and b"raise the cap" in body, body  # issue 57
    reader = MeterReader(config)
    whole = reader.read(run.metadata["uid"], None)
    each = [reader.read(run.metadata["uid"], i) for i in (1, 2, 3)]
    assert whole.cost_usd + whole.reserved_usd <= cap + 1e-9, whole  # the sum, bound by maxCostUSD
    assert whole.cost_usd > cap - 0.01  # ... and reached: the attempts spent it together
    assert len(stub.requests) - before == len(billed)  # what reached the vendor
    assert whole.cost_usd == pytest.approx(sum(billed))  # the run's meter is what the vendor billed
    assert sum(m.cost_usd for m in each) == pytest.approx(whole.cost_usd)
    assert [m.requests for m in each] == [3, len(more), 0] and each[2].refused == 1
    print(f"\nmeasured: {len(billed)} answers over 3 attempts, {whole.cost_usd:.6f} of {cap} USD spent")


def test_spend_through_an_attempt_that_never_ran_is_counted_in_the_runs_cost(
    env: Env, namespace: str
) -> None:
    """Red team 49, item 5: spend through a token whose attempt no status records (its grant written, its
    Job never made) was never read: the run showed cost 0. At the run's end its meter is read whole."""
    config, grants = operator_side(env, env.gateways[0])
    run, targets = routed_run(config, "unread", 2, namespace=namespace)  # its Events go there
    tokens = grants.write(run, targets)
    url = f"{env.gateways[1].url}/anthropic/v1/messages"
    stub: AnthropicStub = env.stubs["anthropic"]
    before = len(stub.requests)
    grants.admit(run, targets, 1)
    spent, statuses = spend(url, tokens["model-env-1-ANTHROPIC_API_KEY"], times=2)
    assert len(spent) == 2, statuses
    grants.revoke_attempt(run, 1)
    reader = MeterReader(config)
    first = build_metered_usage(reader.read(run.metadata["uid"], 1), None)  # attempt 1's reading
    grants.admit(run, targets, 2)  # its token is live; its Job is never created (the run then fails)
    unread, _ = spend(url, tokens["model-env-2-ANTHROPIC_API_KEY"], times=3)
    assert len(unread) == 3
    metering = AttemptMetering(Kube(env.kube), config, grants, reader)
    # Status knows of attempt 1 only, read from its meter (its sandbox's report kept beside it).
    recorded = [Attempt(index=1, provider="claude", usage=first, reported_usage=Usage())]
    rest = metering.meter_run(run, recorded, retry=0)
    assert rest is not None and rest.cost_usd == pytest.approx(sum(unread), abs=1e-6), rest  # 6 decimals
    billed = (len(stub.requests) - before) * BILLED_USD
    assert sum_usage([first, rest]).cost_usd == pytest.approx(billed, abs=2e-6)
    assert billed == pytest.approx(5 * BILLED_USD)
    # The run's grant went before the reading: its tokens spend nothing more.
    name = model_grant_name(namespace, "unread")
    assert Kube(env.kube).fetch_config_map(RELEASE_NAMESPACE, name) is None
    token = tokens["model-env-2-ANTHROPIC_API_KEY"]
    wait_until(lambda: refused(url, token) or None, timeout=10, what="the ended run's refusal")


def test_a_namespace_named_model_never_takes_another_runs_grant(env: Env) -> None:
    """Red team 49, item 15: egress grants `<ns>.<run>` and model grants `model.<ns>.<run>` shared one
    namespace's names: run `team-a.review` of namespace `model` and run `review` of `team-a` had one."""
    config, grants = operator_side(env, env.gateways[0])
    core = client.CoreV1Api(env.kube)
    egress_name = egress_grant_name("model", "team-a.review")
    web = HarnessDefinitionSpec.model_validate(
        {"binary": "tool", "egress": [{"host": "docs.example.com", "ports": [443]}]}
    )
    other = HarnessRun.model_validate(
        {
            "metadata": {"name": "team-a.review", "namespace": "model", "uid": "uid-model-ns"},
            "spec": {"provider": "tool", "prompt": "x"},
        }
    )
    created: list[str] = []
    try:
        grants.write(other, decide_attempts(other, [AttemptTarget(1, "tool", web, 1)], config))
        created.append(egress_name)
        held = core.read_namespaced_config_map(egress_name, RELEASE_NAMESPACE)
        run, targets = routed_run(config, "review", 1)
        tokens = grants.write(run, targets)
        grants.admit(run, targets, 1)
        after = core.read_namespaced_config_map(egress_name, RELEASE_NAMESPACE)
        assert after.metadata.resource_version == held.metadata.resource_version  # untouched
        assert json.loads(after.data["grant.json"])["namespace"] == "model"
        assert after.metadata.labels.get("agentharness.dev/egress-grant") == "true"
        url = f"{env.gateways[0].url}/anthropic/v1/messages"
        assert post(url, tokens["model-env-1-ANTHROPIC_API_KEY"], MESSAGE)[0] == 200  # its own grant

        # A name held by another run's grant, or by no grant, is never written over: the run stops.
        squatted, squatted_targets = routed_run(config, "squatted", 1)
        name = model_grant_name("team-a", "squatted")
        core.create_namespaced_config_map(RELEASE_NAMESPACE, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=name, labels={"agentharness.dev/model-grant": "true"}),
            data={"grant.json": json.dumps({"namespace": "team-b", "run": "squatted", "uid": "u", "attempts": {}})},
        ))  # fmt: skip
        created.append(name)
        with pytest.raises(RunFailure) as failure:
            grants.admit(squatted, squatted_targets, 1)
        assert failure.value.reason == Reason.ChildConflict and "team-b/squatted" in failure.value.message
        kept = core.read_namespaced_config_map(name, RELEASE_NAMESPACE)
        assert json.loads(kept.data["grant.json"])["namespace"] == "team-b"
        # A deleted run of the same name left its grant: that one is replaced, its attempts not kept.
        gone = model_grant_name("team-a", "review")
        stale = ModelGrant.model_validate_json(
            core.read_namespaced_config_map(gone, RELEASE_NAMESPACE).data["grant.json"]
        )
        assert stale.uid == "uid-review"
        again = run.model_copy(update={"metadata": {**run.metadata, "uid": "uid-review-2"}})
        grants.admit(again, targets, 1)
        fresh = ModelGrant.model_validate_json(
            core.read_namespaced_config_map(gone, RELEASE_NAMESPACE).data["grant.json"]
        )
        assert fresh.uid == "uid-review-2"
    finally:
        for name in created:
            with contextlib.suppress(client.ApiException):
                core.delete_namespaced_config_map(name, RELEASE_NAMESPACE)
