"""The receiver's HTTP server on loopback (real aiohttp, real signatures, core/forge's real parsing and
decisions), with an in-memory stand-in for the API server passed in where the receiver takes its client:
the order of checks, the answers, the counter, Events and status. The API server's own judgement
(impersonation, RBAC, admission) is tests/integration/test_trigger_receiver.py's, on the real cluster."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families
from tests.lib.forge_deliveries import commented, gitea_headers, labelled, trigger_body

from harness_operator.receiver.server import Receiver, build_apps

SECRET = b"webhook-secret"
NS, TRIGGER = "team-a", "payments-agent"


@dataclass
class ApiServer:
    """What the receiver's client would find: one trigger, its Secret, runs by name; every call noted."""

    secret: bytes | None = SECRET
    create_refused: ApiException | None = None
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[tuple[str, str, str, str | None]] = field(default_factory=list)
    status: dict[str, Any] | None = None
    calls: list[str] = field(default_factory=list)
    created_as: list[str] = field(default_factory=list)
    pipeline_template: dict[str, Any] | None = None

    def fetch_trigger(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append(f"get trigger {namespace}/{name}")
        if (namespace, name) != (NS, TRIGGER):
            return None
        body = trigger_body(name, "agent-trigger")
        body["metadata"].update(namespace=namespace, uid="trigger-uid")
        if self.pipeline_template is not None:
            body["spec"]["pipelineTemplate"] = self.pipeline_template
        return body

    def fetch_secret_key(self, namespace: str, name: str, key: str) -> bytes | None:
        self.calls.append(f"get secret {namespace}/{name}")
        return self.secret

    def list_runs(self, namespace: str, selector: str, kind: str = "HarnessRun") -> list[dict[str, Any]]:
        self.calls.append(f"list {'runs' if kind == 'HarnessRun' else 'pipelines'} {selector}")
        return [r for r in self.runs.values() if r.get("kind", "HarnessRun") == kind]

    def create_as(self, account: str, run: dict[str, Any]) -> None:
        self.calls.append(f"create {'run' if run['kind'] == 'HarnessRun' else 'pipeline'} as {account}")
        if self.create_refused is not None:
            raise self.create_refused
        name = run["metadata"]["name"]
        if name in self.runs:
            raise ApiException(status=409, reason="AlreadyExists")
        self.created_as.append(account)
        self.runs[name] = {
            **run,
            "metadata": {**run["metadata"], "creationTimestamp": "2026-12-07T05:00:00Z"},
        }

    def delete_as(self, account: str, namespace: str, kind: str, name: str) -> None:
        self.runs.pop(name, None)

    def create_event(
        self, trigger: dict[str, Any], type_: str, reason: str, message: str, name: str | None = None
    ) -> None:
        self.events.append((type_, reason, message, name))

    def patch_trigger_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.status = status

    def ready(self, namespace: str | None) -> None:
        return None


@dataclass
class Served:
    api: ApiServer
    hooks: TestClient[Any, Any]
    admin: TestClient[Any, Any]

    async def deliver(
        self,
        body: bytes,
        event: str = "issue_label",
        secret: bytes = SECRET,
        path: str = f"/hooks/{NS}/{TRIGGER}",
    ) -> tuple[int, dict[str, Any]]:
        headers = gitea_headers(body, secret, event)
        answer = await self.hooks.post(path, data=body, headers=headers)
        return answer.status, await answer.json()

    async def counted(self) -> dict[str, float]:
        text = await (await self.admin.get("/metrics")).text()
        return {
            s.labels["result"]: s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "harness_trigger_deliveries_total"
        }


async def _serve(api: ApiServer) -> AsyncIterator[Served]:
    hooks, admin = build_apps(Receiver(kube=api, max_delivery_bytes=64 * 1024))  # type: ignore[arg-type]
    async with TestClient(TestServer(hooks)) as h, TestClient(TestServer(admin)) as a:
        yield Served(api, h, a)


def served(test: Callable[[Served], Coroutine[Any, Any, None]], api: ApiServer | None = None) -> None:
    async def run() -> None:
        async for s in _serve(api or ApiServer()):
            await test(s)

    asyncio.run(run())


def test_a_signed_delivery_creates_its_run_as_the_triggers_account_and_a_replay_creates_nothing() -> None:
    async def test(s: Served) -> None:
        status, answer = await s.deliver(labelled(3))
        assert (status, answer["result"]) == (202, "created")
        assert list(s.api.runs) == [answer["run"]] and s.api.created_as == ["agent-trigger"]
        assert s.api.events[-1][:2] == ("Normal", "RunCreated") and s.api.events[-1][3] is None
        assert s.api.status is not None and s.api.status["lastDelivery"]["run"] == answer["run"]
        status, again = await s.deliver(labelled(3))
        assert (status, again["result"]) == (200, "duplicate")
        assert len(s.api.runs) == 1
        assert await s.counted() == {"created": 1.0, "duplicate": 1.0}

    served(test)


def test_a_pipeline_trigger_creates_its_pipeline_as_the_triggers_account_once() -> None:
    template = {
        "spec": {
            "serviceAccountName": "agent-trigger",
            "steps": [{"name": "fix", "run": {"spec": {"provider": "claude", "prompt": "#$(event.number)"}}}],
        }
    }

    async def test(s: Served) -> None:
        status, answer = await s.deliver(labelled(3))
        assert (status, answer["result"]) == (202, "created")
        made = s.api.runs[answer["run"]]
        assert made["kind"] == "HarnessPipeline" and s.api.created_as == ["agent-trigger"]
        assert made["spec"]["steps"][0]["run"]["spec"]["prompt"] == "#3"
        assert "create pipeline as agent-trigger" in s.api.calls
        assert "list pipelines agentharness.dev/trigger=payments-agent" in s.api.calls
        status, again = await s.deliver(labelled(3))
        assert (status, again["result"]) == (200, "duplicate") and len(s.api.runs) == 1

    served(test, ApiServer(pipeline_template=template))


def test_a_create_that_races_another_replica_is_a_duplicate() -> None:
    async def test(s: Served) -> None:
        s.api.create_refused = ApiException(status=409, reason="AlreadyExists")
        status, answer = await s.deliver(labelled(4))
        assert (status, answer["result"]) == (200, "duplicate")

    served(test)


def test_the_signature_is_checked_before_the_body_is_read_or_runs_are_listed() -> None:
    async def test(s: Served) -> None:
        status, answer = await s.deliver(labelled(5), secret=b"guessed")
        assert (status, answer["result"]) == (401, "bad_signature")
        assert not [c for c in s.api.calls if c.startswith(("list", "create"))]
        assert s.api.status is None  # not the forge's delivery: lastDelivery keeps the forge's last
        (event,) = s.api.events
        assert event[:2] == ("Warning", "BadSignature") and event[3] is not None  # one a minute
        assert await s.counted() == {"bad_signature": 1.0}

    served(test)


def test_a_refused_create_answers_422_with_the_api_servers_message() -> None:
    refusal = ApiException(status=403, reason="Forbidden")
    refusal.body = json.dumps(
        {"message": 'harnessruns is forbidden: User "system:serviceaccount:team-a:agent-trigger"'}
    )

    async def test(s: Served) -> None:
        status, answer = await s.deliver(labelled(6))
        assert (status, answer["result"]) == (422, "error")
        assert 'User "system:serviceaccount:team-a:agent-trigger"' in answer["reason"]
        assert s.api.events[-1][:2] == ("Warning", "RunNotCreated")

    served(test, ApiServer(create_refused=refusal))


def test_without_its_secret_nothing_is_verified_or_created() -> None:
    async def test(s: Served) -> None:
        status, answer = await s.deliver(labelled(7))
        assert (status, answer["result"]) == (503, "error")
        assert "webhook secret team-a/forge-webhook key secret" in answer["reason"]
        assert not s.api.runs

    served(test, ApiServer(secret=None))


def test_unknown_triggers_odd_paths_and_large_bodies_are_refused_early() -> None:
    async def test(s: Served) -> None:
        assert (await s.deliver(b"{}", path=f"/hooks/{NS}/other"))[0] == 404
        calls = len(s.api.calls)
        assert (await s.deliver(b"{}", path="/hooks/Team_A/x"))[0] == 404
        assert len(s.api.calls) == calls  # a name no trigger can have never reaches the API server
        status, answer = await s.deliver(b"{" + b" " * (64 * 1024) + b"}")
        assert (status, answer["result"]) == (413, "error")
        assert not [c for c in s.api.calls if c.startswith("get secret")]
        assert await s.counted() == {"error": 1.0}  # the unknown trigger is not a label

    served(test)


def test_a_strangers_command_is_refused_and_a_push_ignored() -> None:
    async def test(s: Served) -> None:
        status, answer = await s.deliver(
            commented(9, "mallory", "/agent drop the tests"), event="issue_comment"
        )
        assert (status, answer["result"]) == (200, "refused") and "drop the tests" not in json.dumps(answer)
        status, answer = await s.deliver(b'{"ref": "refs/heads/main"}', event="push")
        assert (status, answer["result"]) == (200, "ignored")
        assert not s.api.runs
        assert s.api.status is not None and s.api.status["lastDelivery"]["event"] == "push"

    served(test)


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_the_probes_answer_on_the_admin_port(path: str) -> None:
    async def test(s: Served) -> None:
        assert (await s.admin.get(path)).status == 200

    served(test)
